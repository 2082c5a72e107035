"""Cache counters: per process in memory, per process on disk, summed across processes on request.

Each cache object writes its counters to `<cache_dir>/.lrs/stats/<pid>-<token>.json` with a
`cache.counter_files.CounterFile` (at most once a second while they change, when the cache is closed and
when the process exits); `sum_cache_stats` sums the files of every process, dead or alive, leaving out
with a warning a file that is not ours (`cache.counter_files` says why and when).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cache.counter_files import CounterFile, read_counter_files
from cache.store import META_DIR


@dataclass(frozen=True)
class CacheStats:
    """Counters of a node cache.

    Attributes:
        hits: whole-file requests served without downloading (local fast path and waits for another
            process's download included), and ranged reads served from a cached file.
        misses: whole-file requests this process downloaded.
        bytes_fetched: bytes received from the remote (failed integrity attempts included).
        evictions: files this process evicted to stay within the budget.
        bytes_evicted: their bytes.
        fetch_seconds: wall time spent in remote reads (summed over threads).
        range_reads: ranged reads sent to the remote.
        integrity_retries: downloads discarded because their size or sha256 was wrong.
        budget_overruns: downloads that did not fit in `max_bytes` even after evicting every file not
            in use or in flight (the budget is too small for the files in use).
    """

    hits: int = 0
    misses: int = 0
    bytes_fetched: int = 0
    evictions: int = 0
    bytes_evicted: int = 0
    fetch_seconds: float = 0.0
    range_reads: int = 0
    integrity_retries: int = 0
    budget_overruns: int = 0

    def __add__(self, other: CacheStats) -> CacheStats:
        if not isinstance(other, CacheStats):
            return NotImplemented
        return CacheStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)}
        )

    def to_dict(self) -> dict[str, int | float]:
        """The counters as a JSON-able dict."""
        return dataclasses.asdict(self)


_FIELDS = frozenset(f.name for f in dataclasses.fields(CacheStats))


class CacheCounters:
    """Thread-safe counters of one cache object in one process, mirrored to a per-process file.

    Args:
        cache_dir: the cache directory.
        fingerprint: the dataset they count for (written into the file, for filtering).
    """

    def __init__(self, cache_dir: str, fingerprint: str) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int | float] = dict.fromkeys(_FIELDS, 0)
        self._fingerprint = fingerprint
        self._file = CounterFile(_directory(cache_dir), self._payload)

    def add(self, **deltas: int | float) -> None:
        """Add to counters by name (the file is written at most once a second, and by `flush`)."""
        with self._lock:
            unknown = deltas.keys() - _FIELDS
            if unknown:
                raise TypeError(
                    f"Invalid counter ({sorted(unknown)[0]!r}). Expected one of {sorted(_FIELDS)}."
                )
            for name, delta in deltas.items():
                self._values[name] += delta
        self._file.changed()

    def snapshot(self) -> CacheStats:
        """The counters now."""
        with self._lock:
            return CacheStats(**self._values)  # type: ignore[arg-type]

    def flush(self) -> None:
        """Write the counters file if anything changed since the last write."""
        self._file.flush()

    def _payload(self) -> dict[str, Any]:
        return {"fingerprint": self._fingerprint, "counters": self.snapshot().to_dict()}


def sum_cache_stats(cache_dir: str | os.PathLike[str], *, fingerprint: str | None = None) -> CacheStats:
    """Sum the counters every process wrote under `cache_dir` (only one dataset's, if `fingerprint`).

    A counters file that is not what this module writes is left out with a
    `cache.counter_files.CountersWarning` naming it.
    """
    return sum(
        read_counter_files(_directory(os.fspath(cache_dir)), lambda p: _parse(p, fingerprint)), CacheStats()
    )


def _directory(cache_dir: str) -> str:
    return os.path.join(cache_dir, META_DIR, "stats")


def _parse(payload: Mapping[str, Any], fingerprint: str | None) -> CacheStats | None:
    counters = payload["counters"]
    unknown = set(counters) - _FIELDS
    if unknown:
        raise KeyError(sorted(unknown)[0])
    if fingerprint is not None and payload["fingerprint"] != fingerprint:
        return None
    return CacheStats(**counters)
