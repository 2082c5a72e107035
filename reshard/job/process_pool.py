"""A pool of spawned worker processes for the offline tools: `reshard`'s tasks and `verify`'s checks.

One pool, so that both commands stop the same way:

- the job's context (the source's metadata, megabytes at scale) travels in a file each worker reads at
  start, never down the pool's start-up pipe; the pipe carries its sha256, which a worker checks before
  it unpickles the file (`_write_context`, `_read_context`);
- a Ctrl-C or SIGTERM that arrives while the workers start is held until they are whole, then raised,
  and the workers never see a Ctrl-C (`_spawning_deaf_to_sigint`); the parent stops them with SIGTERM
  (`_stop_workers`), so the command exits 130 or 143 without a worker's traceback;
- a worker that dies (SIGKILL, the OOM killer) is one `WorkerDied` error (exit 3), not a hang;
- the first job that raises stops the rest.

A job is a picklable value; `call(context, job)` runs it in a worker and must be a module-level function.
A job may report progress as it goes (`report_progress`): the items reach the parent's `on_progress`
through one pipe, read by a thread of the parent, so a bar moves while a long job runs. Each item is one
write of less than `PIPE_BUF` bytes, atomic among writers without a lock, so a worker killed mid-job
leaves neither a torn message nor a lock held that would hang the parent.
`WorkerPool` keeps its workers for several batches of jobs (verify's check classes); `run_in_pool` runs
one batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from reshard.errors import ReshardError, WorkerDied

C = TypeVar("C")
J = TypeVar("J")
R = TypeVar("R")

_WORKER_CONTEXT: Any = None
_END = "lrs-progress-end"  # the last item of a pool's progress pipe, sent by the parent
_PROGRESS: Any = None  # the write end of the pool's progress pipe, in a worker of a pool that has one


def report_progress(item: object) -> None:
    """Hand `item` (picklable, small) to the pool's `on_progress` in the parent; nothing outside a pool."""
    if _PROGRESS is not None:
        _PROGRESS.send(item)


def _init_worker(context_file: Path, digest: str, progress: Any = None) -> None:
    global _WORKER_CONTEXT, _PROGRESS
    _PROGRESS = progress
    # Ctrl-C reaches every process of the terminal's group: the parent alone handles it, stopping the
    # workers with SIGTERM (`_stop_workers`) and removing what they were writing. The worker started
    # with SIGINT blocked (`_spawning_deaf_to_sigint`); ignoring it discards one that came during
    # start-up, and from then on none can reach it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.environ.setdefault("SVT_LOG", "1")
    _WORKER_CONTEXT = pickle.loads(_read_context(context_file, digest))


def _read_context(context_file: Path, digest: str) -> bytes:
    """The context file's bytes, once their sha256 is the one its writer sent down the pipe: only then
    are they unpickled (an unpickled file runs code). The file lies in a 0700 directory this job made in
    a work directory the user owns (`cache.trust`); the digest makes sure of it whatever the directory."""
    data = context_file.read_bytes()
    if hashlib.sha256(data).hexdigest() != digest:
        raise ReshardError(
            f"Invalid worker context ({context_file}): not the file this job wrote. Expected its sha256 "
            f"{digest}: another process replaced it."
        )
    return data


def _call_in_worker(call: Callable[[Any, J], R], job: J) -> R:
    if _WORKER_CONTEXT is None:
        raise RuntimeError("worker not initialised")
    return call(_WORKER_CONTEXT, job)


def _write_context(context: object, tmp_dir: Path) -> tuple[Path, str]:
    """The workers' context, in a new file of `tmp_dir` that each worker reads at start; its sha256,
    which the workers get with the file's name and check before they unpickle it.

    Not in the pool's start-up arguments: those go down a pipe that the parent writes to the end while
    the child imports, and a child that dies meanwhile (SIGTERM to the job, out of memory) would leave
    the parent blocked on that write for ever, its signals held (`_spawning_deaf_to_sigint`). A context
    is 50 KB to megabytes (it holds the source's episodes); a file name and a digest never fill a pipe.
    The file goes in a directory of its own, 0700 with an unpredictable name (`tempfile.mkdtemp`).
    """
    tmp_dir.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", suffix=".context", dir=tmp_dir))
    data = pickle.dumps(context)
    path = private / "context.pickle"
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as f:
        f.write(data)
    return path, hashlib.sha256(data).hexdigest()


_HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _spawning_deaf_to_sigint() -> Iterator[None]:
    """Start worker processes that never see a Ctrl-C, and hold a SIGINT or SIGTERM that arrives
    meanwhile until every started worker is whole (then it is raised as it would have been).

    A spawned worker imports for a second or more before `_init_worker` can ignore SIGINT; a Ctrl-C in
    that time would print its `KeyboardInterrupt` traceback. So the workers start with SIGINT blocked:
    the mask of the thread that forks is inherited across fork and exec (a Python handler is not, and
    SIG_IGN here would lose the signal). Meanwhile this process records the signals instead of raising
    them, so that no worker is left half-started, outside the pool's table and `_stop_workers`' reach;
    nothing done meanwhile waits on a worker (`_write_context`), so a held signal is raised within
    milliseconds.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # The resource tracker unblocks SIGINT after starting itself (multiprocessing.resource_tracker): start
    # it before the mask is set.
    resource_tracker.ensure_running()
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in _HELD}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a SIGINT held by the mask is recorded here
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        if caught:
            signal.raise_signal(caught[0])


def _stop_workers(pool: ProcessPoolExecutor, *, grace_s: float = 30.0) -> None:
    """SIGTERM to every worker of `pool`, and wait until they have ended (one that takes longer than
    `grace_s` is killed): what they were writing is in a temp directory, which the caller removes.
    (The executor has no public list of its processes.)"""
    # Every child this process started: a worker whose start the signal interrupted is not in the
    # pool's table yet, and would fail reading its start-up data once this process is gone.
    registered = list((getattr(pool, "_processes", None) or {}).values())
    processes = [p for p in {*registered, *multiprocessing.active_children()} if p.pid is not None]
    for process in processes:
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


class WorkerPool:
    """`workers` spawned processes sharing one context, for one or more `run`s; a context manager.

    Args:
        context: what every job shares, pickled once into a file of a new 0700 directory in `tmp_dir`
            (removed at the end); workers check its sha256 before they unpickle it.
        workers: processes.
        tmp_dir: where the context file goes.
        rerun: what to do after a worker died, for the error message.
    """

    def __init__(
        self,
        context: object,
        *,
        workers: int,
        tmp_dir: Path,
        rerun: str,
        on_progress: Callable[[Any], None] | None = None,
    ) -> None:
        self.context, self.workers, self.tmp_dir, self.rerun = context, workers, tmp_dir, rerun
        self.on_progress = on_progress
        self._pool: ProcessPoolExecutor | None = None
        self._context_file: Path | None = None
        self._progress: tuple[Any, Any] | None = None  # the progress pipe's (read, write) ends
        self._reader: threading.Thread | None = None

    def __enter__(self) -> WorkerPool:
        self._context_file, digest = _write_context(self.context, self.tmp_dir)
        spawn = multiprocessing.get_context("spawn")
        if self.on_progress is not None:
            self._progress = spawn.Pipe(duplex=False)
            self._reader = threading.Thread(target=self._read_progress, name="lrs-progress", daemon=True)
            self._reader.start()
        self._pool = ProcessPoolExecutor(
            self.workers,
            mp_context=spawn,
            initializer=_init_worker,
            initargs=(self._context_file, digest, None if self._progress is None else self._progress[1]),
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._reader is not None and self._progress is not None:
            self._progress[1].send(_END)  # after every worker is gone: what they sent is read before it
            self._reader.join()
            for end in self._progress:
                end.close()
        if self._context_file is not None:
            shutil.rmtree(self._context_file.parent, ignore_errors=True)

    def _read_progress(self) -> None:
        assert self.on_progress is not None and self._progress is not None
        while (item := self._progress[0].recv()) != _END:
            self.on_progress(item)

    def run(
        self, jobs: Sequence[J], call: Callable[[Any, J], R], on_result: Callable[[int, R], None]
    ) -> None:
        """Run `call(context, job)` for every job; `on_result(position in jobs, result)` in this process
        as jobs finish (in any order). `call` is a module-level function (pickled by name).

        Raises:
            WorkerDied: a worker process ended abruptly.
            Exception: the first exception a job raised (the jobs not started are cancelled).
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("Invalid use of WorkerPool.run outside its `with` block.")
        try:
            futures: dict[Future[R], int] = {}
            with _spawning_deaf_to_sigint():  # submit starts the workers
                for position, job in enumerate(jobs):  # a worker may die while jobs are still being submitted
                    futures[pool.submit(_call_in_worker, call, job)] = position
            remaining = set(futures)
            while remaining:
                done, remaining = wait(remaining, return_when=FIRST_EXCEPTION)
                for future in done:
                    if future.exception() is not None:
                        for other in remaining:
                            other.cancel()
                        future.result()  # raises the job's exception
                    # Handed over, a result is the caller's alone: kept here too, every job's result would
                    # live until the last job ends (`lrs verify --report` merges its frames as they come).
                    on_result(futures.pop(future), future.result())
        except BrokenProcessPool as exc:
            # CPython 3.11 can start a worker (on submit) just after it terminated the others for the broken
            # pool; that one waits for work forever and shutdown() with it. Every child left is a worker.
            for child in multiprocessing.active_children():
                child.terminate()
            workers = list((getattr(pool, "_processes", None) or {}).values())
            for process in workers:
                process.join(5)
            raise WorkerDied(
                f"A worker process ended abruptly (killed, or out of memory). Expected it to finish: {self.rerun}; "
                "fewer --workers use less memory.",
                exits={p.pid: p.exitcode for p in workers if p.pid is not None},
            ) from exc
        except BaseException as exc:
            if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM here: the workers unwind their jobs too
                _stop_workers(pool)
            raise


def run_in_pool(
    jobs: Sequence[J],
    call: Callable[[C, J], R],
    context: C,
    *,
    workers: int,
    tmp_dir: Path,
    on_result: Callable[[int, R], None],
    rerun: str,
    on_progress: Callable[[Any], None] | None = None,
) -> None:
    """`WorkerPool(context, ...).run(jobs, call, on_result)` in a pool of its own."""
    with WorkerPool(context, workers=workers, tmp_dir=tmp_dir, rerun=rerun, on_progress=on_progress) as pool:
        pool.run(jobs, call, on_result)
