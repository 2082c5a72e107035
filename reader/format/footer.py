"""One row group's parquet footer, cut out of a data file's footer, so a reader keeps 8 bytes per row group
instead of the parsed footer (about 6 KB per row group of a 7-column table: 50 MB for a file of 8,000
episodes).

A parquet footer is a Thrift (compact protocol) `FileMetaData` whose field 4 is the list of `RowGroup`s.
A footer with the same fields but a list of one row group is a valid footer of that row group alone: its
column chunks keep their absolute offsets, so pyarrow reads the row group from the file's bytes with it.

Where each `RowGroup` ends is found once per file from what the lrs/1 index records: a `RowGroup` ends with
`file_offset` and `total_compressed_size`, which are the index's row-group byte range, then an optional
`ordinal` and a stop byte. The scan checks the cut it finds from end to end (the fields before and after
the list parse, every row group is found in order, the list is exactly covered); a file where it does
not hold is read with its whole footer (`None`), and every cut footer is checked again by the reader
against the index (rows and byte range) before use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_MAGIC = b"PAR1"
_STRUCT, _LIST, _SET, _MAP = 12, 9, 10, 11
_ROW_GROUPS_FIELD = 4
_TOTAL_COMPRESSED_HEADER = 0x16  # field delta 1 (file_offset -> total_compressed_size), type i64
_OFFSET_HEADERS = (0x26, 0x16)  # file_offset after num_rows (delta 2) or after sorting_columns (delta 1)
_ORDINAL_HEADER = 0x14  # delta 1, type i16
_WINDOW = 4 * 1024 * 1024


class _Truncated(Exception):
    """The bytes parsed end inside a value."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(data):
            raise _Truncated
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _zigzag(value: int) -> bytes:
    """The compact protocol's encoding of an i64: zigzag, then varint."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip(data: bytes, i: int, kind: int) -> int:
    """The position after a compact-protocol value of type `kind` at `i`."""
    if kind in (1, 2):  # bool inside a field header
        return i
    if kind == 3:
        return i + 1
    if kind in (4, 5, 6):
        return _varint(data, i)[1]
    if kind == 7:
        return i + 8
    if kind == 8:
        size, i = _varint(data, i)
        return i + size
    if kind in (_LIST, _SET):
        size, element, i = _list_header(data, i)
        if element in (1, 2):
            return i + size
        for _ in range(size):
            i = _skip(data, i, element)
        return i
    if kind == _MAP:
        size, i = _varint(data, i)
        if size:
            types = data[i]
            i += 1
            for _ in range(size):
                i = _skip(data, _skip(data, i, types >> 4), types & 0x0F)
        return i
    if kind == _STRUCT:
        while True:
            kind, _, i = _field_header(data, i, 0)
            if kind == 0:
                return i
            i = _skip(data, i, kind)
    raise ValueError(f"Invalid Thrift type ({kind}). Expected a compact protocol type.")


def _field_header(data: bytes, i: int, last: int) -> tuple[int, int, int]:
    """(type, field id, position after the header); type 0 is the end of a struct."""
    if i >= len(data):
        raise _Truncated
    header = data[i]
    i += 1
    if header == 0:
        return 0, last, i
    delta = header >> 4
    if delta:
        return header & 0x0F, last + delta, i
    value, i = _varint(data, i)
    return header & 0x0F, (value >> 1) ^ -(value & 1), i


def _list_header(data: bytes, i: int) -> tuple[int, int, int]:
    """(size, element type, position after the header)."""
    if i >= len(data):
        raise _Truncated
    header = data[i]
    size = header >> 4
    i += 1
    if size == 15:
        size, i = _varint(data, i)
    return size, header & 0x0F, i


@dataclass(frozen=True)
class FooterCuts:
    """Where each row group's `RowGroup` struct is inside a file's footer.

    Attributes:
        footer_start: the file offset of the Thrift footer.
        head: the footer up to the row-group list (its field header included).
        tail: the footer after the row-group list.
        ends: the footer offset where each row group's struct ends (row group k starts where k-1 ends,
            row group 0 at `first`).
        first: the footer offset where row group 0's struct starts.
    """

    footer_start: int
    head: bytes = field(repr=False)
    tail: bytes = field(repr=False)
    first: int
    ends: np.ndarray = field(repr=False)

    @property
    def nbytes(self) -> int:
        return len(self.head) + len(self.tail) + self.ends.nbytes

    def span(self, row_group: int) -> tuple[int, int]:
        """The file byte range of row group `row_group`'s struct in the footer."""
        start = self.first if row_group == 0 else int(self.ends[row_group - 1])
        return self.footer_start + start, self.footer_start + int(self.ends[row_group])

    def metadata(self, struct: bytes) -> pq.FileMetaData:
        """A footer holding only the row group whose struct is `struct` (as row group 0)."""
        body = self.head + bytes([0x10 | _STRUCT]) + struct + self.tail
        return pq.read_metadata(pa.BufferReader(_MAGIC + body + len(body).to_bytes(4, "little") + _MAGIC))


