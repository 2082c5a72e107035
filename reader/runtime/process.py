"""What one process of an `EpisodeStream` owns while it reads (footers, decoders, counters, the running
iteration), and how it publishes its counters for `EpisodeStream.stats(all_processes=True)`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from cache.cache_stats import CacheStats
from cache.counter_files import CounterFile
from reader.decode.video import Decoders
from reader.plan.resume.resumption import IterationCursor
from reader.runtime.rows import RowGroupReader
from reader.stats import ReaderCounters, ReaderStats


@dataclass
class ReaderProcessState:
    """What one process owns while reading: each source's row group reader (its footers; indexed by
    `OpenedSource.position`), decoders, counters, the running iteration."""

    rows: tuple[RowGroupReader, ...]
    decoders: Decoders
    counters: ReaderCounters = field(default_factory=ReaderCounters)
    cursor: IterationCursor | None = None
    published: CounterFile | None = None

    def snapshot(self, cache: CacheStats) -> ReaderStats:
        return replace(
            self.counters.values,
            decoders_opened=self.decoders.opened,
            row_reads=sum(r.range_reads for r in self.rows),
            row_bytes=sum(r.bytes_read for r in self.rows),
            cache=cache,
        )

    def publish(self, *, force: bool = False) -> None:
        """Write this process's counters for `EpisodeStream.stats(all_processes=True)`: at most once a
        second unless `force` (`cache.counter_files`). A failed write (a full disk) only loses the figures."""
        if self.published is not None:
            self.published.changed(now=force)


def publishing(items: Iterable[dict[str, Any]], process: ReaderProcessState) -> Iterator[dict[str, Any]]:
    """Iterate a consumer's samples (or batches), publishing the process's counters once more when the
    iteration ends."""
    try:
        yield from items
    finally:
        process.publish(force=True)
