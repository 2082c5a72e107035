"""An episode's tabular rows: read with ranged reads through the cache, held as tensors, sliced per sample.

On lrs/1 an episode is one row group whose byte range the index gives, so admission costs one ranged
read (plus the data file's footer, read once per process and kept while it is among the most recently
used footers that fit `FOOTER_CACHE_BYTES`: a parsed footer takes about 6 KB per row group, so keeping
every one would grow a worker by that much per episode). On plain v3 the episode's rows are
found from the footer's row counts and the episode's position in its file, the covering row groups are
read (the last few decoded row groups are kept, so neighbours in a big converted row group cost one read)
and filtered by the `index` column.

Values follow lerobot's `hf_transform_to_torch`: floats become float32, integers int64, lists 1-D
tensors (nested fixed-size lists N-D), scalars 0-d tensors; strings stay Python strings.
"""

from __future__ import annotations

import functools
import io
import logging
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from reader.batch.fill import ColumnRow
from reader.errors import DatasetError, LayoutError, RowGroupMismatch
from reader.format.catalog import EpisodeRef
from reader.format.footer import FooterCuts, cut_footer
from reader.format.parquet import check_row_group_sizes, row_group_span
from reader.format.v3 import INDEX_COLUMNS
from reader.plan.windows import Windows

T = TypeVar("T")

_FOOTER_GUESS = 64 * 1024
_MAGIC = b"PAR1"
_KEPT_ROW_GROUPS = 4
# The parsed footers a RowGroupReader keeps (least recently used go first). Measured: a parsed footer
# takes about 8x its serialized size in memory (500 row groups x 7 columns: 406 KB on disk, 3.1 MB
# parsed, 6 ms to parse), so 16 MiB keeps about five such files.
FOOTER_CACHE_BYTES = 16 * 1024 * 1024
_FOOTER_MEMORY_FACTOR = 8
_FOOTER_LOCKS = 16
# A cut file's serialized footer is kept (so an admission is one ranged read) up to this size, about
# 1,200 row groups of 7 columns; a bigger one is not, and each admission also reads its row group's cut.
_RAW_FOOTER_MAX = 1024 * 1024

log = logging.getLogger(__name__)


class RangeReader(Protocol):
    """What rows need from the cache: `NodeCache.read_range`."""

    def read_range(self, rel: str, start: int, end: int) -> bytes: ...


@dataclass(frozen=True)
class EpisodeRows:
    """The data rows of one episode, in `index` order, as lerobot would return them.

    Attributes:
        episode_index: the episode.
        columns: column name -> values of every row (a tensor, or a list for string columns), in the
            order lerobot's items list them.
        timestamps: the `timestamp` column as Python floats (float32 values), for video queries.
    """

    episode_index: int
    columns: Mapping[str, torch.Tensor | list[Any]] = field(repr=False)
    timestamps: list[float] = field(repr=False)

    def __len__(self) -> int:
        return len(self.timestamps)

    def __repr__(self) -> str:
        return f"EpisodeRows({self.episode_index}, rows={len(self)}, columns={len(self.columns)})"

    @functools.cached_property
    def arrays(self) -> dict[str, np.ndarray]:
        """The NumPy view of each tensor column (the same memory)."""
        return {n: v.numpy() for n, v in self.columns.items() if isinstance(v, torch.Tensor)}

    def sample(
        self, frame: int, windows: Windows, video_keys: Sequence[str], *, unread: bool = False
    ) -> tuple[dict[str, Any], dict[str, list[float]]]:
        """The tabular part of the sample at `frame`, and the timestamps each camera must show.

        With `unread`, a tensor column's row comes as a `ColumnRow` (for `BatchFill`, which writes it
        into the batch without making a tensor of it) instead of a tensor of its own.

        Returns:
            (row columns then `<key>_is_pad` masks, as lerobot orders them; camera key -> timestamps).
        """
        item: dict[str, Any]
        if unread:
            arrays = self.arrays
            item = {
                name: ColumnRow(values, arrays[name], frame)
                if isinstance(values, torch.Tensor)
                else values[frame]
                for name, values in self.columns.items()
            }
        else:
            item = {name: _row(values, frame) for name, values in self.columns.items()}
        queries: dict[str, list[float]] = {}
        for key in windows.offsets:
            window = windows.window(key, frame, len(self))
            item[f"{key}_is_pad"] = torch.from_numpy(window.pad)
            if key in video_keys:
                queries[key] = [self.timestamps[r] for r in window.rows.tolist()]
            else:
                item[key] = _rows(self.columns[key], window.rows)
        for key in video_keys:
            queries.setdefault(key, [self.timestamps[frame]])
        return item, queries

    def camera_timestamps(self, frame: int, windows: Windows, key: str) -> list[float]:
        """The timestamps camera `key` must show for the sample at `frame` (those `sample` gives)."""
        if key in windows.offsets:
            return [self.timestamps[r] for r in windows.window(key, frame, len(self)).rows.tolist()]
        return [self.timestamps[frame]]


