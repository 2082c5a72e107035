"""The v3 source model: open a LeRobot v3.0 dataset from any location and validate it.

`open_source` reads metadata only (info, episodes, tasks, stats) and checks that every file the
episodes point at exists; bulk files are read later, lazily, by whoever needs them. `check_rows` and
`check_videos` are the deeper checks (they read the `index` columns and the video headers), run by
`reshard` per file as it goes and by `validate` all at once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from cache.remote import Remote, redact, resolve
from reader.errors import DatasetError
from reader.format.parquet import parse_parquet
from reader.format.v3 import (
    EPISODES_DIR,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    EpisodeInfo,
    Info,
    check_tiling,
    concat_episode_tables,
    parse_episodes,
    parse_tasks,
    read_episode_files,
)
from reader.metadata import parse_stats

if TYPE_CHECKING:
    from reshard.selection import Selection


@dataclass(frozen=True)
class Source:
    """An opened v3 dataset: metadata in memory, files behind `remote`.

    Attributes:
        remote: where the files are.
        info: `meta/info.json`.
        episodes: one record per episode, by episode index.
        tasks: task strings by task index.
        stats: `meta/stats.json` (empty when absent).
        episodes_table: the full `meta/episodes` table (stats columns included), by episode index.
        episode_files: the `meta/episodes/` parquet files, sorted.
        parent: for a source with episodes left out (`reshard.selection.select`), the whole source;
            `episodes` and `episodes_table` are then the kept episodes, renumbered.
        selection: which episodes of `parent` are kept.
    """

    remote: Remote
    info: Info
    episodes: list[EpisodeInfo]
    tasks: list[str]
    stats: dict[str, Any]
    episodes_table: pa.Table = field(repr=False)
    episode_files: list[str] = field(default_factory=list)
    parent: Source | None = field(default=None, repr=False)
    selection: Selection | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        kept = f" of {len(self.parent.episodes)}" if self.parent else ""
        return f"Source({self.remote.url!r}, episodes={len(self.episodes)}{kept}, frames={self.total_frames})"

    @property
    def whole(self) -> Source:
        """The source with every episode (itself, unless episodes are left out)."""
        return self.parent or self

    def origin(self, episode: int) -> EpisodeInfo:
        """The source record of episode `episode`: where its rows are, under the source's numbering."""
        if self.parent is None or self.selection is None:
            return self.episodes[episode]
        return self.parent.episodes[self.selection.kept[episode]]

    @property
    def url(self) -> str:
        return self.remote.url

    @property
    def video_keys(self) -> list[str]:
        return self.info.video_keys

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

    def read_json(self, rel: str) -> Any:
        return json.loads(self.remote.cat(rel))


def _read_parquet(
    remote: Remote, rel: str, columns: list[str] | None = None, *, missing_ok: bool = False
) -> pa.Table:
    """`rel` as a table (`columns` only; with `missing_ok`, those of them the file has)."""
    return parse_parquet(remote.cat(rel), file=remote.display(rel), columns=columns, missing_ok=missing_ok)


def open_source(
    url: str, *, storage_options: dict[str, Any] | None = None, check_files: bool = True
) -> Source:
    """Open a v3.0 dataset and validate its metadata.

    Args:
        url: a local path, `file://`, `hf://datasets/...`, `hf://buckets/...`, `s3://`, `http(s)://`, or a
            bare Hub repo id `<owner>/<name>`.
        storage_options: passed to the fsspec filesystem.
        check_files: check that every data and video file the episodes point at exists (one listing).

    Raises:
        DatasetError: the dataset is missing, not v3.0, or its metadata is inconsistent; the message
            names the file, and the episode and field where they apply.
    """
    try:
        remote = resolve(url, storage_options=storage_options)
    except ValueError as exc:
        raise DatasetError(str(exc)) from exc
    try:
        info = Info.parse(remote.cat(INFO_PATH), file=remote.display(INFO_PATH))
    except FileNotFoundError as exc:
        raise DatasetError(
            "missing: not a LeRobot v3 dataset root (no meta/info.json)", file=remote.display(INFO_PATH)
        ) from exc
    found = read_episode_files(remote, info)
    if not found:
        raise DatasetError(
            "no episodes: meta/episodes/ holds no parquet file", file=remote.display(EPISODES_DIR)
        )
    episode_files = [rel for rel, _, _ in found]
    table = concat_episode_tables([t for _, t, _ in found], file=remote.display(EPISODES_DIR))
    table = table.take(pa.compute.sort_indices(table, [("episode_index", "ascending")]))
    episodes = parse_episodes(table, info.video_keys, file=remote.display(EPISODES_DIR))
    if not episodes:
        raise DatasetError("no episodes: the dataset is empty", file=remote.display(EPISODES_DIR))
    try:
        tasks = parse_tasks(_read_parquet(remote, TASKS_PATH), file=remote.display(TASKS_PATH))
    except FileNotFoundError as exc:
        raise DatasetError("missing", file=remote.display(TASKS_PATH)) from exc
    stats = (
        parse_stats(remote.cat(STATS_PATH), file=remote.display(STATS_PATH))
        if remote.exists(STATS_PATH)
        else {}
    )
    source = Source(remote, info, episodes, tasks, stats, table, episode_files)
    check_pointers(source)
    if check_files:
        check_files_exist(source)
    return source


