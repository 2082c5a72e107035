"""The table step of a reshard: write one output data file, one row group per episode, rows in index order.

Memory stays bounded by the source's row groups: a source file is read one row group at a time
(`SourceFileRows`), each episode's rows are sliced out of the row groups that hold them, written as one
row group, and dropped. A row group spanning many episodes (datasets converted from v2.1) is read once
and sliced for each of them.
"""

from __future__ import annotations

import functools
import itertools
import zlib
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager, closing
from dataclasses import dataclass
from typing import BinaryIO, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reader.errors import DatasetError
from reader.format.parquet import check_row_group_sizes, data_row_bytes, row_group_span
from reshard.job.plan import DataTask
from reshard.source.checks import CHECKED_COLUMNS, check_kept_rows
from reshard.source.model import V3Source
from reshard.source.selection import renumber_rows

INDEX_COLUMNS = ["index", "episode_index", "frame_index"]
T = TypeVar("T")

# Gives a local path for a dataset-relative source file, valid inside the `with`.
LocalFile = Callable[[str], AbstractContextManager[str]]


@dataclass(frozen=True)
class RowGroupSpan:
    """Where one episode's row group lies in an output data file.

    Attributes:
        episode: the episode index.
        row_group: the row group number.
        offset: the byte offset of its first column chunk.
        bytes: the length of the byte range covering all its column chunks.
        crc32: zlib's CRC-32 of those bytes (None in records of runs from before it was recorded).
    """

    episode: int
    row_group: int
    offset: int
    bytes: int
    crc32: int | None = None


def row_group_ranges(metadata: pq.FileMetaData) -> list[tuple[int, int]]:
    """`(offset, length)` of each row group: the one byte range covering all its column chunks.

    A column chunk starts at its dictionary page when it has one, else at its first data page, and
    spans `total_compressed_size` bytes; one ranged read of the union fetches the whole row group.
    """
    ranges = []
    for i in range(metadata.num_row_groups):
        start, end = row_group_span(metadata, i)
        ranges.append((start, end - start))
    return ranges