def _row(values: torch.Tensor | list[Any], frame: int) -> Any:
    return values[frame].clone() if isinstance(values, torch.Tensor) else values[frame]


def _rows(values: torch.Tensor | list[Any], rows: np.ndarray) -> Any:
    if isinstance(values, torch.Tensor):
        return values[torch.from_numpy(rows)]
    return [values[r] for r in rows.tolist()]


_NOTED: set[tuple[str, ...]] = set()


def _note_undeclared(names: list[str], file: str) -> None:
    key = tuple(names)
    if key not in _NOTED:
        _NOTED.add(key)
        log.warning(
            "%s: columns %s are not features of meta/info.json; EpisodeStream leaves them out.", file, names
        )


def rows_from_table(table: pa.Table, order: Sequence[str], *, episode: int, file: str) -> EpisodeRows:
    """Convert an episode's rows (sorted by `index`) to tensors.

    Args:
        table: the rows.
        order: the declared features' column names, in item order. lerobot's standard columns follow
            when the features do not declare them; any other column (an annotation a newer lerobot
            wrote, `language_events`, ...) is left out, as lerobot's streaming reader does, and named
            once per process in a log line.
        episode: named in errors.
        file: named in errors.

    Raises:
        DatasetError: a column holds nulls, ragged lists, or a type lerobot would not turn into a tensor.
    """
    names = [n for n in order if n in table.column_names]
    # The columns every lerobot v3 frame has, returned even where `info.json` does not declare them.
    names += [n for n in INDEX_COLUMNS if n in table.column_names and n not in names]
    undeclared = [n for n in table.column_names if n not in names]
    if undeclared:
        _note_undeclared(undeclared, file)
    columns = {name: _to_values(table.column(name), name=name, episode=episode, file=file) for name in names}
    if "timestamp" not in columns:
        raise DatasetError("missing column", file=file, episode=episode, field="timestamp")
    timestamps = table.column("timestamp").to_numpy().astype(np.float32).tolist()
    return EpisodeRows(episode_index=episode, columns=columns, timestamps=timestamps)


