"""What the reader needs to know about a dataset, for lrs/1 and plain v3 alike: episodes, files, tasks.

`Catalog.open(url)` reads metadata only: for lrs/1 the `meta/lrs/` index (`reader.format.layout.Layout`), for
plain v3 `meta/episodes/` (enumerated from the v3 path template, so that sources that cannot list
directories, like plain HTTP, work too), plus `meta/tasks.parquet`. The fingerprint names the dataset
in the node cache and in resume states; it is derived from the index (lrs/1: every file's size and
sha256) or from `meta/info.json` and `meta/episodes/` (v3), so any change of content changes it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.printable import printable
from cache.remote import Reads, Remote, resolve
from reader.errors import DatasetError, LayoutError
from reader.format.fresh import Stale, find_stale, metadata_paths
from reader.format.index import EPISODES_INDEX, FILES_INDEX, LAYOUT_JSON, EpisodeIndex, FileIndex, RowSequence
from reader.format.jsonfile import json_limits
from reader.format.layout import Layout, read_files_index
from reader.format.locate import find_rows, list_data_files
from reader.format.parquet import MAX_METADATA_PARQUET_BYTES, parquet_limits, parse_parquet, release_memory
from reader.format.v3 import (
    INFO_PATH,
    TASKS_PATH,
    EpisodeInfo,
    Info,
    OpenedDataset,
    read_tasks,
    read_v3_metadata,
)

LayoutKind = Literal["lrs/1", "v3"]

log = logging.getLogger(__name__)


# The metadata files `Catalog.open` reads at once: what an lrs/1 dataset needs, and a v3 one's info and tasks.
_METADATA = (LAYOUT_JSON, INFO_PATH, EPISODES_INDEX, FILES_INDEX, TASKS_PATH)


def _metadata_limits(*rels: str) -> dict[str, int]:
    """How far each metadata file of `rels` is read at most (`Remote.cat_many`'s `limits`)."""
    return {**json_limits(*rels), **parquet_limits(*rels)}


@dataclass(frozen=True)
class VideoRef:
    """Where one camera of one episode is, and the time its first frame has in that file."""

    key: str
    path: str
    from_timestamp: float
    bytes: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class EpisodeRef:
    """Where one episode's rows and videos are.

    Attributes:
        episode_index: the episode.
        length: its number of frames.
        dataset_from_index: the `index` of its first row.
        data_path: the data file holding its rows.
        first_row: plain v3: position of its first row inside `data_path` (-1 for lrs/1, read by row group).
        row_group: lrs/1 only: the row group holding exactly its rows.
        byte_range: lrs/1 only: `[start, end)` of that row group in `data_path`.
        videos: one per camera, in `info.json` feature order.
        crc32: lrs/1 only, where the index records it: zlib's CRC-32 of `byte_range`.
    """

    episode_index: int
    length: int
    dataset_from_index: int
    data_path: str
    first_row: int
    row_group: int | None = None
    byte_range: tuple[int, int] | None = None
    videos: tuple[VideoRef, ...] = ()
    crc32: int | None = None

    def __repr__(self) -> str:
        return f"EpisodeRef({self.episode_index}, length={self.length}, {self.data_path}, cameras={len(self.videos)})"


@dataclass(frozen=True)
class Catalog(OpenedDataset):
    """A dataset as the reader sees it.

    Attributes (and `OpenedDataset`'s `remote` and `info`):
        kind: "lrs/1" when the dataset carries the lrs index, else "v3".
        episodes: every episode, by episode index (lrs/1: made from the columnar index when asked for).
        tasks: task strings by task index.
        fingerprint: content identity (see the module docstring).
        file_sizes: sizes of the files the index lists (lrs/1; empty for v3).

    An lrs/1 catalog pickles as its location and fingerprint alone, and the process that unpickles it
    reads the index again (refusing another version), so what a DataLoader worker receives does not
    grow with the dataset.
    """

    remote: Remote
    info: Info = field(repr=False)
    kind: LayoutKind
    episodes: Sequence[EpisodeRef] = field(repr=False)
    tasks: tuple[str, ...] = field(repr=False)
    fingerprint: str
    file_sizes: Mapping[str, int] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"Catalog({self.remote.shown!r}, {self.kind}, episodes={len(self.episodes)})"

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self.kind != "lrs/1":
            return super().__reduce__()
        return (_reopen, (self.remote, self.fingerprint))

    def row_group_ranges(self, rel: str) -> np.ndarray | None:
        """lrs/1: the `(byte offset, byte count)` of every row group of data file `rel`, in row-group
        order, from the index (None for v3, or when the index does not describe each row group once)."""
        if not isinstance(self.episodes, _IndexRefs):
            return None
        index = self.episodes.episode_index
        mask = pc.equal(index.table.column("data_path"), rel).to_numpy(zero_copy_only=False)
        groups = index.column("row_group")[mask]
        order = np.argsort(groups, kind="stable")
        if not np.array_equal(groups[order], np.arange(groups.size)):
            return None
        ranges = np.stack(
            [index.column("row_group_offset")[mask], index.column("row_group_bytes")[mask]], axis=1
        )
        return ranges[order]

    @property
    def lengths(self) -> np.ndarray:
        """Frames of every episode, by episode index."""
        if isinstance(self.episodes, _IndexRefs):
            return self.episodes.episode_index.column("length")
        return np.array([e.length for e in self.episodes], dtype=np.int64)

    @property
    def from_indices(self) -> np.ndarray:
        """The `index` of every episode's first row (`dataset_from_index`), by episode index."""
        if isinstance(self.episodes, _IndexRefs):
            return self.episodes.episode_index.column("dataset_from_index")
        return np.array([e.dataset_from_index for e in self.episodes], dtype=np.int64)

    @classmethod
    def open(cls, source: str | Remote, *, storage_options: dict[str, Any] | None = None) -> Catalog:
        """Read the metadata of the dataset at `source`: lrs/1 when it has `meta/lrs/layout.json` and that
        index still describes the dataset; plain v3 when it has none, or a stale one (`reader.format.fresh`:
        edited after its reshard), which is then named in one warning per process.

        Raises:
            IntegrityError: read in place, a data or video file the index lists is missing or of another
                size while `meta/` is exactly what the index lists (damage or tampering, not an edit).
            DatasetError: metadata missing or malformed (LayoutError for a broken lrs/1 index).
            FetchError: a metadata file could not be read.
        """
        try:
            remote = (
                source
                if isinstance(source, Remote)
                else resolve(source, storage_options=storage_options, probe_ranges=False)
            )
        except ValueError as exc:
            raise DatasetError(str(exc)) from exc
        # Every metadata file either layout needs, read at once: on a bucket that takes the time of one
        # request instead of five, most of the time to a first batch. A failed read raises its error
        # where the file is used, so a missing or broken file gets the error it always had.
        reads = remote.cat_many(_METADATA, probe_ranges=True, limits=_metadata_limits(*_METADATA))
        try:
            reads.cat(LAYOUT_JSON)
        except FileNotFoundError:
            return _open_v3(remote, reads)
        return _open_checked(remote, reads)

    @property
    def column_order(self) -> list[str]:
        """Data columns in the order lerobot's items list them (`info.json` features, cameras excluded)."""
        return [k for k, f in self.info.features.items() if f.get("dtype") != "video"]


def _read_table(cat: Callable[[str], bytes], remote: Remote, rel: str) -> tuple[pa.Table, bytes]:
    data = cat(rel)
    return parse_parquet(data, file=remote.display(rel), max_bytes=MAX_METADATA_PARQUET_BYTES), data


def _tasks(remote: Remote, reads: Reads) -> tuple[str, ...]:
    try:
        data = reads.cat(TASKS_PATH)
    except FileNotFoundError as exc:
        raise DatasetError("missing", file=remote.display(TASKS_PATH)) from exc
    return tuple(read_tasks(data, file=remote.display(TASKS_PATH)))


class _IndexRefs(RowSequence[EpisodeRef]):
    """An lrs/1 dataset's episodes as `EpisodeRef`s, each made from the columnar index when asked for."""

    def __init__(self, index: EpisodeIndex, files: FileIndex) -> None:
        self.episode_index, self._files = index, files
        # Per camera, the files-index row of each episode's video (its sha256), found once by arrays.
        self._video_rows = tuple(
            files.positions(index.table.column(f"videos/{key}/path").combine_chunks())
            for key in index.video_keys
        )

    def __len__(self) -> int:
        return len(self.episode_index)

    def row(self, i: int) -> EpisodeRef:
        """The ref of the episode at position `i` (0 <= i < len)."""
        e = self.episode_index.row(i)
        return EpisodeRef(
            episode_index=e.episode_index,
            length=e.length,
            dataset_from_index=e.dataset_from_index,
            data_path=e.data_path,
            first_row=-1,
            row_group=e.row_group,
            byte_range=(e.row_group_offset, e.row_group_offset + e.row_group_bytes),
            crc32=e.row_group_crc32,
            videos=tuple(
                VideoRef(v.key, v.path, v.from_timestamp, v.bytes, self._files.sha256(int(rows[i])))
                for v, rows in zip(e.videos, self._video_rows, strict=True)
            ),
        )


class _Sizes(Mapping[str, int]):
    """path -> size of every file the index lists, looked up in the columnar files index."""

    def __init__(self, files: FileIndex) -> None:
        self._files = files

    def __getitem__(self, path: str) -> int:
        row = self._files.position(path)
        if row < 0:
            raise KeyError(path)
        return self._files.size(row)

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


# The stale indexes this process has warned of: one warning per dataset and file, however many opens.
_WARNED: set[tuple[str, str]] = set()


def _open_checked(remote: Remote, reads: Reads) -> Catalog:
    """An lrs/1 dataset opened as lrs/1 when its index is fresh, as plain v3 (with one warning) when it
    was edited, and refused when a listed file is damaged under unchanged metadata."""
    try:
        files = read_files_index(remote, reads.cat)
    except LayoutError:
        return _open_lrs(remote, reads)  # a broken index: the error Layout.load has always raised
    stale = check_fresh(remote, files, reads)
    if stale is None:
        return _open_lrs(remote, reads, files)
    if stale.damaged:
        raise stale.refusal(remote)
    key = (remote.shown, stale.file)
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning("%s Reading it as plain LeRobot v3 meanwhile.", printable(stale.describe(remote)))
    return _open_v3(remote, reads)


def check_fresh(remote: Remote, files: FileIndex, reads: Reads | None = None) -> Stale | None:
    """`find_stale`, with the metadata files not in `reads` read in one concurrent round."""
    paths = metadata_paths(files)
    more = remote.cat_many(
        [p for p in paths if reads is None or p not in _METADATA], limits=_metadata_limits(*paths)
    )

    def cat(rel: str) -> bytes:
        return reads.cat(rel) if reads is not None and rel in _METADATA else more.cat(rel)

    return find_stale(remote, files, cat)


def _open_lrs(remote: Remote, reads: Reads, files: FileIndex | None = None) -> Catalog:
    layout = Layout.load(remote, prefetched=reads, files=files)
    refs = _IndexRefs(layout.episodes, layout.files)
    fingerprint = f"lrs1-{_files_digest(layout.files.table)[:20]}"
    release_memory()
    return Catalog(
        remote=remote,
        info=layout.info,
        kind="lrs/1",
        episodes=refs,
        tasks=_tasks(remote, reads),
        fingerprint=fingerprint,
        file_sizes=_Sizes(layout.files),
    )


def _files_digest(files: pa.Table) -> str:
    """sha256 of `f"{path}\\0{bytes}\\0{sha256}\\n"` over the files index sorted by path: each line built
    by Arrow and hashed from its buffer, so no Python string per file is made."""
    digest = hashlib.sha256()
    for batch in files.to_batches(max_chunksize=65536):
        sizes = pc.cast(batch.column("bytes"), pa.string())
        ends = pc.binary_join_element_wise(batch.column("sha256"), pa.scalar("\n"), "")
        lines = pc.binary_join_element_wise(batch.column("path"), sizes, ends, "\0")
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[
            lines.offset : lines.offset + len(lines) + 1
        ]
        if len(lines):
            digest.update(memoryview(lines.buffers()[2])[int(offsets[0]) : int(offsets[-1])])
    return digest.hexdigest()


def _reopen(remote: Remote, fingerprint: str) -> Catalog:
    """An unpickled lrs/1 catalog: its index read again, which must be the version that was pickled.

    Raises:
        DatasetError: the dataset changed since (another fingerprint).
    """
    # The process that pickled it checked the index was fresh; the fingerprint check below tells a
    # re-published index, and each row group's CRC-32 an edited file.
    reads = remote.cat_many(_METADATA, limits=_metadata_limits(*_METADATA))
    try:
        reads.cat(LAYOUT_JSON)
    except FileNotFoundError:
        catalog = _open_v3(remote, reads)
    else:
        catalog = _open_lrs(remote, reads)
    if catalog.fingerprint != fingerprint:
        raise changed_since(remote.shown, fingerprint, catalog.fingerprint)
    return catalog


def changed_since(
    url: str, then: str, now: str, *, file: str | None = None, episode: int | None = None
) -> DatasetError:
    """The error for a dataset whose index fingerprint is `now` where this stream opened `then`."""
    return DatasetError(
        f"Invalid dataset: {url} changed since this stream opened it (index {then}, now {now}), likely "
        "re-published while training read it. Expected one version: restart the job to read the new one, "
        "and publish new versions under a new prefix.",
        file=file,
        episode=episode,
    )


def _open_v3(remote: Remote, reads: Reads) -> Catalog:
    read = read_v3_metadata(remote, cat=reads.cat)
    if read.warning is not None:
        log.warning("%s", read.warning)
    digest = hashlib.sha256(read.info_bytes)
    for _, data in read.episode_files:
        digest.update(data)
    infos, warning = find_rows(remote, read.info, read.episodes, list_data_files(remote))
    if warning is not None:
        log.warning("%s", warning)
    return Catalog(
        remote=remote,
        info=read.info,
        kind="v3",
        episodes=_v3_refs(read.info, infos),
        tasks=tuple(read.tasks),
        fingerprint=f"v3-{digest.hexdigest()[:20]}",
    )


def _v3_refs(info: Info, infos: list[EpisodeInfo]) -> tuple[EpisodeRef, ...]:
    paths = [info.data_file(e.data_chunk_index, e.data_file_index) for e in infos]
    # v3 data files hold whole episodes in `index` order, so a file's first row is its lowest index
    # (the pointers are true: `locate` made them so).
    file_start: dict[str, int] = {}
    for rel, e in zip(paths, infos, strict=True):
        file_start[rel] = min(file_start.get(rel, e.dataset_from_index), e.dataset_from_index)
    refs = []
    for rel, e in zip(paths, infos, strict=True):
        videos = tuple(
            VideoRef(s.key, info.video_file(s.key, s.chunk_index, s.file_index), s.from_timestamp)
            for s in e.videos
        )
        refs.append(
            EpisodeRef(
                episode_index=e.episode_index,
                length=e.length,
                dataset_from_index=e.dataset_from_index,
                data_path=rel,
                first_row=e.dataset_from_index - file_start[rel],
                videos=videos,
            )
        )
    return tuple(refs)
