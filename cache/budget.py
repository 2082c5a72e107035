"""The byte budget of a cache directory: what is on disk, what is reserved, and LRU eviction.

LRU order comes from file atimes, which every hit sets explicitly (`store.touch`), rather than from a
sqlite database. The filesystem stays the single source of truth: a process SIGKILLed between publishing
a file and recording it cannot leave an index out of step with the disk, the hit path takes no database
lock, and nothing needs repair after a crash. The price is a directory scan, done only when a download
must reserve space under a budget; it is O(files cached), small next to the download that follows.

Space is reserved under one exclusive flock (`.lrs/budget.lock`) so that concurrent reservations see
each other: a download creates its temp file, named with the size it will reach, before the lock is
released, and the scan counts live temp files at that size. With sizes known, disk use stays within
`max_bytes` unless files in use (never evicted) and files in flight alone exceed it.

Publishing (the rename of a verified temp file onto its target) holds the same lock shared: a scan that
lists a temp file, then finds it renamed when it stats it, would miss the file under both names and let
a reservation overrun the budget.

Eviction is safe among concurrent evictors, readers and downloaders: a file is deleted only under a
non-blocking exclusive flock of its lock file, which fails while any reader holds it shared (in use) or
a downloader holds it exclusively (being rewritten); such files are skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from cache.store import META_DIR, FileLock, lock_path_of, parse_temp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """A published file of the cache: the LRU key (atime) and its size."""

    atime_ns: int
    size: int
    path: str


@dataclass(frozen=True)
class Usage:
    """What a scan found.

    Attributes:
        files: published files, least recently used first.
        in_flight: bytes reserved by live downloads (at least what they already wrote).
        stale_removed: temp files of dead downloads deleted by the scan.
    """

    files: tuple[Entry, ...]
    in_flight: int
    stale_removed: int = 0

    @property
    def total(self) -> int:
        """Bytes on disk or promised to downloads in flight."""
        return self.in_flight + sum(e.size for e in self.files)


@dataclass(frozen=True)
class Eviction:
    """What `make_room` did: files evicted, their bytes, the usage it left (request excluded), and
    whether the request fit within the budget."""

    count: int = 0
    bytes: int = 0
    used: int = 0
    fits: bool = True


class Budget:
    """Keeps a cache directory within `max_bytes`.

    Args:
        root: the cache directory.
        max_bytes: the budget over every dataset in `root`.
    """

    def __init__(self, root: str, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock_path = budget_lock_path(root)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the budget lock (reserve and evict under it; never block on a file lock under it)."""
        with FileLock(self._lock_path) as lock:
            lock.acquire(shared=False)
            yield

    def make_room(self, need: int) -> Eviction:
        """Evict least recently used files until `need` more bytes fit; call under `locked()`.

        Files in use or being written are skipped. When the rest cannot make room the budget is
        overrun (a warning is logged): blocking here could deadlock a process against its own holds.
        """
        usage = scan(self.root)
        used, count, freed = usage.total, 0, 0
        for entry in usage.files:
            if used + need <= self.max_bytes:
                break
            size = _evict(self.root, entry)
            if size is not None:
                used, count, freed = used - size, count + 1, freed + size
                log.debug("evicted %s (%d bytes)", entry.path, size)
        fits = used + need <= self.max_bytes
        if not fits:
            log.warning(
                "cache %s over budget: %d bytes in use or in flight + %d requested > max_bytes %d",
                self.root,
                used,
                need,
                self.max_bytes,
            )
        return Eviction(count=count, bytes=freed, used=used, fits=fits)


def budget_lock_path(root: str) -> str:
    """The lock serialising reservation and eviction in the cache directory `root`."""
    return os.path.join(root, META_DIR, "budget.lock")


def publish(root: str, temp: str, target: str) -> None:
    """Rename a verified temp file onto its target, never while a scan lists the directory."""
    with FileLock(budget_lock_path(root)) as lock:
        lock.acquire(shared=True)
        os.replace(temp, target)


def scan(root: str) -> Usage:
    """Published files (LRU first) and in-flight bytes of every dataset in `root`; drops stale temps."""
    files: list[Entry] = []
    in_flight = stale = 0
    for directory in _dataset_dirs(root):
        for dirpath, _dirnames, filenames in os.walk(directory):
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                temp = parse_temp(name)
                if temp is None:
                    files.append(Entry(st.st_atime_ns, st.st_size, path))
                elif _download_alive(root, os.path.join(dirpath, temp[0])):
                    in_flight += max(st.st_size, temp[1] or 0)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                        stale += 1
    files.sort(key=lambda e: (e.atime_ns, e.path))
    return Usage(files=tuple(files), in_flight=in_flight, stale_removed=stale)


def disk_usage(root: str) -> int:
    """Bytes of every file under the dataset directories of `root`, temp files included (for checks)."""
    total = 0
    for directory in _dataset_dirs(root):
        for dirpath, _dirnames, filenames in os.walk(directory):
            for name in filenames:
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def _dataset_dirs(root: str) -> list[str]:
    try:
        with os.scandir(root) as entries:
            return sorted(e.path for e in entries if e.is_dir() and not e.name.startswith("."))
    except FileNotFoundError:
        return []


def _download_alive(root: str, target: str) -> bool:
    # Downloaders hold the target's lock exclusively for as long as their temp file exists.
    with FileLock(lock_path_of(root, target)) as lock:
        return not lock.acquire(shared=True, blocking=False)


def _evict(root: str, entry: Entry) -> int | None:
    """Delete one published file unless it is in use; its size, or None when skipped."""
    with FileLock(lock_path_of(root, entry.path)) as lock:
        if not lock.acquire(shared=False, blocking=False):
            return None
        try:
            st = os.stat(entry.path)
        except FileNotFoundError:
            return None
        # Re-checked under the lock: a file used or replaced since the scan is no longer the LRU one.
        if st.st_atime_ns != entry.atime_ns:
            return None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
            return st.st_size
        return None