def _to_values(column: pa.ChunkedArray, *, name: str, episode: int, file: str) -> torch.Tensor | list[Any]:
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return array.to_pylist()
    if pa.types.is_struct(array.type) and array.type.get_field_index("bytes") >= 0:
        # A camera stored as images (HF `Image`: {bytes, path}): the encoded bytes, decoded per sample.
        return array.field("bytes").to_pylist()
    if not _numeric_leaves(array.type):
        # Text and annotations (lerobot's `language` features: a list of {role, content, ...} per frame,
        # of any length): each row as the Python value `LeRobotDataset` gives.
        return array.to_pylist()
    if array.null_count:
        raise DatasetError(
            f"Invalid values ({array.null_count} nulls). Expected none.",
            file=file,
            episode=episode,
            field=name,
        )
    shape: list[int] = [len(array)]
    while (
        pa.types.is_list(array.type)
        or pa.types.is_large_list(array.type)
        or pa.types.is_fixed_size_list(array.type)
    ):
        sizes = pc.list_value_length(array).to_numpy(zero_copy_only=False)
        if sizes.size and (sizes != sizes[0]).any():
            raise DatasetError(
                f"Invalid list lengths ({int(sizes.min())}..{int(sizes.max())}). Expected equal lengths.",
                file=file, episode=episode, field=name,
            )  # fmt: skip
        shape.append(int(sizes[0]) if sizes.size else 0)
        array = array.flatten()
    kind = array.type
    if pa.types.is_floating(kind):
        dtype: Any = np.float32
    elif pa.types.is_integer(kind):
        dtype = np.int64
    elif pa.types.is_boolean(kind):
        dtype = np.bool_
    else:
        raise DatasetError(
            f"Invalid column type ({column.type}). Expected numbers, bools or strings.",
            file=file,
            episode=episode,
            field=name,
        )
    # A copy: Arrow buffers are read-only, and items must not alias what the pool keeps.
    values = np.array(array.to_numpy(zero_copy_only=False), dtype=dtype).reshape(shape)
    return torch.from_numpy(values)


def _numeric_leaves(kind: pa.DataType) -> bool:
    """Whether a column type is numbers or bools, possibly in (nested) lists: what becomes a tensor."""
    while pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    return pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind)


# --- ranged parquet reads ------------------------------------------------------------------------------


class _SparseFile(io.RawIOBase):
    """A read-only file of `size` bytes of which only some ranges are known; reading elsewhere fails.

    pyarrow reads a row group through it given the footer metadata, so exactly the bytes fetched with one
    ranged request are parsed, and a read outside them is a bug, not a silent extra request.
    """

    def __init__(self, name: str, size: int, start: int, data: bytes) -> None:
        super().__init__()
        self._name, self._size, self._start, self._data = name, size, start, data
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), max(0, self._size - self._pos))
        low = self._pos - self._start
        if low < 0 or low + count > len(self._data):
            raise OSError(
                f"Invalid read ([{self._pos}, {self._pos + count})) of {self._name}. Expected inside the fetched "
                f"range [{self._start}, {self._start + len(self._data)})."
            )
        buffer[:count] = self._data[low : low + count]
        self._pos += count
        return count


