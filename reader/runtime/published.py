"""Reader counters shared between the processes of one stream (the trainer and its DataLoader workers).

Each process writes its `ReaderStats` (the cache counters included: this stream's cache objects in that
process, not the node's) with a `cache.counter_files.CounterFile` under the node cache directory (`.lrs/reader-stats/<run>/`): at most
once a second while it iterates, once more when its iteration ends and when it exits;
`EpisodeStream.stats(all_processes=True)` adds them up (a file that is not ours is left out with a
warning, as `cache.counter_files` says). Runs older than a day are removed when a process starts
publishing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from cache.cache_stats import CacheStats
from cache.counter_files import CounterFile, read_counter_files
from cache.store import META_DIR
from reader.stats import ReaderStats

# Published counters older than this are removed when a process starts publishing (runs long gone).
MAX_AGE_S = 24 * 3600.0


def published_file(cache_dir: str, run: str, stats: Callable[[], ReaderStats]) -> CounterFile:
    """This process's counters file for stream `run`, written from `stats()` (pruning runs older than
    `MAX_AGE_S`)."""
    directory = _directory(cache_dir, run)
    _prune(os.path.dirname(directory))
    return CounterFile(directory, lambda: _payload(stats()))


def read_published(cache_dir: str, run: str) -> list[ReaderStats]:
    """The counters every process of stream `run` has published."""
    return read_counter_files(_directory(cache_dir, run), _parse)


def _payload(stats: ReaderStats) -> dict[str, Any]:
    counters = stats.to_dict()
    return {"counters": {k: v for k, v in counters.items() if k != "cache"}, "cache": counters["cache"]}


def _parse(payload: Mapping[str, Any]) -> ReaderStats:
    cache = payload.get("cache", {})
    if not isinstance(cache, dict) or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) for v in cache.values()
    ):
        raise ValueError(f"cache counters {cache!r:.40}, expected an object of numbers")
    return replace(ReaderStats.from_counters(payload["counters"]), cache=CacheStats(**cache))


def _directory(cache_dir: str, run: str) -> str:
    return os.path.join(cache_dir, META_DIR, "reader-stats", run)


def _prune(root: str) -> None:
    try:
        runs = os.listdir(root)
    except FileNotFoundError:
        return
    cutoff = time.time() - MAX_AGE_S
    for run in runs:
        path = os.path.join(root, run)
        with contextlib.suppress(OSError):
            if os.path.getmtime(path) < cutoff:
                shutil.rmtree(path, ignore_errors=True)
