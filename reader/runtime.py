"""What one process of an `EpisodeStream` owns while it reads (footers, decoders, counters, the running
iteration), and how it publishes its counters for `EpisodeStream.stats(all_processes=True)`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from cache.cache_stats import CacheStats
from reader.decode import Decoders
from reader.pool import Consumer, Part
from reader.published import PUBLISH_INTERVAL_S, publish
from reader.schedule.rest import RunSegment
from reader.stats import ReaderCounters, ReaderStats


@dataclass
class IterationCursor:
    """Where a process's running iteration is: its consumer, epoch, logical worker and worker count, and
    the runs of the epoch before it (an elastic resume's, `reader.schedule.rest`)."""

    consumer: Consumer
    epoch: int
    logical: int
    num_workers: int
    history: tuple[RunSegment, ...] = ()


@dataclass
class ReaderProcessState:
    """What one process owns while reading: footers, decoders, counters, the running iteration."""

    pid: int
    parts: tuple[Part, ...]
    decoders: Decoders
    counters: ReaderCounters = field(default_factory=ReaderCounters)
    cursor: IterationCursor | None = None
    stats_path: str | None = None
    published: bool = False
    published_at: float = float("-inf")

    def snapshot(self, cache: CacheStats) -> ReaderStats:
        return replace(
            self.counters.values,
            decoders_opened=self.decoders.opened,
            row_reads=sum(p.rows.range_reads for p in self.parts),
            row_bytes=sum(p.rows.bytes_read for p in self.parts),
            cache=cache,
        )

    def publish(self, *, force: bool = False) -> None:
        """Write this process's counters for `EpisodeStream.stats(all_processes=True)`: at most once a
        second unless `force`. A failed write (a full disk) only loses the figures."""
        now = time.monotonic()
        if self.stats_path is None or (not force and now - self.published_at < PUBLISH_INTERVAL_S):
            return
        self.published_at = now
        if publish(self.stats_path, self.pid, self.snapshot(CacheStats())):
            self.published = True


def publishing(consumer: Consumer, process: ReaderProcessState) -> Iterator[dict[str, Any]]:
    """Iterate `consumer`, publishing the process's counters once more when the iteration ends."""
    try:
        yield from consumer
    finally:
        process.publish(force=True)
