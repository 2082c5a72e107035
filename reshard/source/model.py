"""The v3 source model: open a LeRobot v3.0 dataset from any location and validate it.

`open_source` reads metadata only (info, episodes, tasks, stats) and checks that every file the
episodes point at exists; bulk files are read later, lazily, by whoever needs them. The deeper checks,
which read the `index` columns and the video headers, are in `reshard.source.checks`.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from cache.remote import Remote, resolve
from reader.errors import DatasetError
from reader.format.jsonfile import cat_json
from reader.format.locate import find_rows
from reader.format.parquet import MAX_METADATA_PARQUET_BYTES, parse_parquet
from reader.format.v3 import (
    EPISODES_DIR,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    EpisodeInfo,
    Info,
    OpenedDataset,
    check_tiling,
    concat_episode_tables,
    read_v3_metadata,
    sorted_by_episode_index,
)
from reader.metadata import parse_stats
from reshard.source.defects import raise_defects
from reshard.source.dropped import Selection
from reshard.source.fingerprint import SourceFingerprint


@dataclass(frozen=True)
class V3Source(OpenedDataset):
    """An opened v3 dataset: metadata in memory, files behind `remote`.

    Attributes (and `OpenedDataset`'s `remote` and `info`):
        episodes: one record per episode, by episode index.
        tasks: task strings by task index.
        stats: `meta/stats.json` (empty when absent).
        episodes_table: the `meta/episodes` table, by episode index: every column (stats included), or
            only those the episode records need (`open_source(all_columns=False)`).
        episode_files: the `meta/episodes/` parquet files, sorted.
        parent: for a source with episodes left out (`reshard.source.selection.select`), the whole source;
            `episodes` and `episodes_table` are then the kept episodes, renumbered.
        selection: which episodes of `parent` are kept.
        fingerprint: the content hash of the metadata it was opened from (`reshard.source.fingerprint`), of
            every episode.
        warnings: what is off but readable, one line each (stale data pointers, optional columns
            missing), for `doctor` to report and `reshard` to log.
        all_columns: whether `episodes_table` holds every column (`whole_episodes_table` reads them
            where it does not).
    """

    remote: Remote
    info: Info
    episodes: list[EpisodeInfo]
    tasks: list[str]
    stats: dict[str, Any]
    episodes_table: pa.Table = field(repr=False)
    episode_files: list[str] = field(default_factory=list)
    parent: V3Source | None = field(default=None, repr=False)
    selection: Selection | None = field(default=None, repr=False)
    fingerprint: SourceFingerprint | None = field(default=None, repr=False)
    warnings: tuple[str, ...] = ()
    all_columns: bool = True

    def __repr__(self) -> str:
        kept = f" of {len(self.parent.episodes)}" if self.parent else ""
        return f"V3Source({self.remote.shown!r}, episodes={len(self.episodes)}{kept}, frames={self.total_frames})"

    @property
    def whole(self) -> V3Source:
        """The source with every episode (itself, unless episodes are left out)."""
        return self.parent or self

    def origin(self, episode: int) -> EpisodeInfo:
        """The source record of episode `episode`: where its rows are, under the source's numbering."""
        if self.parent is None or self.selection is None:
            return self.episodes[episode]
        return self.parent.episodes[self.selection.kept[episode]]

    @property
    def total_frames(self) -> int:
        return sum(e.length for e in self.episodes)

    def data_file(self, episode: EpisodeInfo) -> str:
        """The data file holding an episode's rows."""
        return self.info.data_file(episode.data_chunk_index, episode.data_file_index)

    def video_file(self, episode: EpisodeInfo, key: str) -> str:
        """The video file holding an episode's frames of camera `key`."""
        seg = episode.video(key)
        return self.info.video_file(key, seg.chunk_index, seg.file_index)

    def data_files(self) -> list[str]:
        """Every data file, sorted, each once."""
        return sorted({self.data_file(e) for e in self.episodes})

    def video_files(self) -> list[str]:
        """Every video file, sorted, each once."""
        return sorted({self.video_file(e, k) for e in self.episodes for k in self.video_keys})

    def episodes_by_data_file(self) -> dict[str, list[EpisodeInfo]]:
        """Episodes grouped by their data file, in episode order (grouped once, then reused: the
        per-file checks ask for it once per data file)."""
        return self._by_data_file

    @cached_property
    def _by_data_file(self) -> dict[str, list[EpisodeInfo]]:
        groups: dict[str, list[EpisodeInfo]] = defaultdict(list)
        for episode in self.episodes:
            groups[self.data_file(episode)].append(episode)
        return dict(sorted(groups.items()))

    def episodes_by_video_file(self, key: str) -> dict[str, list[EpisodeInfo]]:
        """Episodes grouped by their video file of camera `key`, in episode order."""
        groups: dict[str, list[EpisodeInfo]] = defaultdict(list)
        for episode in self.episodes:
            groups[self.video_file(episode, key)].append(episode)
        return dict(sorted(groups.items()))

    def episode_file_bytes(self, rel: str) -> bytes:
        """A `meta/episodes/` file's bytes, as they were when the source was opened.

        Raises:
            DatasetError: the file changed since (its sha256 is not the fingerprint's).
        """
        data = self.whole.remote.cat(rel, limit=MAX_METADATA_PARQUET_BYTES)
        expected = self.whole.fingerprint.files.get(rel) if self.whole.fingerprint else None
        if expected is not None and hashlib.sha256(data).hexdigest() != expected:
            raise DatasetError(
                "Invalid content (changed while lrs was reading the source). Expected the metadata the job "
                "began with: rerun it, and leave the source unchanged while it runs.",
                file=self.whole.remote.display(rel),
            )
        return data

    def whole_episodes_table(self) -> pa.Table:
        """The `meta/episodes` table with every column (per-episode stats included), by episode index:
        `episodes_table` where it has them, else the source's files read again (`episode_file_bytes`).

        Raises:
            DatasetError: a file changed since the source was opened, or is unreadable.
        """
        if self.all_columns:
            return self.episodes_table
        where = self.remote.display(EPISODES_DIR)
        tables = [parse_parquet(self.episode_file_bytes(rel), file=where) for rel in self.episode_files]
        return sorted_by_episode_index(concat_episode_tables(tables, file=where))


def open_source(
    url: str,
    *,
    storage_options: dict[str, Any] | None = None,
    check_files: bool = True,
    locate_rows: bool = True,
    all_columns: bool = True,
    check_links: bool = True,
) -> V3Source:
    """Open a v3.0 dataset and validate its metadata.

    Args:
        url: a local path, `file://`, `hf://datasets/...`, `hf://buckets/...`, `s3://`, `http(s)://`, or a
            bare Hub repo id `<owner>/<name>`.
        storage_options: passed to the fsspec filesystem.
        check_files: check that every data and video file the episodes point at exists (one listing).
        locate_rows: where `meta/episodes` points an episode at a data file that does not hold its rows,
            point it where they are (`true_pointers`: every data file's footer read); False: take the
            pointers as they are (`lrs verify` checks them).
        all_columns: keep every `meta/episodes` column, the per-episode stats included (a reshard
            rewrites them); False: only those the episode records need (`episode_columns`), which is most
            of the memory the metadata takes (2.1 KB per episode of Arrow for 1 camera, about 8 KB of RSS
            to read).
        check_links: refuse a local dataset holding a symbolic link that leads out of it
            (`escaping_links`), before reading any file; False: the caller reports them (`lrs doctor`).

    Raises:
        DatasetError: the dataset is missing, not v3.0, or its metadata is inconsistent; the message
            names the file, and the episode and field where they apply.
    """
    try:
        remote = resolve(url, storage_options=storage_options)
    except ValueError as exc:
        raise DatasetError(str(exc)) from exc
    if check_links:  # before any file is read through one
        raise_defects(escaping_links(remote), remote.url)
    read = read_v3_metadata(remote, all_columns=all_columns)
    metadata = {INFO_PATH: read.info_bytes, TASKS_PATH: read.tasks_bytes, **dict(read.episode_files)}
    stats: dict[str, Any] = {}
    if remote.exists(STATS_PATH):
        metadata[STATS_PATH] = cat_json(remote, STATS_PATH)
        stats = parse_stats(metadata[STATS_PATH], file=remote.display(STATS_PATH))
    fingerprint = SourceFingerprint.of(
        metadata, episodes=len(read.episodes), frames=sum(e.length for e in read.episodes)
    )
    source = V3Source(
        remote,
        read.info,
        read.episodes,
        read.tasks,
        stats,
        read.table,
        [rel for rel, _ in read.episode_files],
        fingerprint=fingerprint,
        warnings=(read.warning,) if read.warning else (),
        all_columns=all_columns,
    )
    check_pointers(source)
    listed = listed_files(source)
    if locate_rows:
        source = true_pointers(source, listed)
    if check_files:
        raise_defects(list(iter_missing_files(source, listed)), source.url)
    return source


def true_pointers(source: V3Source, listed: set[str] | None) -> V3Source:
    """`source` with each episode's data pointer naming the file its rows are in, where `meta/episodes`
    names another (`reader.format.locate`), and a warning saying so."""
    episodes, warning = find_rows(source.remote, source.info, source.episodes, listed)
    if warning is None:
        return source
    return replace(source, episodes=episodes, warnings=(*source.warnings, warning))


def _find(remote: Remote, rel: str) -> list[str]:
    try:
        return sorted(remote.fs.find(remote.path(rel)))
    except FileNotFoundError:
        return []


def check_pointers(source: V3Source) -> None:
    """Episode ranges tile `[0, total_frames)` in order; timestamps agree with lengths and fps.

    Raises:
        DatasetError: naming the episode and field of the first inconsistency.
    """
    where = source.remote.display(EPISODES_DIR)
    expected_from = check_tiling(source.episodes, file=where)
    fps = source.info.fps
    for episode in source.episodes:
        for seg in episode.videos:
            span = seg.to_timestamp - seg.from_timestamp
            if abs(span - episode.length / fps) > 1.5 / fps:
                raise DatasetError(
                    f"Invalid video span ({span:.4f} s). Expected length / fps = {episode.length / fps:.4f} s.",
                    file=where,
                    episode=episode.episode_index,
                    field=f"videos/{seg.key}/to_timestamp",
                )
    total = source.info.total_frames
    if total and total != expected_from:
        raise DatasetError(
            f"Invalid total_frames ({total}). Expected {expected_from}, the sum of episode lengths.",
            file=source.remote.display(INFO_PATH),
            field="total_frames",
        )
    for episode in source.episodes:
        for task in episode.tasks:
            if task not in source.tasks:
                raise DatasetError(
                    f"Invalid task ({task!r}). Expected one of meta/tasks.parquet.",
                    file=where,
                    episode=episode.episode_index,
                    field="tasks",
                )


def check_files_exist(source: V3Source) -> None:
    """Every file an episode points at exists (one recursive listing per top directory).

    Raises:
        DatasetError: naming the first missing file and an episode that needs it (and counting the
            others, `raise_defects`).
    """
    raise_defects(list(iter_missing_files(source, listed_files(source))), source.url)


def listed_files(source: V3Source) -> set[str] | None:
    """The dataset-relative paths under `data/` and `videos/`, or None where the store cannot list
    (plain HTTP)."""
    present = set()
    for top in ("data", "videos"):
        root = source.remote.root
        for path in _find(source.remote, top):
            present.add(path[len(root) + 1 :] if root and path.startswith(root + "/") else path)
    if not present and not source.remote.is_local:
        return None
    return present


def escaping_links(remote: Remote) -> list[DatasetError]:
    """Each symbolic link of a local dataset whose target lies outside the dataset (or nowhere): a dataset
    is untrusted input, and a link would make lrs read, and copy into an output or a cache, a file of the
    machine's that the dataset does not hold. Links that stay inside, or lead into huggingface_hub's cache,
    are fine. Remote stores have none."""
    if not remote.is_local or not os.path.isdir(remote.root):
        return []
    root = os.path.realpath(remote.root)
    # huggingface_hub's own cache: older `snapshot_download(local_dir=...)` linked large files there.
    from huggingface_hub.constants import HF_HUB_CACHE

    trusted = [root, os.path.realpath(HF_HUB_CACHE)]
    found = []
    for dirpath, dirnames, filenames in os.walk(remote.root):
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                continue
            target = os.path.realpath(path)
            inside = any(os.path.commonpath([t, target]) == t for t in trusted)
            if not inside or not os.path.exists(target):
                found.append(
                    DatasetError(
                        f"Invalid file (a symbolic link to {target}, outside the dataset). Expected every "
                        "file and folder of the dataset inside it (a copy without links: cp -rL).",
                        file=remote.display(os.path.relpath(path, remote.root)),
                    )
                )
    return found


def iter_missing_files(source: V3Source, present: set[str] | None) -> Iterator[DatasetError]:
    """Each file an episode points at that does not exist, once per (file, episode); `present` is
    `listed_files` (None: one existence check per file)."""
    if present is None:
        present = {f for f in source.data_files() + source.video_files() if source.remote.exists(f)}
    for episode in source.episodes:
        needed = [(source.data_file(episode), "data")] + [
            (source.video_file(episode, k), f"videos/{k}") for k in source.video_keys
        ]
        for rel, field_name in needed:
            if rel not in present:
                yield DatasetError(
                    f"missing file {rel!r}",
                    file=source.remote.display(rel),
                    episode=episode.episode_index,
                    field=f"{field_name}/file_index",
                )


def describe(source: V3Source) -> dict[str, Any]:
    """A short JSON-able summary of a source."""
    lengths = [e.length for e in source.episodes]
    return {
        "url": source.remote.shown,
        "codebase_version": source.info.raw.get("codebase_version"),
        "fps": source.info.fps,
        "episodes": len(source.episodes),
        "frames": sum(lengths),
        "episode_length": {"min": min(lengths), "median": float(np.median(lengths)), "max": max(lengths)},
        "tasks": len(source.tasks),
        "cameras": {
            **{k: source.info.features[k].get("info", {}).get("video.codec") for k in source.video_keys},
            **{k: "images in the parquet" for k in source.info.image_keys},
        },
        "features": [
            k for k in source.info.features if k not in source.video_keys and k not in source.info.image_keys
        ],
        "data_files": len(source.data_files()),
        "video_files": len(source.video_files()),
    }
