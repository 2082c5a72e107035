"""The read side of the lrs/1 contract: load `meta/info.json` and the `meta/lrs/` index of a dataset.

`Layout.load(url)` reads four small files (info, layout.json, episodes.parquet, files.parquet) through
`cache.remote`, checks that they agree with each other, and returns frozen records. It never touches
the data or video files: `reshard.verify` does that, and the reader fetches them through the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.remote import Reads, Remote, resolve
from reader.errors import DatasetError, LayoutError
from reader.format.index import (
    EPISODES_INDEX,
    FILES_INDEX,
    LAYOUT_JSON,
    EpisodeEntry,
    EpisodeIndex,
    FileIndex,
    episodes_from_table,
    file_index,
    parse_layout_json,
)
from reader.format.jsonfile import cat_json, json_limits
from reader.format.parquet import MAX_METADATA_PARQUET_BYTES, parquet_limits, parse_parquet, release_memory
from reader.format.v3 import INFO_PATH, Info, OpenedDataset, check_tiling


@dataclass(frozen=True)
class Layout(OpenedDataset):
    """An lrs/1 dataset's metadata and index.

    Attributes (and `OpenedDataset`'s `remote` and `info`):
        layout: `meta/lrs/layout.json` (layout version, source, parameters, tool).
        episodes: one entry per episode, by episode index (held as columns, see `EpisodeIndex`).
        files: every file but `files.parquet`, by path (held as columns, see `FileIndex`).
    """

    remote: Remote
    info: Info
    layout: dict[str, Any] = field(repr=False)
    episodes: EpisodeIndex = field(repr=False)
    files: FileIndex = field(repr=False)

    def __repr__(self) -> str:
        return f"Layout({self.remote.shown!r}, episodes={len(self.episodes)}, files={len(self.files)})"

    @classmethod
    def load(
        cls,
        url: str | Remote,
        *,
        storage_options: dict[str, Any] | None = None,
        prefetched: Reads | None = None,
        files: FileIndex | None = None,
    ) -> Layout:
        """Load and cross-check the lrs/1 metadata of the dataset at `url`.

        Args:
            url: a dataset location (see `cache.remote.resolve`) or an already resolved `Remote`.
            storage_options: passed to the fsspec filesystem when `url` is a string.
            prefetched: metadata files the caller has read already (`Remote.cat_many`); they are not
                read again.
            files: `meta/lrs/files.parquet` as the caller parsed it already (`read_files_index`).

        Raises:
            LayoutError: the dataset is not lrs/1, or its index is missing, malformed or disagrees with
                `meta/info.json` (the message names the file and episode).
            DatasetError: `meta/info.json` is missing or malformed.
            FetchError: a metadata file could not be read.
        """
        remote = url if isinstance(url, Remote) else resolve(url, storage_options=storage_options)
        reads = (
            prefetched
            if prefetched is not None
            else remote.bounded(
                {**json_limits(INFO_PATH, LAYOUT_JSON), **parquet_limits(EPISODES_INDEX, FILES_INDEX)}
            )
        )
        cat = reads.cat
        try:
            info = Info.parse(cat(INFO_PATH), file=remote.display(INFO_PATH))
        except FileNotFoundError as exc:
            raise DatasetError("missing: not a LeRobot dataset root", file=remote.display(INFO_PATH)) from exc
        layout = parse_layout_json(_cat(cat, remote, LAYOUT_JSON), file=remote.display(LAYOUT_JSON))
        episodes = episodes_from_table(
            _read_table(cat, remote, EPISODES_INDEX), info.video_keys, file=remote.display(EPISODES_INDEX)
        )
        files = files if files is not None else read_files_index(remote, cat)
        result = cls(remote=remote, info=info, layout=layout, episodes=episodes, files=files)
        result.check()
        release_memory()
        return result

    @property
    def params(self) -> dict[str, Any]:
        """The reshard parameters recorded in `layout.json`."""
        return dict(self.layout.get("params", {}))

    @property
    def total_frames(self) -> int:
        return int(self.episodes.column("length").sum())

    def episode(self, episode_index: int) -> EpisodeEntry:
        """The index entry of one episode."""
        if not 0 <= episode_index < len(self.episodes):
            raise IndexError(
                f"Invalid episode_index ({episode_index}). Expected 0 <= episode_index < {len(self.episodes)}."
            )
        return self.episodes[episode_index]

    def data_files(self) -> list[str]:
        """Every data file the episodes point at, sorted, each once."""
        return sorted(pc.unique(self.episodes.table.column("data_path")).to_pylist())

    def check(self) -> None:
        """Cross-check the index with itself and with `meta/info.json` (no data or video file is read).

        Raises:
            LayoutError: naming the index file and the first episode that disagrees.
        """
        expected_from = self._check_tiling()
        for position in self._unlisted():
            self._check_files_listed(self.episodes[position])
        if self.info.total_episodes != len(self.episodes) or self.info.total_frames != expected_from:
            raise LayoutError(
                f"Invalid totals ({self.info.total_episodes} episodes, {self.info.total_frames} frames). "
                f"Expected {len(self.episodes)} episodes, {expected_from} frames as in the index.",
                file=self.remote.display(INFO_PATH),
                field="total_episodes",
            )

    def _check_tiling(self) -> int:
        """`check_tiling` by arrays; the record-by-record rule runs only to name what is wrong."""
        lengths = self.episodes.column("length")
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else lengths
        if (
            np.array_equal(self.episodes.column("episode_index"), np.arange(lengths.size))
            and np.array_equal(self.episodes.column("dataset_from_index"), starts)
            and (lengths >= 1).all()
        ):
            return int(lengths.sum())
        return check_tiling(self.episodes, file=self.remote.display(EPISODES_INDEX), error=LayoutError)

    def _unlisted(self) -> list[int]:
        """Positions of episodes whose data file is not listed, or whose videos are not listed with their
        size (by arrays; at most the first one)."""
        table = self.episodes.table
        bad = self.files.positions(table.column("data_path").combine_chunks()) < 0
        for key in self.info.video_keys:
            rows = self.files.positions(table.column(f"videos/{key}/path").combine_chunks())
            listed = np.append(self.files.sizes, -1)  # row -1: not listed
            bad |= (rows < 0) | (listed[rows] != self.episodes.column(f"videos/{key}/bytes"))
        return np.flatnonzero(bad)[:1].tolist()

    def _check_files_listed(self, entry: EpisodeEntry) -> None:
        where = self.remote.display(FILES_INDEX)
        if entry.data_path not in self.files:
            raise LayoutError(
                f"data file {entry.data_path!r} not listed", file=where, episode=entry.episode_index
            )
        for video in entry.videos:
            listed = self.files.get(video.path)
            if listed is None or listed.bytes != video.bytes:
                raise LayoutError(
                    f"Invalid video entry ({video.path!r}, {video.bytes} bytes). Expected a file listed with "
                    f"that size (listed: {listed.bytes if listed else 'no'}).",
                    file=where,
                    episode=entry.episode_index,
                    field=f"videos/{video.key}/bytes",
                )


def read_files_index(remote: Remote, cat: Callable[[str], bytes]) -> FileIndex:
    """Read and parse `meta/lrs/files.parquet` (`cat`: reads a dataset-relative file).

    Raises:
        LayoutError: the file is missing or malformed.
    """
    return file_index(_read_table(cat, remote, FILES_INDEX), file=remote.display(FILES_INDEX))


def is_lrs(url: str | Remote, *, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether the dataset at `url` has an lrs/1 `layout.json` (not checked further)."""
    remote = url if isinstance(url, Remote) else resolve(url, storage_options=storage_options)
    try:
        parse_layout_json(cat_json(remote, LAYOUT_JSON))
    except (FileNotFoundError, LayoutError):
        return False
    return True


def _cat(cat: Callable[[str], bytes], remote: Remote, rel: str) -> bytes:
    try:
        return cat(rel)
    except FileNotFoundError as exc:
        raise LayoutError(
            "missing: not an lrs/1 dataset (run `lrs reshard`)", file=remote.display(rel)
        ) from exc


def _read_table(cat: Callable[[str], bytes], remote: Remote, rel: str) -> pa.Table:
    data = _cat(cat, remote, rel)
    return parse_parquet(
        data, file=remote.display(rel), max_bytes=MAX_METADATA_PARQUET_BYTES, error=LayoutError
    )
