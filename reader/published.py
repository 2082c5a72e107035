"""Reader counters shared between the processes of one stream (the trainer and its DataLoader workers).

Each process writes its `ReaderStats` to a small JSON file under the node cache directory
(`.lrs/reader-stats/<run>/<pid>-<nonce>.json`, replaced atomically), at most once a second while it
iterates and once more when its iteration ends; `EpisodeStream.stats(all_processes=True)` adds them up.
Runs older than a day are removed when a process starts publishing. The figures are advisory: a file
being replaced or written by something else is skipped, and a failed write only loses the figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator

from cache.store import META_DIR, atomic_write
from reader.stats import ReaderStats

# How often a process rewrites its counters while it iterates.
PUBLISH_INTERVAL_S = 1.0
# Published counters older than this are removed when a process starts publishing (runs long gone).
MAX_AGE_S = 24 * 3600.0


def published_path(cache_dir: str, run: str) -> str:
    """A new file for this process's counters of stream `run` (pruning runs older than `MAX_AGE_S`)."""
    directory = _directory(cache_dir, run)
    _prune(os.path.dirname(directory))
    return os.path.join(directory, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json")


def publish(path: str, pid: int, stats: ReaderStats) -> bool:
    """Write `stats` (without the cache counters) to `path`; False if it could not be written."""
    counters = stats.to_dict()
    counters.pop("cache")
    try:
        atomic_write(path, json.dumps({"pid": pid, "counters": counters}).encode())
    except OSError:
        return False
    return True


def read_published(cache_dir: str, run: str) -> Iterator[ReaderStats]:
    """The counters every process of stream `run` has published."""
    directory = _directory(cache_dir, run)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        return
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                yield ReaderStats.from_counters(json.load(f)["counters"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not ours: the figures are advisory


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