class RowGroupReader:
    """Reads row groups of a dataset's parquet files with ranged reads, keeping footers per file.

    Args:
        files: serves byte ranges (the node cache).
        size_of: the size of a data file in bytes (from the index, or one HEAD request).
        display: turns a dataset-relative path into a name for messages.
        footer_bytes: the memory the footers kept may take: parsed footers (estimated at 8x their
            serialized size) and, for cut files, serialized ones; least recently used go first, and the
            most recently used parsed footer is kept whatever its size.
        row_groups: lrs/1: the `(byte offset, byte count)` of each row group of a data file, from the
            index (`Catalog.row_group_ranges`). A file's footer is then read once to find where each
            row group's part of it is (`reader.format.footer`), and each read parses only that part:
            8 bytes per row group are kept instead of the parsed footer, plus the serialized footer
            when it is at most 1 MiB and while it fits `footer_bytes` (else each read fetches its part:
            one more small ranged read).
        columns: the columns to read (those a file has): the declared features and lerobot's standard
            columns; None reads every column. Others are never decompressed.
        bytes_per_row: a row group larger than `check_row_group_sizes` allows for it is refused before
            its bytes are fetched (`data_row_bytes` of the declared features); None checks nothing.
    """

    def __init__(
        self,
        files: RangeReader,
        size_of: Callable[[str], int],
        display: Callable[[str], str],
        *,
        footer_bytes: int = FOOTER_CACHE_BYTES,
        row_groups: Callable[[str], np.ndarray | None] | None = None,
        columns: Sequence[str] | None = None,
        bytes_per_row: int | None = None,
    ) -> None:
        self._files, self._size_of, self._display = files, size_of, display
        self._columns = (
            None if columns is None else [*columns, *(c for c in INDEX_COLUMNS if c not in columns)]
        )
        self._bytes_per_row = bytes_per_row
        self._row_groups = row_groups
        self._cuts: dict[str, FooterCuts | None] = {}
        self._lock = threading.Lock()
        # ("parsed", rel) -> FileMetaData; ("raw", rel) -> the serialized footer of a cut file.
        self._footers: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        self._footer_bytes, self._footers_held = footer_bytes, 0
        # One read per file however many threads admit its episodes at once; a fixed set of locks, so
        # that nothing per file outlives its footer.
        self._footer_locks = tuple(threading.Lock() for _ in range(_FOOTER_LOCKS))
        self._sizes: dict[str, int] = {}
        self._kept: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self.range_reads = 0
        self.bytes_read = 0
        self.footer_reads = 0

    def metadata(self, rel: str) -> pq.FileMetaData:
        """The footer of `rel`: one ranged read (two when the footer exceeds 64 KiB) when it is not among
        the footers kept."""
        cached = self._kept_footer(("parsed", rel))
        if cached is not None:
            return cached
        with self._footer_locks[hash(rel) % _FOOTER_LOCKS]:
            cached = self._kept_footer(("parsed", rel))  # another thread may have read it meanwhile
            if cached is not None:
                return cached
            metadata = self._read_metadata(rel)
            self._keep_footer(("parsed", rel), metadata, metadata.serialized_size * _FOOTER_MEMORY_FACTOR)
            return metadata

    @property
    def footers_kept(self) -> tuple[int, int]:
        """(footers kept, their estimated bytes)."""
        with self._lock:
            return len(self._footers), self._footers_held

    def _kept_footer(self, key: tuple[str, str]) -> Any:
        with self._lock:
            found = self._footers.get(key)
            if found is None:
                return None
            self._footers.move_to_end(key)
            return found[0]

    def _keep_footer(self, key: tuple[str, str], footer: Any, cost: int) -> None:
        with self._lock:
            self.footer_reads += 1
            self._footers[key] = (footer, cost)
            self._footers_held += cost
            while self._footers_held > self._footer_bytes and len(self._footers) > 1:
                _, (_, freed) = self._footers.popitem(last=False)
                self._footers_held -= freed

    def _read_metadata(self, rel: str) -> pq.FileMetaData:
        size = self._size(rel)
        tail = self._read(rel, max(0, size - _FOOTER_GUESS), size)
        if len(tail) < 12 or tail[-4:] != _MAGIC:
            raise DatasetError("not a parquet file (no PAR1 footer)", file=self._display(rel))
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 8 > len(tail):
            tail = self._read(rel, size - length - 8, size)
        try:
            return pq.read_metadata(pa.BufferReader(_MAGIC + tail[-(length + 8) :]))
        except (pa.ArrowInvalid, OSError) as exc:
            raise DatasetError(f"unreadable parquet footer ({exc})", file=self._display(rel)) from exc

    def read(
        self, rel: str, row_group: int, span: tuple[int, int] | None = None, *, crc32: int | None = None
    ) -> pa.Table:
        """One row group, fetched with one ranged read of `span` (default: from the footer), whose bytes
        must have `crc32` where it is given (read once more before a mismatch counts).

        Raises:
            LayoutError: `span` does not cover the row group's column chunks.
            DatasetError: the file is not readable parquet.
            RowGroupMismatch: the bytes do not have `crc32` (another version of the file).
        """
        metadata, group = self._group_metadata(rel, row_group)
        if self._bytes_per_row is not None:
            check_row_group_sizes(
                metadata, self._bytes_per_row, file=self._display(rel), groups=[group], row_group=row_group
            )
        needed = row_group_span(metadata, group)
        start, end = span if span is not None else needed
        if not start <= needed[0] <= needed[1] <= end:
            raise LayoutError(
                f"Invalid row group byte range ([{start}, {end})) of row group {row_group}. Expected it to cover "
                f"[{needed[0]}, {needed[1]}).",
                file=self._display(rel),
            )
        data = self._read(rel, start, end)
        if crc32 is not None and zlib.crc32(data) != crc32:
            data = self._read(rel, start, end)  # a body damaged in transit reads right the second time
            if zlib.crc32(data) != crc32:
                raise RowGroupMismatch(
                    f"Invalid row group {row_group} (bytes [{start}, {end}) have CRC-32 {zlib.crc32(data)}, "
                    f"the index records {crc32}). Expected the file the index describes: it was edited or "
                    "damaged after the reshard (a stale lrs index: rebuild it with `lrs reshard DATASET --out "
                    "NEW`, or restore the file).",
                    file=self._display(rel),
                )
        source = _SparseFile(self._display(rel), self._size(rel), start, data)
        try:
            # In this thread: Arrow's worker threads would read `source` (a Python object) under the GIL,
            # and may free it after this returns (see `parse_parquet`).
            parquet = pq.ParquetFile(source, metadata=metadata, pre_buffer=False)
            columns = None if self._columns is None else self._present(parquet.schema_arrow.names, rel)
            return parquet.read_row_group(group, columns=columns, use_threads=False)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DatasetError(f"unreadable row group {row_group} ({exc})", file=self._display(rel)) from exc

    def _present(self, names: Sequence[str], rel: str) -> list[str]:
        """Those of the columns to read that the file has; the others it has are named once a process."""
        wanted = set(self._columns or ())
        undeclared = [n for n in names if n not in wanted]
        if undeclared:
            _note_undeclared(undeclared, self._display(rel))
        return [c for c in self._columns or () if c in names]

    def _group_metadata(self, rel: str, row_group: int) -> tuple[pq.FileMetaData, int]:
        """A footer holding `row_group`, and its number there: the row group's own cut of the footer
        where the file has cuts, else the whole footer."""
        cuts = self._file_cuts(rel)
        if cuts is not None and 0 <= row_group < cuts.ends.size:
            start, end = cuts.span(row_group)
            raw = self._kept_footer(("raw", rel))
            struct = (
                self._read(rel, start, end)
                if raw is None
                else raw[start - cuts.footer_start : end - cuts.footer_start]
            )
            try:
                metadata = cuts.metadata(struct)
            except (pa.ArrowInvalid, OSError):
                metadata = None
            if metadata is not None and metadata.num_row_groups == 1:
                return metadata, 0
            with self._lock:
                self._cuts[rel] = None  # not as the scan found it: read this file with its whole footer
        metadata = self.metadata(rel)
        if not 0 <= row_group < metadata.num_row_groups:
            raise LayoutError(
                f"Invalid row group ({row_group}). Expected < {metadata.num_row_groups}.",
                file=self._display(rel),
            )
        return metadata, row_group

    def _file_cuts(self, rel: str) -> FooterCuts | None:
        if self._row_groups is None:
            return None
        with self._lock:
            if rel in self._cuts:
                return self._cuts[rel]
        with self._footer_locks[hash(rel) % _FOOTER_LOCKS]:
            with self._lock:
                if rel in self._cuts:
                    return self._cuts[rel]
            groups = self._row_groups(rel)
            cuts = None
            if groups is not None:
                cuts = self._cut(rel, groups)
                if cuts is None:
                    log.info("%s: footer not cut by row group; reading it whole", self._display(rel))
            with self._lock:
                self._cuts[rel] = cuts
            return cuts

    def _cut(self, rel: str, groups: np.ndarray) -> FooterCuts | None:
        """Cut the footer of `rel`: read whole (and kept) when it fits the footer budget, else scanned in
        windows and each row group's part read when it is needed."""
        size = self._size(rel)
        tail = self._read(rel, max(0, size - _FOOTER_GUESS), size)
        length = int.from_bytes(tail[-8:-4], "little") if len(tail) >= 8 else size
        if length + 8 > min(size, self._footer_bytes, _RAW_FOOTER_MAX):
            return cut_footer(lambda start, end: self._read(rel, start, end), size, groups, tail=tail)
        if length + 8 > len(tail):
            tail = self._read(rel, size - length - 8, size)
        cuts = cut_footer(None, size, groups, tail=tail)  # the footer is all in `tail`
        if cuts is not None:
            footer = tail[len(tail) - length - 8 : len(tail) - 8]
            self._keep_footer(("raw", rel), footer, len(footer))
        return cuts

    def read_rows(self, rel: str, first_row: int, count: int) -> pa.Table:
        """Rows `[first_row, first_row + count)` of a file: its covering row groups, concatenated and sliced.

        The last few row groups read are kept, so episodes sharing a big row group cost one read.
        """
        metadata = self.metadata(rel)
        bounds = np.cumsum([0] + [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)])
        if first_row < 0 or first_row + count > bounds[-1]:
            raise DatasetError(
                f"Invalid rows ([{first_row}, {first_row + count})). Expected inside the file's {bounds[-1]} rows.",
                file=self._display(rel),
            )
        low = int(np.searchsorted(bounds, first_row, side="right")) - 1
        high = int(np.searchsorted(bounds, first_row + count, side="left"))
        tables = [self._kept_group(rel, g) for g in range(low, max(high, low + 1))]
        return pa.concat_tables(tables).slice(first_row - int(bounds[low]), count)

    def _kept_group(self, rel: str, row_group: int) -> pa.Table:
        key = (rel, row_group)
        with self._lock:
            table = self._kept.get(key)
            if table is not None:
                self._kept.move_to_end(key)
                return table
        table = self.read(rel, row_group)
        with self._lock:
            self._kept[key] = table
            while len(self._kept) > _KEPT_ROW_GROUPS:
                self._kept.popitem(last=False)
        return table

    def _size(self, rel: str) -> int:
        return self._memo(self._sizes, rel, self._size_of)

    def _memo(self, memo: dict[str, T], rel: str, compute: Callable[[str], T]) -> T:
        """`memo[rel]`, computed outside the lock on a miss (two threads may both compute it)."""
        with self._lock:
            value = memo.get(rel)
        if value is None:
            value = compute(rel)
            with self._lock:
                memo[rel] = value
        return value

    def _read(self, rel: str, start: int, end: int) -> bytes:
        data = self._files.read_range(rel, start, end)
        with self._lock:
            self.range_reads += 1
            self.bytes_read += len(data)
        return data


