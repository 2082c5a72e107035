"""Where each episode's rows really are: the data files' own `index` ranges against `meta/episodes`.

lerobot 0.4.x's v2.1 -> v3.0 converter writes a stale `data/chunk_index`/`data/file_index` for the first
episode of every data file after the first (it records the file it was filling before the episode made
it overflow). lerobot's reader loads every data file and finds rows by their `index`, so it never
notices; lrs reads the rows where they are in the same way. Only the footers are read: a data file holds
whole episodes in `index` order, so the `index` column's statistics (lowest, highest) and the row count
tell which episodes a file holds. The rows themselves are checked later, where they are read
(`reshard.source.checks`, `reader.runtime.rows.read_episode`), against `index` and `episode_index`.

Cost: one footer per data file (its size and one ranged read remotely, 8 files at a time; locally one at
a time, as there is no latency to hide), about 6 KB per row group while parsed and freed at once
(`leaf_columns`), and the `index` column of a file only where its footer has no statistics.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cache.arguments import format_index_list
from cache.errors import LrsError
from reader.errors import DatasetError
from reader.format.parquet import leaf_columns, parse_parquet
from reader.format.v3 import EpisodeInfo, Info

if TYPE_CHECKING:
    from cache.remote import Remote

_MAGIC = b"PAR1"
_FOOTER_GUESS = 64 * 1024
_THREADS = 8


@dataclass(frozen=True)
class FileRows:
    """What a data file's footer says of its rows: how many, and the lowest and highest `index`."""

    path: str
    rows: int
    first_index: int
    last_index: int

    def holds(self, episode: EpisodeInfo) -> bool:
        """Whether the episode's `index` range lies inside this file's."""
        return (
            self.first_index <= episode.dataset_from_index and episode.dataset_to_index - 1 <= self.last_index
        )


@dataclass(frozen=True)
class Moved:
    """An episode whose rows are in `found`, not in the file `meta/episodes` names (`stated`)."""

    episode: int
    stated: str
    found: str


def footer_bytes(remote: Remote, rel: str) -> bytes:
    """A parquet file's footer as a parquet "file" of its own (`PAR1` + footer): its size, then one ranged
    read of the last 64 KiB (a second where the footer is longer).

    pyarrow and DuckDB read the metadata of such a stub as if it were the whole file, so the footers
    of a remote dataset can be inspected without downloading it.

    Raises:
        DatasetError: the file is too short or has no parquet footer.
        FileNotFoundError: the file is missing.
    """
    size = remote.size(rel)
    where = remote.display(rel)
    tail = remote.cat_range(rel, max(0, size - _FOOTER_GUESS), size) if size >= 12 else b""
    if tail[-4:] != _MAGIC:
        raise DatasetError(f"not a readable parquet file ({size} bytes, no parquet footer)", file=where)
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > size:
        raise DatasetError(f"not a readable parquet file (footer of {length} bytes in {size})", file=where)
    if length + 8 > len(tail):
        tail = remote.cat_range(rel, size - 8 - length, size)
    return _MAGIC + tail[-(length + 8) :]


def read_footer(remote: Remote, rel: str) -> pq.FileMetaData:
    """The parquet metadata of a dataset file, without reading its row groups (in place where local).

    Raises:
        DatasetError: the file is not parquet or its footer is corrupt.
        FileNotFoundError: the file is missing.
    """
    local = remote.local_path(rel)
    where = local if local is not None else pa.BufferReader(footer_bytes(remote, rel))
    try:
        return pq.read_metadata(where)
    except FileNotFoundError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"not a readable parquet file ({exc})", file=remote.display(rel)) from exc


def file_rows(remote: Remote, rel: str) -> FileRows | None:
    """`FileRows` of a data file from its footer (its `index` column read where the footer has no
    statistics); None for a file without rows or without an `index` column.

    Raises:
        DatasetError, FileNotFoundError, FetchError: the file is unreadable or missing.
    """
    metadata = read_footer(remote, rel)
    names = leaf_columns(metadata)
    if "index" not in names or not metadata.num_rows:
        return None
    column = names.index("index")
    low, high = [], []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            table = parse_parquet(remote.cat(rel), file=remote.display(rel), columns=["index"])
            values = table.column("index")
            low, high = [pc.min(values).as_py()], [pc.max(values).as_py()]
            break
        low.append(stats.min)
        high.append(stats.max)
    return FileRows(rel, metadata.num_rows, int(min(low)), int(max(high)))


