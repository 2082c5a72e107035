"""`NodeCache`: the one place dataset bytes land on a node, shared by every rank and worker on it.

One process downloads a missing file while the others wait on its lock (see `cache.store` for the
layout and the locking protocol, `cache.ledger` for the accounting every process shares, `cache.budget`
for the byte budget and eviction). Files are served only once published (temp file + rename) and
checked (size, and sha256 when the caller gives one).

A cache object survives being pickled to spawned workers (it re-opens everything there) and being
forked with DataLoader workers: each process gets its own threads, counters and remote connection.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from cache.arguments import check_int, local_dir
from cache.budget import Budget, Eviction
from cache.cache_stats import CacheCounters, CacheStats
from cache.errors import CacheError, FetchError, IntegrityError
from cache.fetch import DEFAULT_INTEGRITY_ATTEMPTS, Expected, download_verified, read_remote_range
from cache.ledger import Ledger, ledger_of, sweep_once
from cache.process import CacheProcessState, ProcessLocal, reopen
from cache.remote import Remote
from cache.store import (
    META_DIR,
    CacheLayout,
    FileLock,
    check_fingerprint,
    check_published,
    check_rel,
    check_sha256,
    check_size,
    create_empty,
    read_span,
)
from cache.trust import owned_dir, private_makedirs

# How often `hold` re-downloads a file that other processes evict before it can be pinned.
_PIN_ATTEMPTS = 3


class NodeCache:
    """A node-local, multi-process file cache of one dataset.

    Args:
        cache_dir: the node's cache directory, shared by every process (created if missing).
        remote: where the dataset lives (`cache.remote.resolve`).
        fingerprint: names the dataset's directory in the cache; the reader derives it from the index.
        max_bytes: budget over the whole cache directory, enforced by LRU eviction; None for none.
        max_workers: threads downloading in the background (`prefetch`).
        local_fast_path: serve a local path's files in place, their sha256 (when asked for) checked the
            first time each process opens them (not a `file://` URL's: see `Remote.reads_in_place`).
        integrity_attempts: downloads of a file before a wrong size or sha256 raises IntegrityError.

    Raises:
        ValueError: an argument is out of range.
        TrustError: the cache directory or its `.lrs/` is not the user's own (`cache.trust`).
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike[str],
        remote: Remote,
        *,
        fingerprint: str,
        max_bytes: int | None = None,
        max_workers: int = 4,
        local_fast_path: bool = True,
        integrity_attempts: int = DEFAULT_INTEGRITY_ATTEMPTS,
    ) -> None:
        for name, value, low in (
            ("max_workers", max_workers, 1),
            ("integrity_attempts", integrity_attempts, 1),
        ):
            check_int(name, value, low)
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
        ):
            raise ValueError(
                f"Invalid max_bytes ({max_bytes!r}). Expected a positive number of bytes or None."
            )
        root = os.path.abspath(local_dir(cache_dir, "cache_dir", hint="a node cache is a local directory"))
        self._layout = CacheLayout(root, check_fingerprint(fingerprint))
        self._remote = remote
        self._options: dict[str, Any] = {
            "max_bytes": max_bytes,
            "max_workers": max_workers,
            "local_fast_path": local_fast_path,
            "integrity_attempts": integrity_attempts,
        }
        self._budget = Budget(root, max_bytes)
        self._fast = local_fast_path and remote.reads_in_place
        self._owner_pid = os.getpid()
        self._proc = ProcessLocal(self._make_state)
        owned_dir(root, what="cache directory")
        owned_dir(os.path.join(root, META_DIR), what="cache directory")
        private_makedirs(os.path.join(root, fingerprint))

    def __repr__(self) -> str:
        return f"NodeCache({self._layout.root!r}, {self._remote!r}, fingerprint={self._layout.fingerprint!r})"

    @property
    def cache_dir(self) -> str:
        """The cache directory (absolute)."""
        return self._layout.root

    @property
    def fingerprint(self) -> str:
        """The dataset's directory name in the cache."""
        return self._layout.fingerprint

    def path(self, rel: str) -> str:
        """Where the cached copy of `rel` lives (or would live)."""
        return self._layout.data_path(check_rel(rel))

    def fetch(self, rel: str, *, size: int | None = None, sha256: str | None = None) -> str:
        """A local path of `rel`, complete and checked; downloads it (once per node) if needed.

        The file is not pinned: under a budget another process may evict it once this returns. Use
        `hold` to keep it while reading.

        Raises:
            FetchError: the remote has no such file or keeps failing.
            IntegrityError: the remote keeps serving a file of the wrong size or sha256.
        """
        state, expected = self._open_state(), _expected(rel, size, sha256)
        if self._fast:
            return self._local_source(state, rel, expected)
        future = state.pending((rel, size, sha256))
        return future.result() if future is not None else self._fetch(state, rel, expected)

    def prefetch(self, rel: str, *, size: int | None = None, sha256: str | None = None) -> Future[str]:
        """Start `fetch(rel)` in the background (at most `max_workers` at once); returns its future.

        Requests for the same file and expectations share one future while it runs.
        """
        state, expected = self._open_state(), _expected(rel, size, sha256)
        if self._fast and expected.sha256 is None:
            done: Future[str] = Future()
            done.set_result(self._local_source(state, rel, expected))
            return done
        # A download, or a file read in place whose content is hashed first: in the background.
        serve = self._local_source if self._fast else self._fetch
        future = state.submit_once((rel, size, sha256), serve, state, rel, expected)
        if future is None:
            raise self._closed_error()
        return future

    @contextlib.contextmanager
    def hold(self, rel: str, *, size: int | None = None, sha256: str | None = None) -> Iterator[str]:
        """Fetch `rel` and pin it against eviction (a shared lock) while the block runs.

        Yields:
            The local path, complete and checked.

        Raises:
            FetchError, IntegrityError: as `fetch`.
            CacheError: other processes evicted the file before it could be pinned, repeatedly.
        """
        state, expected = self._open_state(), _expected(rel, size, sha256)
        if self._fast:
            yield self._local_source(state, rel, expected)
            return
        target = self._layout.data_path(rel)
        with FileLock(self._layout.lock_path(rel)) as lock:
            downloaded = False
            for _ in range(_PIN_ATTEMPTS):
                lock.acquire(shared=True)
                problem = self._check(state, rel, expected)
                if problem is None:
                    if not downloaded:
                        state.counters.add(hits=1)
                    with state.holding(rel):
                        yield target
                    return
                self._refuse_if_held(state, rel, problem)
                lock.acquire(shared=False)
                if self._check(state, rel, expected) is not None:
                    self._download(state, rel, expected)
                    downloaded = True
                # Back to shared (the loop re-checks: the conversion is not atomic on every kernel).
        raise CacheError(
            f"Invalid budget (max_bytes {self._options['max_bytes']}) for {target}: it was evicted "
            f"{_PIN_ATTEMPTS} times before it could be used. Expected more room than the files in use."
        )

    def read_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes `[start, end)` of `rel`: from the cached (or local source) file when there, else one
        ranged read from the remote. An empty range returns `b""` without any I/O.

        Raises:
            ValueError: the range is not `0 <= start <= end <= size`.
            FetchError: the remote has no such file or keeps failing.
        """
        check_rel(rel)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, end)) or not 0 <= start <= end:
            raise ValueError(
                f"Invalid byte range ([{start!r}, {end!r})) for {rel}. Expected ints 0 <= start <= end."
            )
        state = self._open_state()
        if start == end:
            return b""
        if self._fast:
            try:
                return self._read_local(state, self._remote.path(rel), start, end, used=None)
            except FileNotFoundError as exc:
                raise _no_such_file(self._remote.path(rel)) from exc
        try:
            return self._read_local(state, self._layout.data_path(rel), start, end, used=rel)
        except FileNotFoundError:
            return read_remote_range(state.remote, rel, start, end, state.counters)

    def stats(self) -> CacheStats:
        """This process's counters for this cache object (see `sum_cache_stats` for all processes)."""
        return self._state().counters.snapshot()

    def mark_used(self, rel: str) -> None:
        """Record a use of the cached file `rel` now: it becomes the most recently used (written to the
        ledger within a second, or by `flush`; a file not in the cache is left out)."""
        check_rel(rel)
        if not self._fast:
            self._ledger().note_use(self._layout.key(rel))

    def flush(self) -> None:
        """Write this process's counters and the uses it recorded now."""
        self._state().counters.flush()
        if not self._fast:
            self._ledger().flush(quiet=True)

    def close(self) -> None:
        """Cancel queued prefetches, wait for running ones, write the counters file and the uses."""
        self._state().close()
        if not self._fast:
            self._ledger().flush(quiet=True)

    def __enter__(self) -> NodeCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "cache_dir": self._layout.root,
            "remote": self._remote,
            "fingerprint": self._layout.fingerprint,
            **self._options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # -- internals -----------------------------------------------------------------------------------

    def _state(self) -> CacheProcessState:
        return self._proc.get()

    def _ledger(self) -> Ledger:
        return ledger_of(self._layout.root)

    def _make_state(self) -> CacheProcessState:
        remote = self._remote if os.getpid() == self._owner_pid else reopen(self._remote)
        counters = CacheCounters(self._layout.root, self._layout.fingerprint)
        return CacheProcessState(remote, counters, self._options["max_workers"])

    def _open_state(self) -> CacheProcessState:
        state = self._state()
        if state.closed:
            raise self._closed_error()
        return state

    def _closed_error(self) -> CacheError:
        return CacheError(f"Invalid use of a closed cache ({self!r}). Expected calls before close().")

    def _local_source(self, state: CacheProcessState, rel: str, expected: Expected) -> str:
        """The source file itself, for a remote read in place (`self._fast`). With a sha256 asked for,
        its content is checked the first time this process opens it (`Verified`)."""
        path = self._remote.path(rel)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise _no_such_file(path) from exc
        try:
            size = os.fstat(fd).st_size
            if expected.size is not None and size != expected.size:
                raise IntegrityError(f"Invalid file ({path}): size {size}. Expected {expected.size} bytes.")
            got = None if expected.sha256 is None else state.verified.mismatch(fd, expected.sha256)
        finally:
            os.close(fd)
        if got is not None:
            raise IntegrityError(
                f"Invalid file ({path}): sha256 {got}, expected {expected.sha256}. Expected the file the index lists."
            )
        state.counters.add(hits=1)
        return path

    def _check(self, state: CacheProcessState, rel: str, expected: Expected) -> str | None:
        problem = check_published(
            self._layout.data_path(rel), size=expected.size, sha256=expected.sha256, verified=state.verified
        )
        if problem is None:
            self._ledger().note_use(self._layout.key(rel))
        return problem

    def _fetch(self, state: CacheProcessState, rel: str, expected: Expected) -> str:
        target = self._layout.data_path(rel)
        problem = self._check(state, rel, expected)
        if problem is not None:
            self._refuse_if_held(state, rel, problem)
            with FileLock(self._layout.lock_path(rel)) as lock:
                # Whoever holds the lock exclusively is downloading it: wait, then look again.
                lock.acquire(shared=False)
                problem = self._check(state, rel, expected)
                if problem is not None:
                    self._download(state, rel, expected)
        if problem is None:
            state.counters.add(hits=1)
        return target

    def _refuse_if_held(self, state: CacheProcessState, rel: str, problem: str) -> None:
        # Replacing a file needs its exclusive lock, which our own hold would deny forever.
        if state.holds(rel):
            raise IntegrityError(
                f"Invalid cached file ({self._layout.data_path(rel)}): {problem}, and this process holds "
                "it in use. Expected the same size and sha256 as the request that holds it."
            )

    def _download(self, state: CacheProcessState, rel: str, expected: Expected) -> None:
        """Download, check and publish `rel`; call with its exclusive lock held."""
        state.counters.add(misses=1)
        key = self._layout.key(rel)
        try:
            temp = download_verified(
                state.remote,
                rel,
                expected=expected,
                new_temp=lambda: self._new_temp(state, rel, expected.size),
                verified=state.verified,
                counters=state.counters,
                attempts=self._options["integrity_attempts"],
            )
            size = expected.size if expected.size is not None else os.stat(temp).st_size
            with self._ledger().transaction() as tx:
                result = self._budget.publish(tx, key, temp, size, reserved=expected.size)
        except BaseException:
            # Its reservation (and a temp file not published) go now, not at the next purge.
            with contextlib.suppress(CacheError, OSError), self._ledger().transaction() as tx:
                self._budget.release(tx, key)
            raise
        self._count(state, result)

    def _new_temp(self, state: CacheProcessState, rel: str, size: int | None) -> str:
        """Reserve room for `size` bytes (evicting under a budget), then create the download's temp file."""
        temp = self._layout.temp_path(rel, size)
        dead = sweep_once(self._layout.root, self._layout.data_path(rel))
        with self._ledger().transaction() as tx:
            for key in dead:
                tx.unreserve(key)
            result = self._budget.reserve(tx, self._layout.key(rel), temp, size)
        self._count(state, result)
        create_empty(temp)
        return temp

    @staticmethod
    def _count(state: CacheProcessState, result: Eviction) -> None:
        if result.count or not result.fits:
            state.counters.add(
                evictions=result.count, bytes_evicted=result.bytes, budget_overruns=int(not result.fits)
            )

    def _read_local(
        self, state: CacheProcessState, path: str, start: int, end: int, *, used: str | None
    ) -> bytes:
        data = read_span(path, start, end)
        if used is not None:
            self._ledger().note_use(self._layout.key(used))
        state.counters.add(hits=1)
        return data


def _expected(rel: str, size: int | None, sha256: str | None) -> Expected:
    check_rel(rel)
    return Expected(size=check_size(size), sha256=check_sha256(sha256))


def _no_such_file(path: str) -> FetchError:
    return FetchError(f"Invalid dataset path ({path}): no such file. Expected a file listed by the dataset.")
