"""The output's own check classes of `verify` (2 to 5): `files`, `tables`, `pointers` and `videos`.

Each records what it finds in the `VerifyRun` (see `reshard.verify.runner`). `files` and `tables` check
a part of the files at a time (`check_files`, `check_table`: the jobs of `verify --workers`);
`video_problems` judges one episode video from its probe, for `reshard.verify.episode_videos`, which
reads each output video once for both the `videos` and the `source-videos` classes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reader.errors import DatasetError
from reader.format.index import FILES_INDEX
from reader.format.v3 import EPISODES_DIR, frame_size
from reshard.job.execute import list_files
from reshard.job.meta import path_sha256
from reshard.job.tables import INDEX_COLUMNS, range_crc32, row_group_ranges
from reshard.source.checks import check_rows
from reshard.verify.context import VerifyRun
from reshard.video.compare import VideoProbe

# --- 2. files -----------------------------------------------------------------------------------------


def files_to_check(run: VerifyRun) -> tuple[list[tuple[str, bool]], list[str]]:
    """Every listed file in order with whether the store lists it, and the files it lists that the index
    does not (besides the index itself). Stores that cannot list (plain HTTP) give no listing: then every
    listed file counts as present and is checked by fetching it."""
    present = list_files(run.remote)
    listed = [(rel, not present or rel in present) for rel in sorted(run.layout.files)]
    unlisted = sorted(set(present) - set(run.layout.files) - {FILES_INDEX})
    return listed, unlisted


def check_files(run: VerifyRun, files: Sequence[tuple[str, bool]]) -> None:
    """The `files` check of some listed files (`files_to_check`): each is there with its size and sha256."""
    for rel, present in files:
        entry = run.layout.files[rel]
        if not present:
            run.fail("files", "missing", file=rel)
            continue
        try:
            with run.local(run.remote, rel) as path:
                size = Path(path).stat().st_size
                if size != entry.bytes:
                    run.fail(
                        "files", f"Invalid size ({size}). Expected {entry.bytes} as files.parquet lists.", rel
                    )
                elif path_sha256(path) != entry.sha256:
                    run.fail("files", "Invalid sha256. Expected the one files.parquet lists.", rel)
        except FileNotFoundError:
            run.fail("files", "missing", file=rel)


def fail_unlisted(run: VerifyRun, unlisted: Sequence[str]) -> None:
    for rel in unlisted:
        run.fail("files", "not listed in meta/lrs/files.parquet", file=rel)


# --- 3. tables ----------------------------------------------------------------------------------------


def tables_to_check(run: VerifyRun) -> list[tuple[str, tuple[int, ...]]]:
    """Every data file, sorted, with the positions of its episodes in the index."""
    by_file: dict[str, list[int]] = {}
    for position, rel in enumerate(run.layout.episodes.table.column("data_path").to_pylist()):
        by_file.setdefault(rel, []).append(position)
    return [(rel, tuple(positions)) for rel, positions in sorted(by_file.items())]


def check_table(run: VerifyRun, rel: str, positions: Sequence[int]) -> None:
    """The `tables` check of one data file, whose episodes are at `positions` of the index."""
    with run.local(run.remote, rel) as path:
        _check_data_file(run, rel, path, [run.layout.episodes[p] for p in positions])


def _check_data_file(run: VerifyRun, rel: str, path: str, entries: list[Any]) -> None:
    # One parse of the footer (a file of N row groups has N row groups of column metadata to parse).
    file = pq.ParquetFile(path)
    meta = file.metadata
    if meta.num_row_groups != len(entries):
        run.fail(
            "tables",
            f"Invalid row groups ({meta.num_row_groups}). Expected {len(entries)}, one per episode.",
            rel,
        )
        return
    ranges = row_group_ranges(meta)
    with open(path, "rb") as handle:
        for entry in entries:
            _check_row_group(run, rel, file, ranges, handle, entry)
    try:
        check_rows(run.dataset, rel, file.read(columns=INDEX_COLUMNS))
    except DatasetError as exc:
        run.fail("tables", str(exc), rel)


def _check_row_group(
    run: VerifyRun,
    rel: str,
    file: pq.ParquetFile,
    ranges: list[tuple[int, int]],
    handle: BinaryIO,
    entry: Any,
) -> None:
    group = file.metadata.row_group(entry.row_group)
    ep = entry.episode_index
    if group.num_rows != entry.length:
        run.fail("tables", f"Invalid row group rows ({group.num_rows}). Expected {entry.length}.", rel, ep)
        return
    if ranges[entry.row_group] != (entry.row_group_offset, entry.row_group_bytes):
        run.fail(
            "tables",
            f"Invalid row group byte range ({entry.row_group_offset}, {entry.row_group_bytes}). "
            f"Expected {ranges[entry.row_group]}, covering all its column chunks.",
            rel,
            ep,
        )
    if entry.row_group_crc32 is not None:
        crc = range_crc32(handle, entry.row_group_offset, entry.row_group_bytes)
        if crc != entry.row_group_crc32:
            run.fail(
                "tables",
                f"Invalid row group CRC-32 ({crc}). Expected {entry.row_group_crc32}, as the index records.",
                rel,
                ep,
            )
    columns = [group.column(c) for c in range(group.num_columns)]
    # Encoded images get an offset index but no column index (pyarrow keeps no min/max of blobs).
    blobs = {f"{key}.bytes" for key in run.dataset.info.image_keys}
    if not all(c.has_offset_index and (c.has_column_index or c.path_in_schema in blobs) for c in columns):
        run.fail("tables", "Invalid page index (missing). Expected write_page_index=True.", rel, ep)
    if not all(c.is_stats_set for c in columns):
        run.fail(
            "tables", "Invalid column statistics (missing). Expected statistics on every column.", rel, ep
        )
    rows = file.read_row_group(entry.row_group, columns=INDEX_COLUMNS)
    _check_rows(run, rel, entry, rows)


def _check_rows(run: VerifyRun, rel: str, entry: Any, rows: pa.Table) -> None:
    ep = entry.episode_index
    index = rows.column("index").to_numpy()
    expected = np.arange(entry.dataset_from_index, entry.dataset_from_index + entry.length)
    if not np.array_equal(index, expected):
        run.fail("tables", f"Invalid index column. Expected {expected[0]}..{expected[-1]} in order.", rel, ep)
    if not (rows.column("episode_index").to_numpy() == ep).all():
        run.fail("tables", "Invalid episode_index column. Expected one episode per row group.", rel, ep)
    if not np.array_equal(rows.column("frame_index").to_numpy(), np.arange(entry.length)):
        run.fail("tables", f"Invalid frame_index column. Expected 0..{entry.length - 1} in order.", rel, ep)


# --- 4. pointers --------------------------------------------------------------------------------------


def check_pointers(run: VerifyRun) -> None:
    info, fps = run.dataset.info, run.dataset.info.fps
    where = EPISODES_DIR
    for episode, entry in zip(run.dataset.episodes, run.layout.episodes, strict=True):
        ep = episode.episode_index
        data_path = info.data_file(episode.data_chunk_index, episode.data_file_index)
        if data_path != entry.data_path:
            run.fail(
                "pointers", f"Invalid data file ({data_path!r}). Expected {entry.data_path!r}.", where, ep
            )
        if (episode.dataset_from_index, episode.length) != (entry.dataset_from_index, entry.length):
            run.fail(
                "pointers",
                f"Invalid rows ([{episode.dataset_from_index}, +{episode.length})). "
                f"Expected [{entry.dataset_from_index}, +{entry.length}).",
                where,
                ep,
            )
        for video in entry.videos:
            segment = episode.video(video.key)
            path = info.video_file(video.key, segment.chunk_index, segment.file_index)
            span = (segment.from_timestamp, segment.to_timestamp)
            if path != video.path:
                run.fail("pointers", f"Invalid video file ({path!r}). Expected {video.path!r}.", where, ep)
            if not (span[0] == 0.0 and math.isclose(span[1], episode.length / fps, abs_tol=1e-9)):
                run.fail(
                    "pointers",
                    f"Invalid video time range ({span[0]}, {span[1]}) for {video.key}. "
                    f"Expected (0.0, {episode.length / fps}).",
                    where,
                    ep,
                )


# --- 5. videos ----------------------------------------------------------------------------------------


def video_problems(run: VerifyRun, entry: Any, video: Any, probe: VideoProbe) -> list[str]:
    """What the `videos` check finds wrong with one episode video, from its probe."""
    fps = run.layout.fps
    expected = run.layout.info.features[video.key].get("info", {})
    problems = []
    if probe.frames != entry.length:
        problems.append(f"Invalid frame count ({probe.frames}). Expected {entry.length}.")
    times = np.asarray(probe.frame_times_s)
    if len(times) == entry.length and not np.allclose(times, np.arange(entry.length) / fps, atol=1e-4):
        problems.append("Invalid frame timestamps. Expected frame i at i / fps.")
    if not probe.starts_on_keyframe or (len(times) and abs(times[0]) > 1e-6):
        problems.append("Invalid first frame. Expected a keyframe at 0 s.")
    for name, got in (("video.codec", probe.codec), ("video.pix_fmt", probe.pix_fmt)):
        if name in expected and expected[name] != got:
            problems.append(f"Invalid {name} ({got!r}). Expected {expected[name]!r} as info.json says.")
    declared = frame_size(run.layout.info.features[video.key])
    if declared is not None and declared != (probe.height, probe.width):
        problems.append(
            f"Invalid frame size ({probe.width}x{probe.height}). Expected {declared[1]}x{declared[0]} "
            "(width x height) as info.json's shape says."
        )
    return problems
