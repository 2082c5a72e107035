"""Fetch an ordered list of files into a node cache: the runner behind `lrs prewarm`.

The caller decides what and in which order (`reader.plan.fetch` plans it from the reader's schedule); this
module only fetches. Downloads run on the cache's own threads (`NodeCache.prefetch`, which starts them in
submission order); submissions follow the list with at most `ahead` files submitted and unfinished, so
downloads start in need order and the files needed first tend to land first. A slow file does not hold
back the ones after it: the bound is on files in flight, not on how far past the oldest one the run is.
Files already cached count as hits and are not downloaded again, which is what makes a rerun resume
an interrupted one.

When the run is over, the fetched files are marked used in reverse list order: under a byte budget the
cache evicts the least recently used file first, so a training run that must make room evicts the file
needed last, not the one it is about to read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

from tqdm import tqdm

from cache.arguments import check_int
from cache.cache_stats import CacheStats
from cache.errors import CacheError, LrsError
from cache.node import NodeCache
from cache.progress import progress_bar

DEFAULT_AHEAD = 16


@dataclass(frozen=True)
class FileRequest:
    """A dataset file to fetch, with what it must be (as the reader will ask for it).

    Attributes:
        path: dataset-relative path.
        bytes: its size, when known (checked, and reserved under a budget).
        sha256: its hash, when it must be checked.
        source: which of the caches given to `fetch_in_order` it goes to (a mixture's datasets share a
            cache directory, each under its own fingerprint).
    """

    path: str
    bytes: int | None = None
    sha256: str | None = None
    source: int = 0


@dataclass(frozen=True)
class FetchSummary:
    """What a run did.

    Attributes:
        files: files requested.
        bytes: their bytes (the known sizes).
        files_fetched: files this run downloaded.
        bytes_fetched: bytes received from the remote (failed integrity attempts included).
        files_cached: files that were already there (or that another process downloaded meanwhile).
        seconds: wall time of the run.
    """

    files: int
    bytes: int
    files_fetched: int
    bytes_fetched: int
    files_cached: int
    seconds: float


def fetch_in_order(
    cache: NodeCache | Sequence[NodeCache],
    files: Sequence[FileRequest],
    *,
    ahead: int = DEFAULT_AHEAD,
    progress: bool = True,
    desc: str = "prewarm",
) -> FetchSummary:
    """Fetch `files` into `cache`, submitted in list order with at most `ahead` of them in flight.

    Args:
        cache: the node cache (its `max_workers` bounds the downloads running at once), or one per
            dataset of a mixture (`FileRequest.source` picks it).
        files: what to fetch, each path once, in the order it is needed.
        ahead: files submitted but not finished at most.
        progress: show a tqdm bar in bytes (rate and ETA) on stderr; files found already cached are
            left out of it (an unknown size leaves the bar without a total).
        desc: the bar's label.

    Returns:
        Counts of files and bytes planned, fetched and found cached.

    Raises:
        ValueError: `ahead` < 1, or a path is listed twice.
        FetchError, IntegrityError: a file could not be fetched (the message names it; with several
            failures, the one earliest in the list); the files already submitted are finished first,
            the rest are not started.
        CacheError: a file could not be written to the cache directory.
    """
    check_int("ahead", ahead, 1)
    caches = _caches(cache)
    _check_unique(files, len(caches))
    started, before = time.monotonic(), _stats(caches)
    present = [_present(caches[f.source], f) for f in files]
    # Files already there finish at once: leaving them out of the bar keeps its rate and ETA honest.
    missing = [f.bytes for f, here in zip(files, present, strict=True) if not here]
    total = None if None in missing else sum(size or 0 for size in missing)
    with progress_bar(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=desc,
        disable=not progress,
        dynamic_ncols=True,
    ) as bar:
        _run(caches, files, present, ahead, bar)
    mark_need_order(caches, files)
    done = _delta(_stats(caches), before)
    return FetchSummary(
        files=len(files),
        bytes=sum(f.bytes or 0 for f in files),
        files_fetched=done.misses,
        bytes_fetched=done.bytes_fetched,
        files_cached=len(files) - done.misses,
        seconds=time.monotonic() - started,
    )


def mark_need_order(cache: NodeCache | Sequence[NodeCache], files: Sequence[FileRequest]) -> None:
    """Mark the cached copies of `files` used, last file first, so the first one is the most recent.

    Files not in the cache directory (evicted meanwhile, or served in place from a local source) are
    skipped.
    """
    caches = _caches(cache)
    for request in reversed(files):
        caches[request.source].mark_used(request.path)
    for one in caches:
        one.flush()


def _run(
    caches: Sequence[NodeCache], files: Sequence[FileRequest], present: Sequence[bool], ahead: int, bar: tqdm
) -> None:
    in_flight: dict[Future[str], int] = {}
    failures: dict[int, BaseException] = {}
    finished = 0

    def drain(until: int) -> None:
        nonlocal finished
        while len(in_flight) > until:
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                index = in_flight.pop(future)
                error = future.exception()
                if error is not None:
                    failures[index] = error
                    continue
                finished += 1
                if not present[index]:
                    bar.update(_size(files[index], future.result()))
                bar.set_postfix_str(f"{finished}/{len(files)} files", refresh=False)

    try:
        for index, request in enumerate(files):
            drain(ahead - 1)
            if failures:
                break
            cache = caches[request.source]
            in_flight[cache.prefetch(request.path, size=request.bytes, sha256=request.sha256)] = index
        drain(0)
    finally:
        # On an interrupt: queued downloads are dropped, running ones finish (they publish atomically).
        for future in in_flight:
            future.cancel()
    if failures:
        first = min(failures)
        _raise(caches[files[first].source], files[first], failures[first])


def _raise(cache: NodeCache, request: FileRequest, error: BaseException) -> None:
    if isinstance(error, LrsError):
        raise error  # the cache's errors name the file already
    if isinstance(error, OSError):
        raise CacheError(
            f"Invalid cache write ({cache.path(request.path)}): {error}. Expected a writable cache "
            "directory with free space."
        ) from error
    raise error


def _present(cache: NodeCache, request: FileRequest) -> bool:
    """Whether a cached copy of the right size is there (a guess for the bar: the cache checks again)."""
    try:
        size = os.stat(cache.path(request.path)).st_size
    except FileNotFoundError:
        return False
    return request.bytes is None or size == request.bytes


def _size(request: FileRequest, local: str) -> int:
    if request.bytes is not None:
        return request.bytes
    try:
        return os.path.getsize(local)
    except FileNotFoundError:  # evicted by another process since: it counts, its size is unknown
        return 0


def _check_unique(files: Sequence[FileRequest], caches: int) -> None:
    seen: set[tuple[int, str]] = set()
    for request in files:
        if not 0 <= request.source < caches:
            raise ValueError(f"Invalid source ({request.source}) of {request.path}. Expected < {caches}.")
        if (request.source, request.path) in seen:
            raise ValueError(f"Invalid file list: {request.path} is listed twice. Expected each path once.")
        seen.add((request.source, request.path))


def _caches(cache: NodeCache | Sequence[NodeCache]) -> list[NodeCache]:
    """One cache, or one per dataset of a mixture, as a list (`FileRequest.source` indexes it)."""
    return list(cache) if isinstance(cache, Sequence) else [cache]


def _stats(caches: Sequence[NodeCache]) -> CacheStats:
    return sum((cache.stats() for cache in caches), CacheStats())


def _delta(after: CacheStats, before: CacheStats) -> CacheStats:
    return CacheStats(**{name: value - getattr(before, name) for name, value in after.to_dict().items()})
