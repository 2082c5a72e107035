"""Parquet as the formats use it: reading a metadata file into a table, and the byte range of a row group.

`row_group_span` is the one rule for where a row group's bytes are: the writer records it in the lrs/1
index, the reader fetches it with one ranged read, and `lrs verify` checks the two agree.

`check_row_group_sizes` is the one rule for how large a row group may be once decompressed: a parquet
file is compressed, and a few KiB of zstd decompress to GiB (a decompression bomb). Every read of a
data row group, and `parse_parquet` where its caller states a bound, first compares the uncompressed
size the footer declares for each row group with `ROW_GROUP_FLOOR_BYTES + rows * bytes_per_row`, and
refuses one that passes it before a byte is decompressed (docs/limits.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from reader.errors import DatasetError

# What a row group may hold once decompressed: a floor, plus an allowance per row (docs/limits.md).
ROW_GROUP_FLOOR_BYTES = 16 << 20
# Per row, beyond what the declared features take: parquet's levels and offsets, and columns that
# `meta/info.json` does not declare (a newer lerobot's annotations, such as `language_events`).
UNDECLARED_BYTES_PER_ROW = 64 << 10
# A declared feature's bytes per row, times this: lists and their offsets, and a writer's padding.
DECLARED_FACTOR = 4
# A feature of no fixed size per row: an encoded image (PNG or JPEG of up to 8,192 pixels a side is
# tens of MB at worst) and a string or other variable-length value.
IMAGE_BYTES_PER_ROW = 32 << 20
VARIABLE_BYTES_PER_ROW = 64 << 10
_ITEM_BYTES = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "int32": 4}
_ITEM_BYTES |= {"uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}


def data_row_bytes(features: Mapping[str, Any]) -> int:
    """The most a row of a data file may take decompressed, from the features `meta/info.json` declares:
    `DECLARED_FACTOR` times each fixed-size feature's bytes, `IMAGE_BYTES_PER_ROW` per image,
    `VARIABLE_BYTES_PER_ROW` per other feature of no fixed size, and `UNDECLARED_BYTES_PER_ROW`; videos
    are not in the data files."""
    total = UNDECLARED_BYTES_PER_ROW
    for feature in features.values():
        dtype = feature.get("dtype") if isinstance(feature, Mapping) else None
        shape = feature.get("shape") if isinstance(feature, Mapping) else None
        if dtype == "video":
            continue
        if dtype == "image":
            total += IMAGE_BYTES_PER_ROW
        elif dtype in _ITEM_BYTES and isinstance(shape, list) and all(isinstance(n, int) for n in shape):
            total += DECLARED_FACTOR * _ITEM_BYTES[dtype] * math.prod(shape)
        else:
            total += VARIABLE_BYTES_PER_ROW
    return total


def check_row_group_sizes(
    metadata: pq.FileMetaData,
    bytes_per_row: int,
    *,
    file: str,
    groups: Iterable[int] | None = None,
    episode: int | None = None,
    row_group: int | None = None,
    error: type[DatasetError] = DatasetError,
) -> None:
    """Refuse a row group (of `groups`, default all) whose declared uncompressed size, the larger of the
    footer's row-group total and the sum of its column chunks', passes `ROW_GROUP_FLOOR_BYTES + rows *
    bytes_per_row`. Reads only the footer. `row_group`: the number the file gives the one group checked,
    where `metadata` is that group's own cut of the footer (`reader.format.footer`).

    Raises:
        DatasetError (or `error`): naming `file`, `episode` and the row group.
    """
    for g in range(metadata.num_row_groups) if groups is None else groups:
        group = metadata.row_group(g)
        chunks = sum(group.column(i).total_uncompressed_size for i in range(group.num_columns))
        size = max(group.total_byte_size, chunks)
        limit = ROW_GROUP_FLOOR_BYTES + group.num_rows * bytes_per_row
        if size > limit:
            raise error(
                f"Invalid row group {g if row_group is None else row_group} ({size} bytes uncompressed for {group.num_rows} rows). Expected at "
                f"most {limit} bytes ({ROW_GROUP_FLOOR_BYTES} + {bytes_per_row} per row, from the features "
                "of meta/info.json): a decompression bomb, or columns info.json does not declare.",
                file=file,
                episode=episode,
            )


# A metadata parquet file read whole (`meta/episodes/`, `meta/tasks.parquet`, the lrs/1 index files): lerobot
# writes its `meta/episodes` files at about 100 MB at most, the lrs/1 index is kilobytes per episode; the
# bound keeps a refusal within 256 MiB of the process's baseline.
MAX_METADATA_PARQUET_BYTES = 256 << 20


def parquet_limits(*rels: str) -> Mapping[str, int]:
    """The read bound of each metadata parquet file among `rels` (`Remote.cat_many`'s `limits`)."""
    return {rel: MAX_METADATA_PARQUET_BYTES for rel in rels if rel.endswith(".parquet")}


def parse_parquet(
    data: bytes,
    *,
    file: str,
    columns: list[str] | None = None,
    missing_ok: bool = False,
    bytes_per_row: int | None = None,
    max_bytes: int | None = None,
    error: type[DatasetError] = DatasetError,
) -> pa.Table:
    """A parquet file's bytes as a table (`columns` only; with `missing_ok`, those of them it has), or
    `error` naming `file`: the one way the metadata readers turn a bad parquet file into a message.
    With `bytes_per_row`, a row group larger than `check_row_group_sizes` allows is refused before it
    is decompressed; with `max_bytes`, a file larger than that (read to `max_bytes + 1` bytes at most,
    `parquet_limits`) is refused before it is parsed.

    The read is synchronous, in the calling thread (`ParquetFile.read` without threads or pre-buffering),
    not `pq.read_table`: that one scans with Arrow's dataset API, whose worker threads finish after it
    returns and may drop the last reference to `data` (a Python object: taking the GIL to free it). A
    process that exits meanwhile aborts, `terminate called without an active exception` (exit 134): a
    thread that asks for the GIL while Python finalizes is ended by `pthread_exit`, whose unwinding
    through Arrow's destructors calls `std::terminate`.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise error(
            f"Invalid parquet file ({len(data)} bytes or more). Expected at most {max_bytes} bytes.",
            file=file,
        )
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
        if bytes_per_row is not None:
            check_row_group_sizes(parquet.metadata, bytes_per_row, file=file, error=error)
        if missing_ok and columns is not None:
            names = set(parquet.schema_arrow.names)
            columns = [c for c in columns if c in names]
        return parquet.read(columns=columns, use_threads=False)
    except (pa.ArrowInvalid, OSError) as exc:
        raise error(f"not a readable parquet file ({exc})", file=file) from exc


def parquet_columns(data: bytes, *, file: str) -> list[str]:
    """The top-level column names of a parquet file's bytes (its footer only), or DatasetError naming
    `file`, as `parse_parquet` words it."""
    try:
        return list(pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).schema_arrow.names)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"not a readable parquet file ({exc})", file=file) from exc


def leaf_columns(metadata: pq.FileMetaData) -> list[str]:
    """The leaf column paths of a parquet footer, in the order `row_group(i).column(j)` numbers them (empty
    without row groups).

    Read from the first row group, not `metadata.schema`: that property makes a reference cycle (the
    footer caches its schema, which points back at it), so the footer, about 6 KB per row group parsed,
    stays in memory until Python's cycle collector happens to run; a process reading one footer per data
    file then grows with the dataset.
    """
    if not metadata.num_row_groups:
        return []
    group = metadata.row_group(0)
    return [group.column(i).path_in_schema for i in range(group.num_columns)]


def release_memory() -> None:
    """Hand the memory Arrow's allocator freed back to the OS. Its allocator (mimalloc) keeps freed pages
    resident; reading a metadata index leaves several times the index's size there, which a forked
    DataLoader worker would inherit as resident memory."""
    pa.default_memory_pool().release_unused()


def row_group_span(metadata: pq.FileMetaData, row_group: int) -> tuple[int, int]:
    """Byte range `[start, end)` of all column chunks of a row group.

    A column chunk starts at its dictionary page when it has one, else at its first data page (a
    dictionary offset of 0 is a writer's "none"), and spans `total_compressed_size` bytes; one ranged
    read of the union fetches the whole row group.
    """
    group = metadata.row_group(row_group)
    start, end = None, 0
    for i in range(group.num_columns):
        chunk = group.column(i)
        first = chunk.data_page_offset
        if chunk.has_dictionary_page and chunk.dictionary_page_offset:
            first = min(first, chunk.dictionary_page_offset)
        start = first if start is None else min(start, first)
        end = max(end, first + chunk.total_compressed_size)
    return (start or 0), end


def replace_columns(table: pa.Table, columns: Mapping[str, Any]) -> pa.Table:
    """`table` with the values of these columns replaced, each column keeping its field (name, type,
    nullability); names the table lacks are skipped."""
    for name, values in columns.items():
        position = table.schema.get_field_index(name)
        if position >= 0:
            field = table.schema.field(name)
            table = table.set_column(position, field, pa.array(values).cast(field.type))
    return table