def _find(remote: Remote, rel: str) -> list[str]:
    try:
        return sorted(remote.fs.find(remote.path(rel)))
    except FileNotFoundError:
        return []


def check_pointers(source: Source) -> None:
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


def check_files_exist(source: Source) -> None:
    """Every file an episode points at exists (one recursive listing per top directory).

    Raises:
        DatasetError: naming the first missing file and an episode that needs it (and counting the
            others, `raise_defects`).
    """
    raise_defects(list(iter_missing_files(source, listed_files(source))), source.url)


def listed_files(source: Source) -> set[str] | None:
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


def iter_missing_files(source: Source, present: set[str] | None) -> Iterator[DatasetError]:
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


def check_rows(source: Source, data_file: str, table: pa.Table | None = None) -> None:
    """`iter_row_defects`, raising the first.

    Raises:
        DatasetError: naming the file, the episode and the column.
    """
    for defect in iter_row_defects(source, data_file, table):
        raise defect


def check_kept_rows(source: Source, data_file: str, table: pa.Table | None = None) -> None:
    """`iter_row_defects` of the whole source, but those of the episodes `source` leaves out, and
    those outside every episode its selection records as ignored.

    Raises:
        DatasetError: every other defect of the file at once (`raise_defects`).
    """
    selection = source.selection
    dropped = {d.episode for d in selection.dropped} if selection else set()
    ignored = set(selection.ignored) if selection else set()
    raise_defects(
        [
            defect
            for defect in iter_row_defects(source.whole, data_file, table)
            if defect.episode not in dropped
            and (defect.episode is not None or describe_defect(defect) not in ignored)
        ],
        source.url,
    )


class Located(Protocol):
    """A defect as `DatasetError` and `doctor.Defect` both hold it."""

    problem: str
    file: str | None
    field: str | None


def describe_defect(defect: Located) -> str:
    """A defect in one line: where (file, field) and what is wrong; the episode is said apart."""
    where = [w for w in (defect.file, defect.field and f"field {defect.field!r}") if w]
    return f"{', '.join(where)}: {defect.problem}" if where else defect.problem


def raise_defects(defects: list[DatasetError], url: str) -> None:
    """Raise the first defect; where there are more, its message counts them and names every defective
    episode, and says that `lrs doctor` lists each one.

    Raises:
        DatasetError: when `defects` is not empty.
    """
    if not defects:
        return
    first = defects[0]
    if len(defects) == 1:
        raise first
    episodes = sorted({d.episode for d in defects if d.episode is not None})
    among = f", in episodes {episode_ranges(episodes)}" if episodes else ""
    raise DatasetError(
        f"{first.problem} ({len(defects)} defects in all{among}; `lrs doctor {redact(url)}` lists each, "
        "and `lrs reshard --skip-defective` leaves those episodes out)",
        file=first.file,
        episode=first.episode,
        field=first.field,
    )


