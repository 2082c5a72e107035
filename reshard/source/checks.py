"""The per-file checks of a v3 source: its data files' rows and its videos' time ranges.

`reshard` runs them per file as it writes (`check_rows`, or with episodes left out `check_kept_rows`),
`lrs doctor` collects every defect (`iter_row_defects`, `iter_video_defects`), and `validate` runs them
all at once. Each defect names the file, the episode and the field; `reshard.source.defects.raise_defects`
turns many into one error that counts them and names every defective episode.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from reader.errors import DatasetError
from reader.format.parquet import data_row_bytes, parquet_columns, parse_parquet
from reader.format.v3 import INDEX_COLUMNS, INFO_PATH, EpisodeInfo, Info, VideoSegment, frame_size
from reshard.source.defects import describe_defect, raise_defects
from reshard.video.extent import VideoExtent, frames_in_range, video_extent

if TYPE_CHECKING:
    from reshard.source.model import V3Source


def check_rows(source: V3Source, data_file: str, table: pa.Table | None = None) -> None:
    """`iter_row_defects`, raising the first.

    Raises:
        DatasetError: naming the file, the episode and the column.
    """
    for defect in iter_row_defects(source, data_file, table):
        raise defect


def check_kept_rows(source: V3Source, data_file: str, table: pa.Table | None = None) -> None:
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


def iter_row_defects(
    source: V3Source, data_file: str, table: pa.Table | None = None
) -> Iterator[DatasetError]:
    """The rows of `data_file` are exactly its episodes' `[dataset_from_index, dataset_to_index)`.

    Checks the `index`, `episode_index` and `frame_index` columns: every episode's rows present once,
    contiguous, in order, with frame indices 0..length-1. Where `table` has them (`CHECKED_COLUMNS`),
    also `timestamp` (finite, strictly increasing within the episode and, where the dataset has videos,
    `frame_index / fps` within `TIMESTAMP_TOLERANCE_S`: lerobot finds video frames by timestamp) and
    `task_index` (a row of the tasks table).

    Yields, where it reads the file itself (`table` None), a feature `meta/info.json` declares that the
    file lacks (`absent_feature`); then the first defect of each episode (naming the file, the episode and
    the column), then a row count that does not add up.
    """
    where = source.remote.display(data_file)
    if table is None:
        data = source.remote.cat(data_file)
        absent = absent_feature(source.info, parquet_columns(data, file=where), file=where)
        if absent is not None:
            yield absent
        # A row group over its bound (`check_row_group_sizes`) is refused here, before it is decompressed.
        table = parse_parquet(
            data,
            file=where,
            columns=list(CHECKED_COLUMNS),
            missing_ok=True,
            bytes_per_row=data_row_bytes(source.info.features),
        )
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
    source: V3Source,
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


# Feature dtypes whose values need not be data file columns: videos are files of their own, and lerobot's
# writers keep image features in the parquet files or as files beside them.
_FILE_DTYPES = ("video", "image")


def absent_feature(info: Info, columns: Iterable[str], *, file: str) -> DatasetError | None:
    """The defect of a data file with `columns` that lacks a feature `info` declares, or None.

    Video and image features are not checked (`_FILE_DTYPES`), nor lerobot's index columns (`index`,
    `task_index`, ...), which the row checks read where a file has them.
    """
    names = set(columns)
    absent = [
        name
        for name, feature in info.features.items()
        if feature.get("dtype") not in _FILE_DTYPES and name not in INDEX_COLUMNS and name not in names
    ]
    if not absent:
        return None
    return DatasetError(
        f"Invalid data file (no {', '.join(repr(a) for a in absent)} column{'s' if len(absent) > 1 else ''}). "
        f"Expected a column for every feature {INFO_PATH} declares, but video and image features.",
        file=file,
        field=absent[0],
    )


# The columns `check_rows` reads; those after the first three are checked where a file has them.
CHECKED_COLUMNS = ("index", "episode_index", "frame_index", "timestamp", "task_index")
# lerobot's default `tolerance_s`: how far a timestamp may be from `frame_index / fps`.
TIMESTAMP_TOLERANCE_S = 1e-4


def _check_timestamps(
    source: V3Source, table: pa.Table, rows: np.ndarray, frame: np.ndarray, episode: int, where: str
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


def _check_task_index(source: V3Source, table: pa.Table, rows: np.ndarray, episode: int, where: str) -> None:
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


def read_video_extent(source: V3Source, video_file: str) -> VideoExtent:
    """How much of a video file is there (`reshard.video.extent`): its header's end time and, for a file
    cut short, the time of every frame whose packet is whole.

    Raises:
        DatasetError: the file cannot be read, or has no video stream or end time.
    """
    import av

    where = source.remote.display(video_file)
    try:
        with source.remote.open(video_file) as handle, av.open(handle) as container:
            return video_extent(container)
    except (av.error.FFmpegError, OSError) as exc:  # before ValueError: PyAV's EINVAL is one too
        raise DatasetError(f"not a readable video ({exc})", file=where) from exc
    except ValueError as exc:
        raise DatasetError(str(exc), file=where) from exc


def check_videos(source: V3Source, video_files: Iterable[str] | None = None) -> None:
    """Every episode's video time range lies inside its file.

    Raises:
        DatasetError: naming the file, the episode and the camera.
    """
    for defect in iter_video_defects(source, video_files):
        raise defect


def iter_video_defects(
    source: V3Source, video_files: Iterable[str] | None = None, *, per_episode: bool = False
) -> Iterator[DatasetError]:
    """Each video file that is unreadable (with `per_episode`, once for each of its episodes), and each
    episode whose file's frames are not the size its camera declares (`frame_size_defects`) or whose time
    range its file does not hold (naming the file, the episode and the camera)."""
    wanted = set(video_files) if video_files is not None else None
    for key in source.video_keys:
        for rel, episodes in source.episodes_by_video_file(key).items():
            if wanted is not None and rel not in wanted:
                continue
            try:
                extent = read_video_extent(source, rel)
            except DatasetError as defect:
                if not per_episode:
                    yield defect
                    continue
                for episode in episodes:
                    yield DatasetError(defect.problem, file=defect.file, episode=episode.episode_index)
                continue
            yield from frame_size_defects(source, key, rel, episodes, extent.width, extent.height)
            for episode in episodes:
                found = _video_range_problem(extent, episode.video(key), episode.length, source.info.fps)
                if found:
                    field, problem = found
                    yield DatasetError(
                        problem, file=source.remote.display(rel), episode=episode.episode_index, field=field
                    )


def frame_size_defects(
    source: V3Source, key: str, rel: str, episodes: Iterable[EpisodeInfo], width: int, height: int
) -> list[DatasetError]:
    """One defect per episode of the video file `rel` of camera `key` where the file's frames
    (`width` x `height`, from its header) are not the size `meta/info.json` declares for the camera
    (`frame_size` of its `shape`); none where they are, or where the header or the shape says nothing.

    lerobot's reader returns the frames the file holds, whatever the shape says: a 4096x4096 video in
    place of a 64x96 camera gives 50 MB per frame to a model built for 18 KB.
    """
    declared = frame_size(source.info.features[key])
    if declared is None or not width or not height or declared == (height, width):
        return []
    shape = source.info.features[key]["shape"]
    problem = (
        f"Invalid frame size ({width}x{height}). Expected {declared[1]}x{declared[0]} (width x height), "
        f"the shape {list(shape)} that {INFO_PATH} declares for the camera."
    )
    where = source.remote.display(rel)
    return [
        DatasetError(problem, file=where, episode=e.episode_index, field=f"videos/{key}") for e in episodes
    ]


def _video_range_problem(
    extent: VideoExtent, seg: VideoSegment, length: int, fps: float
) -> tuple[str, str] | None:
    """What keeps an episode's frames out of its file, if anything, as (field, problem): a time range past
    the header's end, or (in a file cut short) frames of the range whose packets are not there."""
    if seg.to_timestamp > extent.end_s + 1.0 / fps:
        return f"videos/{seg.key}/to_timestamp", (
            f"Invalid to_timestamp ({seg.to_timestamp:.4f} s). Expected <= the file's duration "
            f"({extent.end_s:.4f} s)."
        )
    if extent.times_s is None:
        return None
    found = frames_in_range(extent.times_s, seg.from_timestamp, seg.to_timestamp, fps)
    if found >= length:
        return None
    last = f", the last at {extent.times_s[-1]:.4f} s" if len(extent.times_s) else ""
    promised = f" of {extent.frames}" if extent.frames else ""
    return f"videos/{seg.key}", (
        f"Invalid video (truncated: {len(extent.times_s)}{promised} frames present{last}). "
        f"Expected the episode's {length} frames in [{seg.from_timestamp:.4f}, {seg.to_timestamp:.4f}) s; "
        f"{found} are there."
    )


def validate(source: V3Source) -> None:
    """All checks, reading every data file's index columns and every video header."""
    for data_file in source.data_files():
        check_rows(source, data_file)
    check_videos(source)
