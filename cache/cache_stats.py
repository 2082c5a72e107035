"""Cache counters: per process in memory, per process on disk, summed across processes on request.

Each cache object writes its counters to `<cache_dir>/.lrs/stats/<pid>-<token>.json` (atomically) at most
once a second while they change, when the cache is closed and when the process exits (a DataLoader
worker included), so a process that is killed loses at most a second of counts. `sum_cache_stats` sums
the files of every process, dead or alive.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
import uuid
import weakref
from dataclasses import dataclass

from cache.errors import CacheError
from cache.store import META_DIR, at_exit, atomic_write

_FLUSH_INTERVAL_S = 1.0


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
        self._path = os.path.join(cache_dir, META_DIR, "stats", f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        self._flushed_at = float("-inf")
        self._dirty = False
        self._cache_dir = cache_dir
        self._discarded = False
        _live.add(self)
        at_exit(_flush_live)

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
            self._dirty = True
            due = time.monotonic() - self._flushed_at >= _FLUSH_INTERVAL_S
        if due:
            self.flush()

    def snapshot(self) -> CacheStats:
        """The counters now."""
        with self._lock:
            return CacheStats(**self._values)  # type: ignore[arg-type]

    def flush(self) -> None:
        """Write the counters file if anything changed since the last write."""
        with self._lock:
            if not self._dirty or self._discarded:
                return
            payload = {
                "pid": os.getpid(),
                "fingerprint": self._fingerprint,
                "counters": dict(self._values),
            }
            # Written under the lock so that files never go back in time when threads race. The figures
            # are advisory: a failed write (a full disk, a temporary cache directory removed by its
            # stream while a download finishes) must not fail the read that counted.
            try:
                atomic_write(self._path, json.dumps(payload).encode())
            except OSError:
                return
            self._dirty = False
            self._flushed_at = time.monotonic()


# The counters of this process, written once more when it exits.
_live: weakref.WeakSet[CacheCounters] = weakref.WeakSet()


def discard_counters(cache_dir: str) -> None:
    """Write no more counters of this process into `cache_dir`, which its owner is removing (a stream's
    temporary cache, at exit: a later write would make the directory again, for a stats file alone)."""
    for counters in list(_live):
        if counters._cache_dir == cache_dir:
            _live.discard(counters)
            with counters._lock:
                counters._discarded = True


def _flush_live() -> None:
    for counters in list(_live):
        counters.flush()


def sum_cache_stats(cache_dir: str | os.PathLike[str], *, fingerprint: str | None = None) -> CacheStats:
    """Sum the counters every process wrote under `cache_dir` (only one dataset's, if `fingerprint`).

    Raises:
        CacheError: a counters file is not what this module writes.
    """
    directory = os.path.join(os.fspath(cache_dir), META_DIR, "stats")
    total = CacheStats()
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json") and not n.startswith("."))
    except FileNotFoundError:
        return total
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
            counters = payload["counters"]
            if set(counters) - _FIELDS:
                raise KeyError(sorted(set(counters) - _FIELDS)[0])
            if fingerprint is None or payload["fingerprint"] == fingerprint:
                total = total + CacheStats(**counters)
        except FileNotFoundError:
            continue
        except (ValueError, KeyError, TypeError) as exc:
            raise CacheError(
                f"Invalid cache counters file ({path}): {exc!r}. Expected JSON written by lrs's cache."
            ) from exc
    return total