def cut_footer(
    read: Callable[[int, int], bytes] | None, size: int, groups: np.ndarray, *, tail: bytes
) -> FooterCuts | None:
    """Find where each row group's struct is in the footer of a file of `size` bytes.

    Args:
        read: reads bytes `[start, end)` of the file; None when `tail` holds the whole footer.
        size: the file's size.
        groups: per row group, in order, its `(byte offset, byte count)` as the lrs/1 index records them.
        tail: the file's last bytes, already read (at least the footer length and magic).

    Returns:
        The cuts, or None when the footer is not laid out as expected (read it whole then).
    """
    if len(tail) < 8 or tail[-4:] != _MAGIC:
        return None
    length = int.from_bytes(tail[-8:-4], "little")
    footer_start = size - 8 - length
    if footer_start < 4:
        return None
    if read is None:
        if footer_start < size - len(tail):
            return None  # not the whole footer
        offset = size - len(tail)

        def read(start: int, end: int) -> bytes:
            return tail[start - offset : end - offset]

    try:
        return _cut(read, footer_start, length, groups)
    except (_Truncated, ValueError, IndexError):
        return None


def _cut(
    read: Callable[[int, int], bytes], footer_start: int, length: int, groups: np.ndarray
) -> FooterCuts | None:
    window_start = 0
    window = read(footer_start, footer_start + min(length, _WINDOW))
    # The fields before the row groups (version, schema, num_rows), then the list header.
    i, last = 0, 0
    while True:
        kind, last, i = _field_header(window, i, last)
        if kind == 0:
            return None
        if last == _ROW_GROUPS_FIELD and kind == _LIST:
            break
        i = _skip(window, i, kind)
    head = window[:i]
    count, element, i = _list_header(window, i)
    if count != len(groups) or element != _STRUCT:
        return None
    first, ends = i, np.empty(count, dtype=np.int64)
    for k, (offset, nbytes) in enumerate(groups.tolist()):
        found = _end_of_group(window, i - window_start, offset, nbytes)
        if found is None and window_start != i and window_start + len(window) < length:
            window_start = i  # slide: the rest of the list is in the next window
            window = read(footer_start + window_start, footer_start + min(length, window_start + _WINDOW))
            found = _end_of_group(window, 0, offset, nbytes)
        if found is None:
            return None
        i = window_start + found
        ends[k] = i
    # What follows the list must parse as the rest of the struct and end the footer exactly.
    rest = read(footer_start + i, footer_start + length)
    j = 0
    while True:
        kind, last, j = _field_header(rest, j, last)
        if kind == 0:
            break
        j = _skip(rest, j, kind)
    if j != len(rest):
        return None
    return FooterCuts(footer_start, bytes(head), bytes(rest), first, ends)


def _end_of_group(window: bytes, start: int, offset: int, nbytes: int) -> int | None:
    """The window position after the struct of the row group at `[offset, offset + nbytes)` of the file,
    searching from `start`: its `file_offset`, `total_compressed_size`, optional `ordinal`, stop."""
    needle = _zigzag(offset) + bytes([_TOTAL_COMPRESSED_HEADER]) + _zigzag(nbytes)
    at = start
    while True:
        at = window.find(needle, at)
        if at < 0:
            return None
        end = at + len(needle)
        if at > start and window[at - 1] in _OFFSET_HEADERS and end < len(window):
            if window[end] == 0:
                return end + 1
            if window[end] == _ORDINAL_HEADER:
                try:
                    _, after = _varint(window, end + 1)
                except _Truncated:
                    return None
                if after < len(window) and window[after] == 0:
                    return after + 1
        at += 1
