"""What a cache object owns in one process, made afresh in every process that uses the object.

DataLoader workers are forked (or spawned) from the process that built the dataset and its cache. Threads
do not survive a fork, a lock copied into a child may be held by a thread that is not there, counters
copied from the parent would be counted twice, and fsspec's async filesystems (http, s3, hf) refuse to
run in a forked child. So everything mutable lives in a `CacheProcessState` that `ProcessLocal` rebuilds
whenever the process id changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from cache.cache_stats import CacheCounters
from cache.remote import Remote
from cache.store import Verified

T = TypeVar("T")

_make_lock = threading.RLock()  # a make() may get another ProcessLocal


def _reset_make_lock() -> None:
    global _make_lock
    _make_lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_make_lock)


class ProcessLocal(Generic[T]):
    """One value per process, made by `make()` on first use in each process."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._pid: int | None = None
        self._value: T | None = None

    def get(self) -> T:
        """This process's value."""
        pid = os.getpid()
        if self._pid != pid:
            with _make_lock:
                if self._pid != pid:
                    # Value first, pid second: a reader that sees our pid also sees our value.
                    self._value = self._make()
                    self._pid = pid
        return self._value  # type: ignore[return-value]

    def peek(self) -> T | None:
        """This process's value if `get` has made it, else None (nothing is made)."""
        return self._value if self._pid == os.getpid() else None


class CacheProcessState:
    """A cache object's remote, download threads, in-flight futures, holds, counters and checked file
    versions (`Verified`) in one process.

    Args:
        remote: the remote to read from (its filesystem must belong to this process).
        counters: this process's counters.
        max_workers: download threads.
    """

    def __init__(self, remote: Remote, counters: CacheCounters, max_workers: int) -> None:
        self.remote = remote
        self.counters = counters
        self.verified = Verified()
        self.closed = False
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="lrs-cache")
        self._lock = threading.Lock()
        self._in_flight: dict[Hashable, Future[Any]] = {}
        self._held: Counter[str] = Counter()

    def pending(self, key: Hashable) -> Future[Any] | None:
        """The running background task of `key`, if any."""
        with self._lock:
            return self._in_flight.get(key)

    def submit_once(self, key: Hashable, fn: Callable[..., T], *args: Any) -> Future[T] | None:
        """Run `fn(*args)` in the background unless `key` already runs; None once closed."""
        with self._lock:
            if self.closed:
                return None
            future = self._in_flight.get(key)
            if future is not None:
                return future
            future = self._executor.submit(fn, *args)
            self._in_flight[key] = future
        # Outside the lock: a future already done runs the callback right here, and it takes the lock.
        future.add_done_callback(lambda f: self._forget(key, f))
        return future

    def _forget(self, key: Hashable, future: Future[Any]) -> None:
        with self._lock:
            if self._in_flight.get(key) is future:
                del self._in_flight[key]

    @contextlib.contextmanager
    def holding(self, rel: str) -> Iterator[None]:
        """Count `rel` as held by this process for the duration of the block."""
        with self._lock:
            self._held[rel] += 1
        try:
            yield
        finally:
            with self._lock:
                self._held[rel] -= 1

    def holds(self, rel: str) -> bool:
        """Whether this process holds `rel` now."""
        with self._lock:
            return self._held[rel] > 0

    def close(self) -> None:
        """Refuse new tasks, cancel queued ones, wait for running ones, write the counters."""
        with self._lock:
            self.closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.counters.flush()


def reopen(remote: Remote) -> Remote:
    """The same remote with a filesystem of this process's own.

    fsspec rebuilds a filesystem from its pickle; in a forked child fsspec's instance cache has been
    reset, so the result has its own event loop and connections.
    """
    return dataclasses.replace(remote, fs=pickle.loads(pickle.dumps(remote.fs)))
