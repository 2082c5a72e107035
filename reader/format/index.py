"""The lrs/1 index contract under `meta/lrs/`: written by `reshard`, read by the reader, prewarm and push.

- `layout.json`: `{"layout": "lrs/1", "tool": ..., "source": {...}, "params": {...}, ...}`
- `episodes.parquet`: one row per episode (`episodes_schema`): where its rows and videos are, byte exact.
- `files.parquet`: every file of the dataset but itself (`FILES_SCHEMA`): path, size, sha256, kind.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.store import TEMP_SUFFIX, check_rel
from reader.errors import LayoutError
from reader.format.jsonfile import parse_json

LAYOUT_VERSION = "lrs/1"
LRS_DIR = "meta/lrs"
LAYOUT_JSON = f"{LRS_DIR}/layout.json"
EPISODES_INDEX = f"{LRS_DIR}/episodes.parquet"
FILES_INDEX = f"{LRS_DIR}/files.parquet"

FILES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
        # "data" | "video" | "meta"
        pa.field("kind", pa.string(), nullable=False),
    ]
)

_EPISODE_FIELDS = [
    pa.field("episode_index", pa.int64(), nullable=False),
    pa.field("length", pa.int64(), nullable=False),
    pa.field("dataset_from_index", pa.int64(), nullable=False),
    pa.field("data_path", pa.string(), nullable=False),
    pa.field("row_group", pa.int32(), nullable=False),
    # Byte range [row_group_offset, row_group_offset + row_group_bytes) of the row group's column chunks.
    pa.field("row_group_offset", pa.int64(), nullable=False),
    pa.field("row_group_bytes", pa.int64(), nullable=False),
]
# Optional (lrs/1 indexes written before it lack the column; they read as None): the CRC-32 (zlib) of
# the bytes [row_group_offset, row_group_offset + row_group_bytes), so that a reader can tell a row group
# of another version of the file (a re-push while it reads) from the one the index describes.
ROW_GROUP_CRC32 = pa.field("row_group_crc32", pa.int64(), nullable=True)
_VIDEO_FIELDS = (
    ("path", pa.string()),
    ("bytes", pa.int64()),
    ("from_timestamp", pa.float64()),
    ("to_timestamp", pa.float64()),
)


def episodes_schema(video_keys: list[str]) -> pa.Schema:
    """The schema of `meta/lrs/episodes.parquet` for these cameras (`videos/<key>/<field>` columns)."""
    fields = [*_EPISODE_FIELDS, ROW_GROUP_CRC32]
    for key in video_keys:
        fields += [pa.field(f"videos/{key}/{name}", kind, nullable=False) for name, kind in _VIDEO_FIELDS]
    return pa.schema(fields)


@dataclass(frozen=True)
class VideoFile:
    """One episode's video of one camera in an lrs/1 dataset."""

    key: str
    path: str
    bytes: int
    from_timestamp: float
    to_timestamp: float


@dataclass(frozen=True)
class EpisodeEntry:
    """One row of `meta/lrs/episodes.parquet`."""

    episode_index: int
    length: int
    dataset_from_index: int
    data_path: str
    row_group: int
    row_group_offset: int
    row_group_bytes: int
    videos: tuple[VideoFile, ...]
    row_group_crc32: int | None = None

    def __repr__(self) -> str:
        return (
            f"EpisodeEntry({self.episode_index}, length={self.length}, {self.data_path}#rg{self.row_group}, "
            f"cameras={len(self.videos)})"
        )


@dataclass(frozen=True)
class FileEntry:
    """One row of `meta/lrs/files.parquet`."""

    path: str
    bytes: int
    sha256: str
    kind: str


def episodes_to_table(entries: list[EpisodeEntry], video_keys: list[str]) -> pa.Table:
    """Build the episodes index table (rows in episode order)."""
    schema = episodes_schema(video_keys)
    cols: dict[str, list[Any]] = {name: [] for name in schema.names}
    for entry in entries:
        for f in _EPISODE_FIELDS:
            cols[f.name].append(getattr(entry, f.name))
        cols[ROW_GROUP_CRC32.name].append(entry.row_group_crc32)
        by_key = {v.key: v for v in entry.videos}
        for key in video_keys:
            for name, _ in _VIDEO_FIELDS:
                cols[f"videos/{key}/{name}"].append(getattr(by_key[key], name))
    return pa.table(cols, schema=schema)


T = TypeVar("T")


class RowSequence(Sequence[T]):
    """A sequence whose items are made from columns when asked for: `row(i)` makes the item at position
    `i` (0 <= i < len); this class checks positions, counts from the end and slices."""

    @abstractmethod
    def row(self, i: int) -> T:
        """The item at position `i` (0 <= i < len)."""

    @overload
    def __getitem__(self, position: int) -> T: ...
    @overload
    def __getitem__(self, position: slice) -> list[T]: ...
    def __getitem__(self, position: int | slice) -> T | list[T]:
        if isinstance(position, slice):
            return [self.row(i) for i in range(*position.indices(len(self)))]
        count = len(self)
        if not -count <= position < count:
            raise IndexError(f"Invalid position ({position}). Expected < {count}.")
        return self.row(position % count)


