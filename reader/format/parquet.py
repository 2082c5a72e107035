"""Parquet as the formats use it: reading a metadata file into a table, and the byte range of a row group.

`row_group_span` is the one rule for where a row group's bytes are: the writer records it in the lrs/1
index, the reader fetches it with one ranged read, and `lrs verify` checks the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from reader.errors import DatasetError


def parse_parquet(
    data: bytes,
    *,
    file: str,
    columns: list[str] | None = None,
    missing_ok: bool = False,
    error: type[DatasetError] = DatasetError,
) -> pa.Table:
    """A parquet file's bytes as a table (`columns` only; with `missing_ok`, those of them it has), or
    `error` naming `file`: the one way the metadata readers turn a bad parquet file into a message.

    The read is synchronous, in the calling thread (`ParquetFile.read` without threads or pre-buffering),
    not `pq.read_table`: that one scans with Arrow's dataset API, whose worker threads finish after it
    returns and may drop the last reference to `data` (a Python object: taking the GIL to free it). A
    process that exits meanwhile aborts, `terminate called without an active exception` (exit 134): a
    thread that asks for the GIL while Python finalizes is ended by `pthread_exit`, whose unwinding
    through Arrow's destructors calls `std::terminate`.
    """
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
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
