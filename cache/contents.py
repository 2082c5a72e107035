"""What a node cache directory holds, per dataset, and emptying it: what `lrs cache` shows and does.

Both go through the cache's ledger (`cache.ledger`), as every process of the node does: the listing is
one read of it, and a clean is an eviction down to a byte count (`cache.budget.Budget.make_room`), so a
file in use (a reader's shared lock) or being written is never deleted, and the ledger stays true.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

from cache.budget import Budget, Eviction
from cache.errors import CacheError
from cache.ledger import ledger_of
from cache.store import META_DIR
from cache.trust import check_owned_dir


@dataclass(frozen=True)
class DatasetUsage:
    """One dataset's share of a cache: its directory (the dataset's fingerprint), files and bytes."""

    fingerprint: str
    files: int
    bytes: int


@dataclass(frozen=True)
class CacheContents:
    """A cache directory's datasets (largest first), the bytes reserved by downloads in flight, and the
    total the budget counts."""

    root: str
    datasets: tuple[DatasetUsage, ...]
    reserved: int
    total: int


def cache_contents(cache_dir: str | os.PathLike[str]) -> CacheContents:
    """What the node cache at `cache_dir` holds.

    Raises:
        CacheError: `cache_dir` is not a node cache (no `.lrs/`).
        TrustError: it is not the user's own (`cache.trust`).
    """
    root = _cache_root(cache_dir)
    ledger = ledger_of(root)
    try:
        snapshot = ledger.snapshot()
    finally:
        ledger.close()
    files: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, size in snapshot.files:
        usage = files[key.split("/", 1)[0]]
        usage[0], usage[1] = usage[0] + 1, usage[1] + size
    datasets = sorted(
        (DatasetUsage(fp, n, size) for fp, (n, size) in files.items()),
        key=lambda d: (-d.bytes, d.fingerprint),
    )
    return CacheContents(root, tuple(datasets), snapshot.reserved, snapshot.total)


def clean_cache(cache_dir: str | os.PathLike[str], *, keep_bytes: int = 0) -> Eviction:
    """Evict the least recently used files of the cache at `cache_dir` until at most `keep_bytes` remain;
    files in use or being written stay (`Eviction.fits` is False when they alone exceed `keep_bytes`).

    Raises:
        CacheError: `cache_dir` is not a node cache (no `.lrs/`).
        TrustError: it is not the user's own (`cache.trust`).
    """
    if isinstance(keep_bytes, bool) or not isinstance(keep_bytes, int) or keep_bytes < 0:
        raise ValueError(f"Invalid keep_bytes ({keep_bytes!r}). Expected a number of bytes >= 0.")
    root = _cache_root(cache_dir)
    ledger = ledger_of(root)
    try:
        with ledger.transaction() as tx:
            return Budget(root, keep_bytes).make_room(tx, 0)
    finally:
        ledger.close()


def _cache_root(cache_dir: str | os.PathLike[str]) -> str:
    root = os.path.abspath(os.fspath(cache_dir))
    if not os.path.isdir(os.path.join(root, META_DIR)):
        raise CacheError(
            f"Invalid cache directory ({root}): no {META_DIR}/ in it. Expected a node cache, the "
            "--cache-dir of `lrs prewarm` or EpisodeStream(cache_dir=...)."
        )
    check_owned_dir(root, what="cache directory")
    check_owned_dir(os.path.join(root, META_DIR), what="cache directory")
    return root
