"""The reader's counters: `ReaderStats` (what `EpisodeStream.stats()` returns) and `ReaderCounters`, a
process's running total of them. Torch-free, so the counters another process published read without torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cache import CacheStats


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

    def __init__(self, on_add: Callable[[], None] | None = None) -> None:
        self.values = ReaderStats()
        self.on_add = on_add  # e.g. publish the counters for other processes (at most once a second)

    def add(self, **deltas: float) -> None:
        self.values = self.values + ReaderStats(**deltas)  # type: ignore[arg-type]
        if self.on_add is not None:
            self.on_add()
