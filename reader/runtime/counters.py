"""The reader's counters: `ReaderStats` (what `EpisodeStream.stats()` returns), what one process of a stream
owns while it reads (`ReaderProcessState`: footers, decoders, counters, the running iteration), and how a
process publishes its counters for `EpisodeStream.stats(all_processes=True)`.

The counters are plain data: the iterating code adds to them (`ReaderCounters.add`) and never publishes.
Publishing is driven from the place that iterates (`reader.stream`'s `publishing`): before a sample (or
batch) is handed out, `ReaderProcessState.publish` notes that the counters changed, so that the process's
file is rewritten at most once a second (`cache.counter_files.CounterFile`); once more when the iteration
ends (`force`), and when the process exits. The file's contents are pulled from the process state
(`snapshot`), which holds everything they sum: its counters, decoders, row readers and this stream's cache
objects.

The files live under the node cache directory (`.lrs/reader-stats/<run>/`), one per process (the trainer
and its DataLoader workers); the cache counters in them are this stream's cache objects in that process,
not the node's. `EpisodeStream.stats(all_processes=True)` adds them up (a file that is not ours is left
out with a warning, as `cache.counter_files` says). Runs older than a day are removed when a process
starts publishing. Torch-free at import, so the published counters read without torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cache import CacheStats, NodeCache
from cache.counter_files import CounterFile, read_counter_files
from cache.store import META_DIR

if TYPE_CHECKING:
    from reader.decode.video import Decoders
    from reader.plan.resume.resumption import IterationCursor
    from reader.runtime.rows import RowGroupReader

# Published counters older than this are removed when a process starts publishing (runs long gone).
MAX_AGE_S = 24 * 3600.0


@dataclass(frozen=True)
class ReaderStats:
    """Counters of the reader: of this process, or summed over the processes of one stream
    (`EpisodeStream.stats(all_processes=True)`: the DataLoader workers' too).

    Attributes:
        samples: samples emitted.
        skipped: samples a resume skipped by arithmetic (never read, fetched or decoded).
        episodes_admitted: pieces admitted into a pool (every worker of a rank admits its share of each of
            the rank's episodes).
        admissions_waited: admissions whose videos were not local yet when needed.
        samples_local: samples whose videos were already local when their piece was admitted.
        frames_decoded: video frames decoded (a window of T frames on C cameras counts T * C).
        decode_seconds: time spent decoding.
        decoders_opened: decoders opened (the LRU keeps them open across samples).
        row_reads: ranged reads of parquet footers and row groups.
        row_bytes: their bytes.
        cache: the node cache counters: this process's, or with `all_processes` every process's that
            used the cache for this dataset (`cache.sum_cache_stats`).
    """

    samples: int = 0
    skipped: int = 0
    episodes_admitted: int = 0
    admissions_waited: int = 0
    samples_local: int = 0
    frames_decoded: int = 0
    decode_seconds: float = 0.0
    decoders_opened: int = 0
    row_reads: int = 0
    row_bytes: int = 0
    cache: CacheStats = dataclasses.field(default_factory=CacheStats)

    def to_dict(self) -> dict[str, Any]:
        """The counters as a JSON-able dict."""
        return dataclasses.asdict(self)

    def __add__(self, other: ReaderStats) -> ReaderStats:
        """Counters of two processes (or two moments) summed, field by field (`cache` too)."""
        if not isinstance(other, ReaderStats):
            return NotImplemented
        return ReaderStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in _FIELDS})

    @classmethod
    def from_counters(cls, counters: Mapping[str, Any]) -> ReaderStats:
        """Stats from `to_dict()`'s counters (without `cache`); unknown names are ignored."""
        return cls(**{f.name: counters[f.name] for f in _FIELDS if f.name != "cache" and f.name in counters})


_FIELDS = dataclasses.fields(ReaderStats)


class ReaderCounters:
    """This process's running `ReaderStats` (added to by the iterating thread)."""

    def __init__(self) -> None:
        self.values = ReaderStats()

    def add(self, **deltas: float) -> None:
        self.values = self.values + ReaderStats(**deltas)  # type: ignore[arg-type]


@dataclass
class ReaderProcessState:
    """What one process owns while reading: each source's row group reader (its footers; indexed by
    `OpenedSource.position`), decoders, this stream's cache objects (for their counters), counters, the
    running iteration, and the file it publishes its counters to (`publish_under`)."""

    rows: tuple[RowGroupReader, ...]
    decoders: Decoders
    caches: Sequence[NodeCache] = ()
    counters: ReaderCounters = field(default_factory=ReaderCounters)
    cursor: IterationCursor | None = None
    published: CounterFile | None = None

    def snapshot(self) -> ReaderStats:
        """This process's counters now."""
        return replace(
            self.counters.values,
            decoders_opened=self.decoders.opened,
            row_reads=sum(r.range_reads for r in self.rows),
            row_bytes=sum(r.bytes_read for r in self.rows),
            cache=sum((c.stats() for c in self.caches), CacheStats()),
        )

    def publish_under(self, cache_dir: str, run: str) -> None:
        """Publish this process's counters for stream `run` under `cache_dir` from now on."""
        self.published = published_file(cache_dir, run, self.snapshot)

    def publish(self, *, force: bool = False) -> None:
        """Write this process's counters for `EpisodeStream.stats(all_processes=True)`: at most once a
        second unless `force` (`cache.counter_files`). A failed write (a full disk) only loses the figures."""
        if self.published is not None:
            self.published.changed(now=force)


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
