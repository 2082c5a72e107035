"""The lrs/1 index contract under `meta/lrs/`: written by `reshard`, read by the reader, prewarm and push.

- `layout.json`: `{"layout": "lrs/1", "tool": ..., "source": {...}, "params": {...}, ...}`
- `episodes.parquet`: one row per episode (`episodes_schema`): where its rows and videos are, byte exact.
- `files.parquet`: every file of the dataset but itself (`FILES_SCHEMA`): path, size, sha256, kind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from reader.errors import LayoutError

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


def episodes_from_table(
    table: pa.Table, video_keys: list[str], *, file: str = EPISODES_INDEX
) -> list[EpisodeEntry]:
    """Parse the episodes index; raises LayoutError when it does not match the schema."""
    expected = episodes_schema(video_keys)
    missing = [n for n in expected.names if n not in table.column_names and n != ROW_GROUP_CRC32.name]
    if missing:
        raise LayoutError(f"missing columns {missing}", file=file)
    cols = {n: table.column(n).to_pylist() for n in expected.names if n in table.column_names}
    crcs = cols.get(ROW_GROUP_CRC32.name, [None] * table.num_rows)
    entries = []
    for row in range(table.num_rows):
        videos = tuple(
            VideoFile(key, *(cols[f"videos/{key}/{name}"][row] for name, _ in _VIDEO_FIELDS))
            for key in video_keys
        )
        entries.append(
            EpisodeEntry(
                *(cols[f.name][row] for f in _EPISODE_FIELDS), videos=videos, row_group_crc32=crcs[row]
            )
        )
    entries.sort(key=lambda e: e.episode_index)
    return entries


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


def files_from_table(table: pa.Table, *, file: str = FILES_INDEX) -> list[FileEntry]:
    """Parse the files index; raises LayoutError when it does not match the schema."""
    missing = [n for n in FILES_SCHEMA.names if n not in table.column_names]
    if missing:
        raise LayoutError(f"missing columns {missing}", file=file)
    cols = [table.column(n).to_pylist() for n in FILES_SCHEMA.names]
    return [FileEntry(*row) for row in zip(*cols, strict=True)]


def parse_layout_json(data: bytes | str, *, file: str = LAYOUT_JSON) -> dict[str, Any]:
    """Parse `layout.json` and check its version."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutError(f"not valid JSON ({exc})", file=file) from exc
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