def episode_ranges(values: list[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2,5`."""
    parts: list[list[int]] = []
    for value in values:
        if parts and value == parts[-1][-1] + 1:
            parts[-1] = [parts[-1][0], value]
        else:
            parts.append([value])
    return ",".join("-".join(str(v) for v in part) for part in parts)


def iter_row_defects(source: Source, data_file: str, table: pa.Table | None = None) -> Iterator[DatasetError]:
    """The rows of `data_file` are exactly its episodes' `[dataset_from_index, dataset_to_index)`.

    Checks the `index`, `episode_index` and `frame_index` columns: every episode's rows present once,
    contiguous, in order, with frame indices 0..length-1. Where `table` has them (`CHECKED_COLUMNS`),
    also `timestamp` (finite, strictly increasing within the episode and, where the dataset has videos,
    `frame_index / fps` within `TIMESTAMP_TOLERANCE_S`: lerobot finds video frames by timestamp) and
    `task_index` (a row of the tasks table).

    Yields the first defect of each episode (naming the file, the episode and the column), then a row
    count that does not add up.
    """
    where = source.remote.display(data_file)
    if table is None:
        table = _read_parquet(source.remote, data_file, list(CHECKED_COLUMNS), missing_ok=True)
    index = table.column("index").to_numpy()
    ep_col = table.column("episode_index").to_numpy()
    frame = table.column("frame_index").to_numpy()
    episodes = source.episodes_by_data_file().get(data_file, [])
    order = np.argsort(index, kind="stable")
    index, ep_col, frame = index[order], ep_col[order], frame[order]
    for episode in episodes:
        try:
            _check_episode_rows(source, table, episode, index, ep_col, frame, order, where)
        except DatasetError as defect:
            yield defect
    covered = sum(e.length for e in episodes)
    if covered != len(index):
        yield DatasetError(
            f"Invalid row count ({len(index)}). Expected {covered}, the rows of the episodes pointing here.",
            file=where,
            field="index",
        )


def _check_episode_rows(
    source: Source,
    table: pa.Table,
    episode: EpisodeInfo,
    index: np.ndarray,
    ep_col: np.ndarray,
    frame: np.ndarray,
    order: np.ndarray,
    where: str,
) -> None:
    lo, hi = np.searchsorted(index, [episode.dataset_from_index, episode.dataset_to_index])
    rows = hi - lo
    if rows != episode.length or not np.array_equal(
        index[lo:hi], np.arange(episode.dataset_from_index, episode.dataset_to_index)
    ):
        raise DatasetError(
            f"Invalid rows ({rows} rows with index in [{episode.dataset_from_index}, "
            f"{episode.dataset_to_index})). Expected {episode.length}, each index once.",
            file=where,
            episode=episode.episode_index,
            field="index",
        )
    if not (ep_col[lo:hi] == episode.episode_index).all():
        raise DatasetError(
            "rows of another episode inside its index range",
            file=where,
            episode=episode.episode_index,
            field="episode_index",
        )
    if not np.array_equal(frame[lo:hi], np.arange(episode.length)):
        bad = frame[lo:hi]
        dup = len(bad) - len(np.unique(bad))
        raise DatasetError(
            f"Invalid frame_index ({dup} duplicated, {episode.length - len(np.unique(bad))} missing or "
            f"out of order). Expected 0..{episode.length - 1} in order.",
            file=where,
            episode=episode.episode_index,
            field="frame_index",
        )
    _check_timestamps(source, table, order[lo:hi], frame[lo:hi], episode.episode_index, where)
    _check_task_index(source, table, order[lo:hi], episode.episode_index, where)


# The columns `check_rows` reads; those after the first three are checked where a file has them.
CHECKED_COLUMNS = ("index", "episode_index", "frame_index", "timestamp", "task_index")
# lerobot's default `tolerance_s`: how far a timestamp may be from `frame_index / fps`.
TIMESTAMP_TOLERANCE_S = 1e-4


def _check_timestamps(
    source: Source, table: pa.Table, rows: np.ndarray, frame: np.ndarray, episode: int, where: str
) -> None:
    if "timestamp" not in table.column_names:
        return
    column = table.column("timestamp")
    if column.null_count:
        raise DatasetError(
            "Invalid timestamp (null). Expected a number per frame.",
            file=where,
            episode=episode,
            field="timestamp",
        )
    t = column.to_numpy()[rows].astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(t))
    if bad.size:
        raise DatasetError(
            f"Invalid timestamp ({t[bad[0]]}) at frame {int(frame[bad[0]])}. Expected a finite number of seconds.",
            file=where,
            episode=episode,
            field="timestamp",
        )
    steps = np.flatnonzero(np.diff(t) <= 0)
    if steps.size:
        k = int(steps[0])
        raise DatasetError(
            f"Invalid timestamp ({t[k + 1]}) at frame {int(frame[k + 1])}, not after frame {int(frame[k])}'s "
            f"({t[k]}). Expected strictly increasing timestamps within an episode.",
            file=where,
            episode=episode,
            field="timestamp",
        )
    if not source.video_keys:
        return
    expected = frame.astype(np.float64) / float(source.info.fps)
    # float32 timestamps carry their own rounding: about 2.4e-4 s at an hour.
    tolerance = TIMESTAMP_TOLERANCE_S + 2 * np.spacing(np.abs(expected).astype(np.float32)).astype(np.float64)
    off = np.flatnonzero(np.abs(t - expected) > tolerance)
    if off.size:
        k = int(off[0])
        raise DatasetError(
            f"Invalid timestamp ({t[k]:.6f}) at frame {int(frame[k])}. Expected frame_index / fps = "
            f"{expected[k]:.6f} within {TIMESTAMP_TOLERANCE_S} s: lerobot finds each frame's video frame by "
            f"its timestamp ({off.size} frames of the episode are off).",
            file=where,
            episode=episode,
            field="timestamp",
        )


def _check_task_index(source: Source, table: pa.Table, rows: np.ndarray, episode: int, where: str) -> None:
    if "task_index" not in table.column_names or not len(rows):
        return
    values = table.column("task_index").to_numpy(zero_copy_only=False)[rows]
    bad = np.flatnonzero((values < 0) | (values >= len(source.tasks)))
    if bad.size:
        raise DatasetError(
            f"Invalid task_index ({values[bad[0]]}) at row {int(bad[0])} of the episode. Expected < "
            f"{len(source.tasks)}, the rows of meta/tasks.parquet.",
            file=where,
            episode=episode,
            field="task_index",
        )


def video_duration_s(source: Source, video_file: str) -> float:
    """The end time of the video stream of a file, in seconds, read from its container header."""
    import av

    where = source.remote.display(video_file)
    try:
        with source.remote.open(video_file) as handle, av.open(handle) as container:
            stream = container.streams.video[0]
            if stream.duration is not None and stream.time_base is not None:
                start = stream.start_time or 0
                return float((start + stream.duration) * stream.time_base)
            if container.duration is not None:
                return container.duration / 1_000_000
    except (av.error.FFmpegError, IndexError, OSError) as exc:
        raise DatasetError(f"not a readable video ({exc})", file=where) from exc
    raise DatasetError("video has no duration in its header", file=where)


def check_videos(source: Source, video_files: Iterable[str] | None = None) -> None:
    """Every episode's video time range lies inside its file.

    Raises:
        DatasetError: naming the file, the episode and the camera.
    """
    for defect in iter_video_defects(source, video_files):
        raise defect


def iter_video_defects(
    source: Source, video_files: Iterable[str] | None = None, *, per_episode: bool = False
) -> Iterator[DatasetError]:
    """Each video file that is unreadable (with `per_episode`, once for each of its episodes), and each
    episode whose time range its file does not hold (naming the file, the episode and the camera)."""
    tolerance = 1.0 / source.info.fps
    wanted = set(video_files) if video_files is not None else None
    for key in source.video_keys:
        for rel, episodes in source.episodes_by_video_file(key).items():
            if wanted is not None and rel not in wanted:
                continue
            try:
                duration = video_duration_s(source, rel)
            except DatasetError as defect:
                if not per_episode:
                    yield defect
                    continue
                for episode in episodes:
                    yield DatasetError(defect.problem, file=defect.file, episode=episode.episode_index)
                continue
            for episode in episodes:
                seg = episode.video(key)
                if seg.to_timestamp > duration + tolerance:
                    yield DatasetError(
                        f"Invalid to_timestamp ({seg.to_timestamp:.4f} s). Expected <= the file's duration "
                        f"({duration:.4f} s).",
                        file=source.remote.display(rel),
                        episode=episode.episode_index,
                        field=f"videos/{key}/to_timestamp",
                    )


def validate(source: Source) -> None:
    """All checks, reading every data file's index columns and every video header."""
    for data_file in source.data_files():
        check_rows(source, data_file)
    check_videos(source)


def describe(source: Source) -> dict[str, Any]:
    """A short JSON-able summary of a source."""
    lengths = [e.length for e in source.episodes]
    return {
        "url": source.url,
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