def read_file_rows(remote: Remote, rels: Iterable[str]) -> dict[str, FileRows]:
    """`file_rows` of each file, read concurrently; a missing or unreadable file is left out (the
    checks that need it report it)."""

    def one(rel: str) -> tuple[str, FileRows | None]:
        try:
            return rel, file_rows(remote, rel)
        except (OSError, LrsError):
            return rel, None

    rels = sorted(set(rels))
    if not rels:
        return {}
    if remote.is_local:  # no latency to hide: one footer in memory at a time
        found = dict(map(one, rels))
    else:
        with ThreadPoolExecutor(
            max_workers=min(len(rels), _THREADS), thread_name_prefix="lrs-footer"
        ) as pool:
            found = dict(pool.map(one, rels))
    return {rel: rows for rel, rows in found.items() if rows is not None}


def list_data_files(remote: Remote) -> list[str] | None:
    """The dataset-relative paths under `data/`, or None where the store cannot list (plain HTTP)."""
    if remote.is_http:
        return None
    prefix = f"{remote.root}/" if remote.root else ""
    try:
        found = remote.fs.find(remote.path("data"))
    except (FileNotFoundError, NotImplementedError):
        return None
    return [path[len(prefix) :] if path.startswith(prefix) else path for path in found]


def candidate_files(info: Info, episodes: Sequence[EpisodeInfo], listed: Iterable[str] | None) -> list[str]:
    """The data files to look in: those the episodes name, those `listed` under `data/` that fit the
    `data_path` template, and, where the store cannot list (`listed` None), the one after the last named
    (lerobot 0.4.x's converter leaves a last file holding one episode unnamed)."""
    named = {(e.data_chunk_index, e.data_file_index) for e in episodes}
    files = {info.data_file(*n) for n in named}
    if listed is not None:
        pattern = template_pattern(info.data_path)
        files |= {rel for rel in listed if pattern.fullmatch(rel)}
    elif named:
        chunk, file = max(named)
        chunks_size = int(info.raw.get("chunks_size") or 1000)
        files.add(info.data_file(*((chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1))))
    return sorted(files)


def template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the paths a v3 path template makes, capturing its fields."""
    parts = []
    for text, name, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(text))
        if name is not None:
            parts.append(f"(?P<{name}>\\d+)" if name.endswith("_index") else f"(?P<{name}>[^/]+)")
    return re.compile("".join(parts))


def locate(
    info: Info, episodes: Sequence[EpisodeInfo], files: Mapping[str, FileRows]
) -> tuple[list[EpisodeInfo], list[Moved]]:
    """The episodes with their data pointers made true, and those that moved.

    An episode keeps its pointer where the file it names holds its `index` range, or where no file or
    more than one other file does (its rows are then missing or broken: a defect the row checks
    report). Otherwise it points at the one file that holds its range.
    """
    pattern = template_pattern(info.data_path)
    paths = list(files)
    firsts = np.array([files[p].first_index for p in paths], dtype=np.int64)
    lasts = np.array([files[p].last_index for p in paths], dtype=np.int64)
    out, moved = [], []
    named: dict[tuple[int, int], str] = {}  # each path formatted once, not once per episode
    for episode in episodes:
        pointer = (episode.data_chunk_index, episode.data_file_index)
        stated = named.get(pointer) or named.setdefault(pointer, info.data_file(*pointer))
        if stated in files and files[stated].holds(episode):
            out.append(episode)
            continue
        holding = np.flatnonzero(
            (firsts <= episode.dataset_from_index) & (lasts >= episode.dataset_to_index - 1)
        )
        match = pattern.fullmatch(paths[holding[0]]) if holding.size == 1 else None
        if match is None:
            out.append(episode)
            continue
        chunk, file = int(match["chunk_index"]), int(match["file_index"])
        out.append(replace(episode, data_chunk_index=chunk, data_file_index=file))
        moved.append(Moved(episode.episode_index, stated, match.group(0)))
    return out, moved


def find_rows(
    remote: Remote, info: Info, episodes: Sequence[EpisodeInfo], listed: Iterable[str] | None
) -> tuple[list[EpisodeInfo], str | None]:
    """The episodes with their data pointers made true (`locate` over the footers of the
    `candidate_files`), and the warning that says which moved (None where none did)."""
    files = read_file_rows(remote, candidate_files(info, episodes, listed))
    located, moved = locate(info, episodes, files)
    return located, describe_moved(moved) if moved else None


def describe_moved(moved: Sequence[Moved]) -> str:
    """The warning for episodes found elsewhere than `meta/episodes` says, in one line."""
    first = moved[0]
    return (
        f"meta/episodes points {len(moved)} episode{'s' if len(moved) != 1 else ''} "
        f"({format_index_list([m.episode for m in moved])}) at the wrong data file (episode {first.episode}: "
        f"{first.stated}, its rows are in {first.found}), as lerobot 0.4.x's v2.1 converter wrote it; "
        "lrs reads the rows where they are, as lerobot does, and `lrs reshard` writes true pointers"
    )
