"""The byte budget of a cache directory: reserve room for a download, publish it, evict in LRU order.

Everything here runs inside one ledger transaction (`cache.ledger`), so it sees the running total and
the LRU order of every process at once, and costs a few indexed row operations however many files the
cache holds: no directory is listed.

A download reserves the size it will reach before its temp file exists, and the reservation becomes the
file's row when the file is published (renamed into place, in the same transaction). With sizes known,
disk use stays within `max_bytes` at every instant unless files in use (never evicted) and files in
flight alone exceed it; a download of unknown size reserves nothing and is settled when it is published.

Eviction is safe among concurrent evictors, readers and downloaders: a file is deleted only under a
non-blocking exclusive flock of its lock file, which fails while any reader holds it shared (in use) or
a downloader holds it exclusively (being rewritten); such files are skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

from cache.ledger import Ledger, Transaction, dataset_files
from cache.nofollow import DIR_FLAGS
from cache.store import FileLock, lock_path_of

log = logging.getLogger(__name__)

# Rows read at a time from the LRU end: eviction usually stops after one or two.
_LRU_BATCH = 16


@dataclass(frozen=True)
class Eviction:
    """What `make_room` did: files evicted, their bytes, the usage it left (request excluded), and
    whether the request fit within the budget."""

    count: int = 0
    bytes: int = 0
    used: int = 0
    fits: bool = True


class Budget:
    """Keeps a cache directory within `max_bytes` (None: no limit, the bookkeeping alone).

    Args:
        root: the cache directory.
        max_bytes: the budget over every dataset in `root`.
    """

    def __init__(self, root: str, max_bytes: int | None) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def reserve(self, tx: Transaction, key: str, temp: str, size: int | None) -> Eviction:
        """Make room for and reserve `size` bytes for the download of `key` into `temp` (not created
        yet); call with the exclusive lock of `key` held.

        Reservations of `key` left by downloads that died are dropped and their temp files deleted
        (holding the lock proves them dead).
        """
        for stale in tx.unreserve_all(key):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                tx.ledger.unlink(stale)
        result = self.make_room(tx, size or 0)
        tx.reserve(self._key(temp), key, size or 0)
        return result

    def release(self, tx: Transaction, key: str) -> None:
        """Drop the reservations of a failed download of `key` (deleting any temp file left)."""
        for temp in tx.unreserve_all(key):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                tx.ledger.unlink(temp)

    def publish(self, tx: Transaction, key: str, temp: str, size: int, *, reserved: int | None) -> Eviction:
        """Rename the verified `temp` onto the file of `key` and record it in place of its reservation
        (of `reserved` bytes).

        The rename comes first: a process killed before the commit leaves a dead reservation, and the
        purge that drops it records the file it finds in place.
        """
        os.replace(temp, os.path.join(self.root, key))
        tx.unreserve(self._key(temp))
        tx.record(key, size)
        # A download whose size was unknown when it reserved is settled now.
        return self.make_room(tx, 0) if reserved is None or size > reserved else Eviction()

    def make_room(self, tx: Transaction, need: int, *, rebuilt: bool = False) -> Eviction:
        """Evict least recently used files until `need` more bytes fit.

        Files in use or being written are skipped. When the rest cannot make room the budget is
        overrun (a warning is logged): blocking here could deadlock a process against its own holds.
        """
        if self.max_bytes is None:
            return Eviction()
        used = tx.used()
        if used + need <= self.max_bytes:
            return Eviction(used=used)
        if tx.ledger.purge_due() and tx.purge_dead():
            used = tx.used()
        count = freed = skipped = 0
        missing = False
        while used + need > self.max_bytes:
            batch = tx.least_recent(_LRU_BATCH, skipped)
            if not batch:
                break
            for key, size in batch:
                if used + need <= self.max_bytes:
                    break
                outcome = _evict(tx.ledger, key)
                if outcome == "in use":
                    skipped += 1
                    continue
                tx.forget(key)
                used -= size
                if outcome == "missing":
                    missing = True
                else:
                    count, freed = count + 1, freed + size
                    log.debug("evicted %s (%d bytes)", key, size)
        if missing and not rebuilt:
            # A recorded file was gone: files were removed behind the ledger's back (or an evictor died
            # before its commit). One scan makes the ledger true again.
            log.info("cache %s: a recorded file is missing; rebuilding the ledger", self.root)
            tx.rebuild()
            return self._merge(Eviction(count, freed), self.make_room(tx, need, rebuilt=True))
        if used + need > self.max_bytes and tx.purge_dead():
            return self._merge(Eviction(count, freed), self.make_room(tx, need, rebuilt=True))
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

    @staticmethod
    def _merge(first: Eviction, then: Eviction) -> Eviction:
        return Eviction(first.count + then.count, first.bytes + then.bytes, then.used, then.fits)

    def _key(self, path: str) -> str:
        """The ledger key of a path under the cache directory."""
        return path[len(self.root) + 1 :]


def _evict(ledger: Ledger, key: str) -> str:
    """Delete one published file unless it is in use: "evicted", "in use" or "missing" (a key whose path
    crosses a symbolic link counts as missing: the link is never followed, see `Ledger.unlink`)."""
    with FileLock(lock_path_of(ledger.root, os.path.join(ledger.root, key))) as lock:
        if not lock.acquire(shared=False, blocking=False):
            return "in use"
        try:
            ledger.unlink(key)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return "missing"
        return "evicted"


def disk_usage(root: str) -> int:
    """Bytes of every file under the dataset directories of `root`, temp files included, links not
    followed (for checks)."""
    fd = os.open(root, DIR_FLAGS)
    try:
        return sum(st.st_size for _key, _dir_fd, st in dataset_files(fd))
    finally:
        os.close(fd)