def read_episode(reader: RowGroupReader, ref: EpisodeRef, order: Sequence[str], *, file: str) -> EpisodeRows:
    """The rows of one episode: its row group (lrs/1, one ranged read) or its slice of the covering
    row groups (v3), checked to be exactly the episode's `index` range.

    Raises:
        DatasetError: the rows found are not the episode's (the index or the file disagrees with meta).
    """
    if ref.row_group is not None:
        table = reader.read(ref.data_path, ref.row_group, ref.byte_range, crc32=ref.crc32)
    else:
        table = reader.read_rows(ref.data_path, ref.first_row, ref.length)
    if "index" not in table.column_names:
        raise DatasetError("missing column", file=file, episode=ref.episode_index, field="index")
    index = table.column("index").to_numpy()
    expected = np.arange(ref.dataset_from_index, ref.dataset_from_index + ref.length)
    if index.shape != expected.shape or not np.array_equal(index, expected):
        got = f"{index[0]}..{index[-1]}, {index.size} rows" if index.size else "no rows"
        raise DatasetError(
            f"Invalid rows ({got}). Expected index {expected[0]}..{expected[-1]} in order, as meta/episodes says.",
            file=file,
            episode=ref.episode_index,
            field="index",
        )
    return rows_from_table(table, order, episode=ref.episode_index, file=file)