class EpisodeIndex(RowSequence[EpisodeEntry]):
    """The episodes index held as columns (numpy for numbers, Arrow for paths), in episode order; an
    `EpisodeEntry` is made only when one is asked for, so memory is a few dozen bytes per episode and no
    Python object per episode lives on.

    Build it with `episodes_from_table`. It pickles as its Arrow table (compact, no per-episode objects).
    """

    def __init__(self, table: pa.Table, video_keys: Sequence[str]) -> None:
        self.video_keys = tuple(video_keys)
        self._table = table.combine_chunks()
        self._numbers = {
            name: _numpy(self._table.column(name))
            for name in ("episode_index", "length", "dataset_from_index", "row_group")
            + ("row_group_offset", "row_group_bytes")
        }
        crc = self._table.column(ROW_GROUP_CRC32.name) if ROW_GROUP_CRC32.name in table.column_names else None
        self._crc = None if crc is None else crc.chunk(0) if crc.num_chunks == 1 else crc.combine_chunks()
        self._data_paths = _strings(self._table.column("data_path"))
        self._videos = tuple(
            (
                _strings(self._table.column(f"videos/{key}/path")),
                _numpy(self._table.column(f"videos/{key}/bytes")),
                _numpy(self._table.column(f"videos/{key}/from_timestamp")),
                _numpy(self._table.column(f"videos/{key}/to_timestamp")),
            )
            for key in self.video_keys
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (EpisodeIndex, (self._table, self.video_keys))

    def __len__(self) -> int:
        return self._table.num_rows

    def row(self, i: int) -> EpisodeEntry:
        """The entry at position `i` (0 <= i < len)."""
        n = self._numbers
        crc = None if self._crc is None else self._crc[i].as_py()
        return EpisodeEntry(
            int(n["episode_index"][i]),
            int(n["length"][i]),
            int(n["dataset_from_index"][i]),
            self._data_paths[i].as_py(),
            int(n["row_group"][i]),
            int(n["row_group_offset"][i]),
            int(n["row_group_bytes"][i]),
            videos=tuple(
                VideoFile(key, paths[i].as_py(), int(sizes[i]), float(starts[i]), float(ends[i]))
                for key, (paths, sizes, starts, ends) in zip(self.video_keys, self._videos, strict=True)
            ),
            row_group_crc32=crc,
        )

    def column(self, name: str) -> np.ndarray:
        """A numeric column (`length`, `dataset_from_index`, `videos/<key>/bytes`, ...) as a read-only array,
        in episode order."""
        found = self._numbers.get(name)
        return found if found is not None else _numpy(self._table.column(name))

    @property
    def table(self) -> pa.Table:
        """The index as an Arrow table, in episode order."""
        return self._table

    @property
    def nbytes(self) -> int:
        """Bytes the columns hold."""
        return self._table.nbytes


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    return column.to_numpy()


def _strings(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def episodes_from_table(
    table: pa.Table, video_keys: list[str], *, file: str = EPISODES_INDEX
) -> EpisodeIndex:
    """Parse the episodes index (columnar, sorted by episode); raises LayoutError when it does not
    match the schema."""
    expected = episodes_schema(video_keys)
    missing = [n for n in expected.names if n not in table.column_names and n != ROW_GROUP_CRC32.name]
    if missing:
        raise LayoutError(f"missing columns {missing}", file=file)
    table = table.select([n for n in expected.names if n in table.column_names])
    nulls = [n for n in table.column_names if n != ROW_GROUP_CRC32.name and table.column(n).null_count]
    if nulls:
        raise LayoutError(f"Invalid nulls in columns {nulls}. Expected none.", file=file)
    try:
        table = table.cast(pa.schema([expected.field(n) for n in table.column_names]))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise LayoutError(f"Invalid column types ({exc}). Expected {expected}.", file=file) from exc
    order = pc.sort_indices(table.column("episode_index"))
    if not np.array_equal(order.to_numpy(), np.arange(table.num_rows)):
        table = table.take(order)
    for name in ["data_path", *(f"videos/{key}/path" for key in video_keys)]:
        check_paths(table.column(name), file=file, field=name, episodes=table.column("episode_index"))
    return EpisodeIndex(table, video_keys)


# A superset of what `cache.store.check_rel` refuses, for a whole column at once: an empty segment (an
# empty path, or a leading, doubled or trailing `/`), a `.` or `..` segment, a backslash, a temp name.
_BAD_PATH = r"(^|/)\.{0,2}(/|$)|\\|" + re.escape(TEMP_SUFFIX) + "$"


def check_paths(
    paths: pa.ChunkedArray, *, file: str, field: str, episodes: pa.ChunkedArray | None = None
) -> None:
    """Check that every path of an index column is one the cache accepts (`check_rel`: dataset-relative,
    no `..`), so that a hostile index cannot make the reader, prewarm or push read or write outside the
    dataset or the cache.

    Raises:
        LayoutError: naming `file`, the first bad path's episode (`episodes`: the column beside the paths)
            and `field`.
    """
    suspects = np.flatnonzero(pc.match_substring_regex(paths, _BAD_PATH).to_numpy(zero_copy_only=False))
    for row in suspects.tolist():
        try:
            check_rel(paths[row].as_py())
        except ValueError as exc:
            episode = None if episodes is None else episodes[row].as_py()
            raise LayoutError(str(exc), file=file, episode=episode, field=field) from None


def files_to_table(entries: list[FileEntry]) -> pa.Table:
    """Build the files index table, sorted by path."""
    entries = sorted(entries, key=lambda e: e.path)
    return pa.table(
        {
            "path": [e.path for e in entries],
            "bytes": [e.bytes for e in entries],
            "sha256": [e.sha256 for e in entries],
            "kind": [e.kind for e in entries],
        },
        schema=FILES_SCHEMA,
    )


class FileIndex(Mapping[str, FileEntry]):
    """The files index held as columns, sorted by path: a mapping path -> `FileEntry` whose lookups
    bisect the sorted paths, so no Python object per file lives on. Pickles as its Arrow table."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table.combine_chunks()
        self._paths = _strings(self._table.column("path"))
        self._bytes = _numpy(self._table.column("bytes"))
        self._sha256 = _strings(self._table.column("sha256"))
        self._kinds = _strings(self._table.column("kind"))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FileIndex, (self._table,))

    def __len__(self) -> int:
        return self._table.num_rows

    def __iter__(self) -> Iterator[str]:
        for path in self._paths:
            yield path.as_py()

    def __getitem__(self, path: str) -> FileEntry:
        row = self.position(path)
        if row < 0:
            raise KeyError(path)
        return self.entry(row)

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self.position(path) >= 0

    def position(self, path: str) -> int:
        """The row of `path`, or -1."""
        low, high = 0, len(self)
        while low < high:  # bisect over the Arrow strings: no list of every path is made
            mid = (low + high) // 2
            if self._paths[mid].as_py() < path:
                low = mid + 1
            else:
                high = mid
        return low if low < len(self) and self._paths[low].as_py() == path else -1

    def positions(self, paths: pa.Array) -> np.ndarray:
        """The row of each of `paths` (-1 where not listed), vectorized."""
        found = pc.index_in(paths, value_set=self._paths)
        return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    def entry(self, row: int) -> FileEntry:
        return FileEntry(
            self._paths[row].as_py(),
            int(self._bytes[row]),
            self._sha256[row].as_py(),
            self._kinds[row].as_py(),
        )

    def size(self, row: int) -> int:
        return int(self._bytes[row])

    def sha256(self, row: int) -> str:
        return self._sha256[row].as_py()

    @property
    def sizes(self) -> np.ndarray:
        """Every file's size, by row."""
        return self._bytes

    @property
    def table(self) -> pa.Table:
        return self._table


def files_from_table(table: pa.Table, *, file: str = FILES_INDEX) -> list[FileEntry]:
    """Parse the files index into records, in its row order; raises LayoutError when it does not match
    the schema."""
    missing = [n for n in FILES_SCHEMA.names if n not in table.column_names]
    if missing:
        raise LayoutError(f"missing columns {missing}", file=file)
    cols = [table.column(n).to_pylist() for n in FILES_SCHEMA.names]
    return [FileEntry(*row) for row in zip(*cols, strict=True)]


def file_index(table: pa.Table, *, file: str = FILES_INDEX) -> FileIndex:
    """Parse the files index as columns, sorted by path (what a reader keeps); raises LayoutError when
    it does not match the schema."""
    missing = [n for n in FILES_SCHEMA.names if n not in table.column_names]
    if missing:
        raise LayoutError(f"missing columns {missing}", file=file)
    table = table.select(FILES_SCHEMA.names)
    nulls = [n for n in FILES_SCHEMA.names if table.column(n).null_count]
    if nulls:
        raise LayoutError(f"Invalid nulls in columns {nulls}. Expected none.", file=file)
    try:
        table = table.cast(FILES_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise LayoutError(f"Invalid column types ({exc}). Expected {FILES_SCHEMA}.", file=file) from exc
    check_paths(table.column("path"), file=file, field="path")
    # Arrow sorts strings by their UTF-8 bytes, which is Python's code point order: bisect agrees.
    order = pc.sort_indices(table.column("path"))
    if not np.array_equal(order.to_numpy(), np.arange(table.num_rows)):
        table = table.take(order)
    return FileIndex(table)


def parse_layout_json(data: bytes | str, *, file: str = LAYOUT_JSON) -> dict[str, Any]:
    """Parse `layout.json` and check its version."""
    raw = parse_json(data, file=file, error=LayoutError)
    if not isinstance(raw, dict) or raw.get("layout") != LAYOUT_VERSION:
        got = raw.get("layout") if isinstance(raw, dict) else raw
        raise LayoutError(
            f"Invalid layout ({got!r}). Expected {LAYOUT_VERSION!r}.", file=file, field="layout"
        )
    return raw


def kind_of(path: str) -> str:
    """The `kind` column of a dataset-relative path."""
    if path.startswith("data/"):
        return "data"
    if path.startswith("videos/"):
        return "video"
    return "meta"