def _short(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


class SourceFileRows:
    """The rows of the episodes of one source data file, read one row group at a time.

    Opening reads the file's footer and its `index`, `episode_index` and `frame_index` columns, and
    checks them against the episode metadata (`check_rows`), so a malformed file fails before any of
    its rows is written. Errors name the file and `episode`, the first episode wanted from it.
    """

    def __init__(
        self, source: V3Source, rel: str, local_path: str, schema: pa.Schema, *, episode: int | None = None
    ) -> None:
        self.where = source.remote.display(rel)
        self._file = self._read(lambda: pq.ParquetFile(local_path), episode)
        # Before any row group is decompressed: a few KiB of zstd may declare GiB (docs/limits.md).
        bytes_per_row = data_row_bytes(source.info.features)
        check_row_group_sizes(self._file.metadata, bytes_per_row, file=self.where, episode=episode)
        if not self._file.schema_arrow.remove_metadata().equals(schema.remove_metadata()):
            raise DatasetError(
                f"Invalid schema ({_short(self._file.schema_arrow)}). Expected the schema of the first data "
                f"file ({_short(schema)}).",
                file=self.where,
                episode=episode,
            )
        # Single-threaded reads: row groups are small, per-call thread dispatch costs more than it
        # saves, and parallelism comes from running tasks in several processes (--workers).
        checked = [c for c in CHECKED_COLUMNS if c in self._file.schema_arrow.names]
        index = self._read(lambda: self._file.read(columns=checked, use_threads=False), episode)
        check_kept_rows(source, rel, index)
        self.source = source
        # Rows sorted by `index`: position k of `_order` is the file row holding the k-th smallest index.
        self._index = index.column("index").to_numpy()
        self._order = np.argsort(self._index, kind="stable")
        self._sorted = self._index[self._order]
        meta = self._file.metadata
        self._starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        self._groups: dict[int, pa.Table] = {}

    def _read(self, fn: Callable[[], T], episode: int | None) -> T:
        try:
            return fn()
        except (pa.ArrowInvalid, OSError) as exc:
            raise DatasetError(
                f"not a readable parquet file ({exc})", file=self.where, episode=episode
            ) from exc

    def read(self, first_index: int, length: int, *, episode: int | None = None) -> pa.Table:
        """The rows with `index` in `[first_index, first_index + length)`, in index order.

        Only the row groups holding them are read; the ones the next episode may share are kept.
        `episode` is named in errors.
        """
        lo = int(np.searchsorted(self._sorted, first_index))
        rows = self._order[lo : lo + length]
        first, last = int(rows.min()), int(rows.max())
        g0 = int(np.searchsorted(self._starts, first, side="right")) - 1
        g1 = int(np.searchsorted(self._starts, last, side="right")) - 1
        needed = range(g0, g1 + 1)
        self._groups = {g: t for g, t in self._groups.items() if g in needed}
        for g in needed:
            if g not in self._groups:
                self._groups[g] = self._read(
                    functools.partial(self._file.read_row_group, g, use_threads=False), episode
                )
        table = pa.concat_tables([self._groups[g] for g in needed])
        base = int(self._starts[g0])
        if last - first + 1 == length and bool(np.all(np.diff(rows) == 1)):
            return table.slice(first - base, length)
        return table.take(pa.array(rows - base))

    def episode(self, episode: int) -> pa.Table:
        """The rows of episode `episode` of the source (numbered as the output numbers it: where
        episodes are left out, read from its source rows and renumbered)."""
        origin = self.source.origin(episode)
        rows = self.read(origin.dataset_from_index, origin.length, episode=origin.episode_index)
        return rows if self.source.parent is None else renumber_rows(rows, self.source.episodes[episode])

    def close(self) -> None:
        self._groups.clear()
        self._file.close()


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth dictionary encoding: flat non-float ones that repeat (episode and task
    indices, flags, strings).

    Float columns (states, actions, timestamps) are nearly all distinct, and so are `index` and
    `frame_index` within an episode's row group: a dictionary costs time to build and is then dropped
    or makes the file bigger, so they are written plain (measured on the bench's tables: 10% faster
    to write and 7% smaller than with `index` and `frame_index` dictionary-encoded).
    """
    return [
        f.name
        for f in schema
        if f.name not in ("index", "frame_index")
        and not pa.types.is_floating(f.type)
        and not pa.types.is_nested(f.type)
        and not pa.types.is_binary(f.type)
    ]


def write_data_file(
    task: DataTask,
    source: V3Source,
    local: LocalFile,
    out_path: str,
    *,
    schema: pa.Schema,
    compression: str,
    on_episode: Callable[[int], None] | None = None,
) -> list[RowGroupSpan]:
    """Write the output data file of `task` to `out_path`: one row group per episode, in index order.

    Args:
        task: which episodes, from which source files.
        source: the opened source.
        local: gives a local path for a source file (fetched if remote) for the time of a `with`.
        out_path: the local file to write (a temp path; the caller publishes it).
        schema: the output schema, with the source's schema metadata (the `huggingface` key).
        compression: the parquet codec.
        on_episode: called with 1 after each episode is written (progress).

    Returns:
        The byte range of each episode's row group, in episode order.

    Raises:
        DatasetError: a source file is unreadable, has another schema, or its rows disagree with the
            episode metadata (naming the file and the episode).
    """
    options = {
        "compression": compression,
        "write_statistics": True,
        "write_page_index": True,
        "use_dictionary": dictionary_columns(schema),
    }
    with (
        pq.ParquetWriter(out_path, schema, **options) as writer,
        closing(_episodes_rows(task, source, local, schema)) as episodes,
    ):
        for rows in episodes:
            writer.write_table(rows.replace_schema_metadata(schema.metadata), row_group_size=rows.num_rows)
            if on_episode is not None:
                on_episode(1)
    ranges = row_group_ranges(pq.read_metadata(out_path))
    with open(out_path, "rb") as written:
        return [
            RowGroupSpan(e, i, *ranges[i], crc32=range_crc32(written, *ranges[i]))
            for i, e in enumerate(task.episodes)
        ]


def range_crc32(handle: BinaryIO, offset: int, size: int) -> int:
    """zlib's CRC-32 of bytes `[offset, offset + size)` of an open file (the index's `row_group_crc32`),
    read with one row group in memory at a time."""
    handle.seek(offset)
    return zlib.crc32(handle.read(size))


def _episodes_rows(
    task: DataTask, source: V3Source, local: LocalFile, schema: pa.Schema
) -> Generator[pa.Table, None, None]:
    """The rows of each episode of the task, in order; one source file open at a time."""
    by_file = itertools.groupby(task.episodes, key=lambda i: source.data_file(source.episodes[i]))
    for rel, indices in by_file:
        episodes = list(indices)
        with local(rel) as path:
            reader = SourceFileRows(
                source, rel, path, schema, episode=source.origin(episodes[0]).episode_index
            )
            try:
                for episode in episodes:
                    yield reader.episode(episode)
            finally:
                reader.close()
