"""One job per output: the lock of a reshard's work directory.

A whole run and a finalize hold `<work>/lock` exclusively; each `--part` run holds it shared, so the
parts of one job run side by side while a second whole run (or a finalize before the parts end) is
refused, and holds `<work>/part-I-of-N.lock` exclusively, so one part does not run twice at once.

The locks are `fcntl.flock` locks on open files: atomic, and released by the kernel when the process
ends however it ends (SIGKILL, the OOM killer), so the lock of a dead process never blocks a rerun. Its
holder writes its host, pid and start time into the file, for the refusal to name it. A lock file is
removed by its exclusive holder on release; a process that locked a file just removed finds that the
path now names another file (or none) and takes the lock again. On a filesystem without flock (some
Lustre mounts), jobs are not locked, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cache.trust import owned_dir
from reshard.errors import ReshardError

log = logging.getLogger(__name__)

LOCK_NAME = "lock"
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL})


def holder_text(what: str) -> str:
    """What a holder writes into its lock file: host, pid, start time and what it runs."""
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": started, "what": what})


def describe_holder(path: Path) -> str:
    """The holder a lock file names, in words (`pid 123 on node7, since ...`)."""
    try:
        doc: Any = json.loads(path.read_text())
        return f"{doc['what']}, pid {doc['pid']} on {doc['host']}, since {doc['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _open_locked(path: Path, *, shared: bool) -> int | None:
    """An open descriptor of `path` holding its flock (None: the lock is held by another process).

    Raises:
        OSError: the filesystem has no flock (errno in `_UNSUPPORTED`), or the file cannot be made.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        # The previous holder may have removed the file between our open and our lock: lock what the
        # path names now.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _write_holder(fd: int, what: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder_text(what).encode(), 0)


def _refusal(out: Path, path: Path, holder: str) -> ReshardError:
    return ReshardError(
        f"Invalid --out ({out}): another lrs reshard is writing it ({holder}; lock {path}). Expected one job "
        "per output: wait for it to end, or stop it, then rerun."
    )


@contextlib.contextmanager
def job_lock(work: Path, out: Path, *, part: tuple[int, int] | None, what: str) -> Iterator[None]:
    """Hold the lock of the job in `work` while the body runs (see the module docstring).

    Args:
        work: the work directory (created 0700 if missing; one that exists must be the user's own:
            `cache.trust`).
        out: the output directory, for the message.
        part: `(index, count)` of a part run, which locks shared; None locks exclusively.
        what: what this process runs, written for a refused one to read (`reshard`, `part 3/16`).

    Raises:
        ReshardError: another process holds the lock, naming it.
        TrustError: the work directory is not the user's own.
    """
    owned_dir(str(work), what="work directory")
    path = work / LOCK_NAME
    try:
        fd = _open_locked(path, shared=part is not None)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        fd = -1
    if fd == -1:
        log.warning(
            "%s: the filesystem has no file locks; a second job on %s would not be detected", path, out
        )
        yield
        return
    if fd is None:
        raise _refusal(out, path, _holders(work, path))
    try:
        if part is None:
            _write_holder(fd, what)
            yield
        else:
            with _part_lock(work, out, part, what):
                yield
    finally:
        if part is None:  # the only holder: no process is left to need the file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            with contextlib.suppress(OSError):
                work.rmdir()  # when nothing else is left in it
        os.close(fd)


@contextlib.contextmanager
def _part_lock(work: Path, out: Path, part: tuple[int, int], what: str) -> Iterator[None]:
    path = work / f"part-{part[0]}-of-{part[1]}.lock"
    fd = _open_locked(path, shared=False)
    if fd is None:
        raise _refusal(out, path, describe_holder(path))
    try:
        _write_holder(fd, what)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def running_job(work: Path) -> str | None:
    """Who runs the job of the work directory `work` now (as a refused job's message says it), or None
    when no job holds its lock (or there is none). Creates nothing."""
    path = work / LOCK_NAME
    if not path.is_file() or path.is_symlink():
        return None
    try:
        fd = _open_locked(path, shared=False)
    except OSError:
        return None
    if fd is None:
        return _holders(work, path)
    os.close(fd)  # nobody holds it: a job that ended or was killed
    return None


def _holders(work: Path, path: Path) -> str:
    """Who holds the job lock: its exclusive holder, or the parts running (each in its part lock)."""
    try:
        fd = _open_locked(path, shared=True)
    except OSError:
        fd = None
    if fd is None:  # not even shared: a whole run or a finalize holds it
        return describe_holder(path)
    os.close(fd)
    parts = [describe_holder(p) for p in sorted(work.glob("part-*-of-*.lock")) if _held(p)]
    if not parts:
        return "another process"
    return parts[0] + (f", and {len(parts) - 1} more parts" if len(parts) > 1 else "")


def _held(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
