"""The metadata step of a reshard: completion records in, `meta/` and the `meta/lrs/` index out.

Each output data or video file gets a completion record when it is finished (its size, sha256, and
what finalize needs: row-group byte ranges, or the video's codec parameters). Finalize builds every
metadata file from the source's metadata, the plan and these records alone, as bytes, so that N parts
plus finalize produce the same bytes as one run:

- `meta/episodes/`: the source table with every pointer made true (data and video chunk/file indices,
  `from_timestamp = 0`, `to_timestamp = length / fps`), the other columns (tasks, length, stats/*) kept,
  each source file rewritten 1,000 rows at a time (`episodes_files`);
- `meta/info.json` with the totals, the data file bound and per-camera video info as written;
- `meta/tasks.parquet` and `meta/stats.json`, copied (episodes and frames do not change), or with
  episodes left out (`reshard.source.selection`), the stats of the kept ones aggregated from their per-episode
  stats, and `meta/lrs/dropped.json`, which episodes were dropped and why;
- `meta/lrs/episodes.parquet`, `meta/lrs/layout.json`, `meta/lrs/files.parquet`.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import io
import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from importlib import metadata as importlib_metadata
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cache import store
from cache.redaction import redact
from reader.errors import DatasetError
from reader.format.index import (
    EPISODES_INDEX,
    FILES_INDEX,
    LAYOUT_JSON,
    LAYOUT_VERSION,
    EpisodeEntry,
    FileEntry,
    VideoFile,
    episodes_to_table,
    files_to_table,
    kind_of,
)
from reader.format.jsonfile import cat_json
from reader.format.parquet import replace_columns
from reader.format.v3 import (
    DEFAULT_EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    frame_size,
    with_frame_size,
)
from reshard.distribution import DISTRIBUTION
from reshard.job.carried_meta import carried_meta_files
from reshard.job.plan import ReshardPlan
from reshard.job.tables import RowGroupSpan
from reshard.source.dropped import DROPPED_JSON
from reshard.source.model import V3Source
from reshard.video.encode import DEFAULT_PRESET
from reshard.video.write import EpisodeVideo

_HUB_REVISION = re.compile(r"^hf://datasets/[^/]+/[^/@]+@([^/]+)")


@dataclass(frozen=True)
class DataRecord:
    """The completion record of an output data file.

    Attributes:
        path: the output path (dataset-relative).
        bytes: its size.
        sha256: its hash.
        row_groups: one span per episode, in episode order.
    """

    path: str
    bytes: int
    sha256: str
    row_groups: tuple[RowGroupSpan, ...]


@dataclass(frozen=True, kw_only=True)
class VideoRecord(EpisodeVideo):
    """The completion record of an output video file (one episode of one camera): what
    `write_episode_video` wrote (`EpisodeVideo`'s fields, `path` dataset-relative), plus

    Attributes:
        sha256: the file's hash.
        episode: the episode index.
        key: the camera key.
    """

    sha256: str
    episode: int
    key: str

    @classmethod
    def of(cls, written: EpisodeVideo, *, path: str, sha256: str, episode: int, key: str) -> VideoRecord:
        """The record of `written`, staged at `path` (dataset-relative)."""
        return cls(**{**asdict(written), "path": path}, sha256=sha256, episode=episode, key=key)


Record = DataRecord | VideoRecord


def record_to_json(record: Record) -> bytes:
    """The JSON bytes of a completion record."""
    kind = "data" if isinstance(record, DataRecord) else "video"
    return json.dumps({"kind": kind, **asdict(record)}, indent=1).encode()


def record_from_json(data: bytes) -> Record:
    """Parse a completion record written by `record_to_json`."""
    raw = json.loads(data)
    if raw.pop("kind") == "data":
        raw["row_groups"] = tuple(RowGroupSpan(**span) for span in raw["row_groups"])
        return DataRecord(**raw)
    return VideoRecord(**raw)


def path_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a local file."""
    with open(path, "rb") as handle:
        return store.file_sha256(handle.fileno())


def tool_version() -> str:
    """`lrs <version>`, recorded in layout.json."""
    try:
        return f"lrs {importlib_metadata.version(DISTRIBUTION)}"
    except importlib_metadata.PackageNotFoundError:
        return "lrs (unknown version)"


def build_meta(
    source: V3Source, plan: ReshardPlan, records: dict[str, Record], params: dict[str, Any]
) -> list[tuple[str, bytes]]:
    """Every metadata file of the output, as bytes, in publish order (`meta/lrs/layout.json` last).

    Args:
        source: the opened source.
        plan: the plan the records complete.
        records: the completion record of every output of the plan, by path.
        params: the reshard parameters, recorded in layout.json.
    """
    video_records = [r for r in records.values() if isinstance(r, VideoRecord)]
    files: list[tuple[str, bytes]] = list(episodes_files(source, plan))
    files.append((TASKS_PATH, source.remote.cat(TASKS_PATH)))
    stats = stats_json(source)
    if stats is not None:
        files.append((STATS_PATH, stats))
    files += carried_meta_files(source)
    files.append((INFO_PATH, info_json(source, params, video_records)))
    if source.selection is not None:
        files.append((DROPPED_JSON, source.selection.to_json()))
    index = episodes_to_table(index_entries(source, plan, records), source.video_keys)
    files.append((EPISODES_INDEX, _parquet_bytes(index)))
    layout = layout_json(source, params, video_records)
    listed = [FileEntry(r.path, r.bytes, r.sha256, kind_of(r.path)) for r in records.values()]
    listed += [_entry(rel, data) for rel, data in [*files, (LAYOUT_JSON, layout)]]
    files.append((FILES_INDEX, _parquet_bytes(files_to_table(listed))))
    files.append((LAYOUT_JSON, layout))
    return files


def stats_json(source: V3Source) -> bytes | None:
    """`meta/stats.json` of the output: the source's bytes, or with episodes left out, the aggregation of
    the kept episodes' stats; None where the source has none."""
    if not source.whole.remote.exists(STATS_PATH):
        return None
    if source.parent is None:
        return cat_json(source.remote, STATS_PATH)
    return (json.dumps(source.stats, indent=4) + "\n").encode()


def _entry(rel: str, data: bytes) -> FileEntry:
    return FileEntry(rel, len(data), hashlib.sha256(data).hexdigest(), kind_of(rel))


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


# Rows of `meta/episodes` rewritten at a time (one row group of the output each).
EPISODES_BATCH = 1000
_EPISODES_FILE_COLUMNS = ("meta/episodes/chunk_index", "meta/episodes/file_index")


def episodes_files(source: V3Source, plan: ReshardPlan) -> list[tuple[str, bytes]]:
    """`meta/episodes/` files with every pointer true, partitioned into files as the source's were.

    Each source file is rewritten `EPISODES_BATCH` rows at a time, so that the per-episode stats (most
    of the table) are never all in memory; where the files' rows are not theirs in episode order (rows
    naming another file, episodes out of order, episodes left out), the table is rewritten whole.
    """
    pointers = _pointers(source, plan)
    streamed = None if source.parent is not None else _streamed_episodes_files(source, pointers)
    if streamed is not None:
        return streamed
    table = replace_columns(source.whole_episodes_table(), pointers)  # row e is episode e
    return [(rel, _parquet_bytes(part)) for rel, part in _partition(table)]


def _pointers(source: V3Source, plan: ReshardPlan) -> dict[str, np.ndarray]:
    """The pointer columns of the output's `meta/episodes`, each by episode index."""
    count = len(source.episodes)
    data = np.zeros((2, count), dtype=np.int64)
    for task in plan.data:
        data[:, list(task.episodes)] = np.array([[task.chunk_index], [task.file_index]])
    columns = {"data/chunk_index": data[0], "data/file_index": data[1]}
    outputs = plan.video_outputs()
    for key in source.video_keys:
        videos = [outputs[e, key] for e in range(count)]
        columns[f"videos/{key}/chunk_index"] = np.array([v.chunk_index for v in videos], dtype=np.int64)
        columns[f"videos/{key}/file_index"] = np.array([v.file_index for v in videos], dtype=np.int64)
        columns[f"videos/{key}/from_timestamp"] = np.zeros(count)
        columns[f"videos/{key}/to_timestamp"] = np.array([v.length / source.info.fps for v in videos])
    return columns


def _streamed_episodes_files(
    source: V3Source, pointers: dict[str, np.ndarray]
) -> list[tuple[str, bytes]] | None:
    """Each source `meta/episodes/` file rewritten by batches, or None where a batch's rows are not that
    file's own in episode order (`episodes_files` then rewrites the table whole)."""
    files, first = [], 0
    for rel in source.episode_files:
        parquet = pq.ParquetFile(pa.BufferReader(source.episode_file_bytes(rel)), pre_buffer=False)
        sink, writer = io.BytesIO(), None
        for batch in parquet.iter_batches(batch_size=EPISODES_BATCH, use_threads=False):
            table = pa.Table.from_batches([batch])
            if not _own_rows_in_order(table, rel, first):
                return None
            end = first + table.num_rows
            table = replace_columns(table, {name: values[first:end] for name, values in pointers.items()})
            writer = writer or pq.ParquetWriter(sink, table.schema)
            writer.write_table(table)
            first = end
        if writer is None:
            return None
        writer.close()
        files.append((rel, sink.getvalue()))
    return files if first == len(source.episodes) else None


def _own_rows_in_order(table: pa.Table, rel: str, first: int) -> bool:
    """Whether the rows of `table`, read from the source file `rel`, are episodes `first, first + 1, ...`
    and name `rel` as their `meta/episodes` file."""
    names = ("episode_index", *_EPISODES_FILE_COLUMNS)
    if any(n not in table.column_names or table.column(n).null_count for n in names):
        return False
    episodes = table.column("episode_index").to_numpy()
    if not np.array_equal(episodes, np.arange(first, first + len(episodes))):
        return False
    chunks, numbers = (set(table.column(n).to_pylist()) for n in _EPISODES_FILE_COLUMNS)
    if len(chunks) != 1 or len(numbers) != 1:
        return False
    return DEFAULT_EPISODES_PATH.format(chunk_index=chunks.pop(), file_index=numbers.pop()) == rel


def _partition(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """Split the episodes table by its `meta/episodes/chunk_index` and `file_index` columns, if any."""
    names = _EPISODES_FILE_COLUMNS
    if not all(n in table.column_names for n in names):
        return [(DEFAULT_EPISODES_PATH.format(chunk_index=0, file_index=0), table)]
    keys = list(zip(*(table.column(n).to_pylist() for n in names), strict=True))
    parts = []
    for chunk, file in sorted(set(keys)):
        mask = pc.and_(pc.equal(table.column(names[0]), chunk), pc.equal(table.column(names[1]), file))
        parts.append((DEFAULT_EPISODES_PATH.format(chunk_index=chunk, file_index=file), table.filter(mask)))
    return parts


def index_entries(source: V3Source, plan: ReshardPlan, records: dict[str, Record]) -> list[EpisodeEntry]:
    """One `meta/lrs/episodes.parquet` entry per episode, from the data and video records."""
    spans: dict[int, tuple[str, RowGroupSpan]] = {}
    for task in plan.data:
        record = records[task.path]
        if not isinstance(record, DataRecord):
            raise TypeError(
                f"Invalid record for {task.path!r} ({type(record).__name__}). Expected a DataRecord."
            )
        for span in record.row_groups:
            spans[span.episode] = (task.path, span)
    outputs = plan.video_outputs()
    entries = []
    for episode in source.episodes:
        path, span = spans[episode.episode_index]
        videos = [outputs[episode.episode_index, key] for key in source.video_keys]
        entries.append(
            EpisodeEntry(
                episode_index=episode.episode_index,
                length=episode.length,
                dataset_from_index=episode.dataset_from_index,
                data_path=path,
                row_group=span.row_group,
                row_group_offset=span.offset,
                row_group_bytes=span.bytes,
                row_group_crc32=span.crc32,
                videos=tuple(
                    VideoFile(v.key, v.path, records[v.path].bytes, 0.0, v.length / source.info.fps)
                    for v in videos
                ),
            )
        )
    return entries


def info_json(source: V3Source, params: dict[str, Any], video_records: list[VideoRecord]) -> bytes:
    """`meta/info.json` of the output: the source's, with totals, file bound and video info as written.

    Raises:
        DatasetError: a camera's `video.width`/`video.height` would contradict its `shape`
            (`check_video_sizes`).
    """
    raw = json.loads(json.dumps(source.info.raw))
    raw["total_episodes"] = len(source.episodes)
    raw["total_frames"] = source.total_frames
    raw["total_tasks"] = len(source.tasks)
    if source.selection is not None and isinstance(raw.get("splits"), dict):
        raw["splits"] = {
            name: _kept_split(span, source.selection.kept) for name, span in raw["splits"].items()
        }
    mb = params["data_file_mb"]
    raw["data_files_size_in_mb"] = int(mb) if float(mb).is_integer() else mb
    mode = params.get("video")
    for key in source.video_keys:
        info = raw["features"][key].setdefault("info", {})
        records = [r for r in video_records if r.key == key]
        info.update(_video_info(records))
        if mode in DEFAULT_PRESET and records and all(r.reencoded for r in records):
            # The source encoder's preset (SVT-AV1's 12) says nothing of this camera's x264/x265 files.
            info["video.preset"] = params.get("preset") or DEFAULT_PRESET[mode]
            if params.get("tune"):
                info["video.tune"] = params["tune"]
            if params.get("resize"):
                _resized(raw["features"][key], info)
        if "has_audio" in info:  # the episode videos hold the video stream alone
            info["has_audio"] = False
    check_video_sizes(raw["features"], source.video_keys, file=source.remote.display(INFO_PATH))
    return (json.dumps(raw, indent=4) + "\n").encode()


def _resized(feature: dict[str, Any], info: dict[str, Any]) -> None:
    """A camera re-encoded at another size (`--resize`): its `shape` declares the size written."""
    shape = with_frame_size(feature, info["video.height"], info["video.width"])
    if shape is not None:
        feature["shape"] = shape


def check_video_sizes(features: dict[str, Any], video_keys: Iterable[str], *, file: str) -> None:
    """Check that each camera's `info` `video.width` and `video.height` (where it has them) are the size
    its `shape` declares (`frame_size`): an info.json that says both cannot be read right by anyone.

    The source checks refuse videos whose frames are not their camera's shape (or leave their episodes
    out), so the sizes written agree; a source whose info.json disagrees with itself for a camera without
    any video written is refused here.

    Raises:
        DatasetError: naming `file` and the camera's feature.
    """
    for key in video_keys:
        feature = features[key]
        declared = frame_size(feature)
        info = feature.get("info") or {}
        said = (info.get("video.height"), info.get("video.width"))
        if declared is None or None in said or said == declared:
            continue
        raise DatasetError(
            f"Invalid video size ({said[1]}x{said[0]}) in features/{key}/info. Expected "
            f"{declared[1]}x{declared[0]} (width x height), as its shape {list(feature['shape'])} says.",
            file=file,
            field=f"features/{key}",
        )


def _kept_split(span: Any, kept: tuple[int, ...]) -> Any:
    """A `"first:end"` split of source episodes as output episodes (the kept ones in it, renumbered)."""
    try:
        first, end = (int(x) for x in str(span).split(":"))
    except ValueError:
        return span
    lo, hi = bisect.bisect_left(kept, first), bisect.bisect_left(kept, end)
    return f"{lo}:{hi}"


def _video_info(records: list[VideoRecord]) -> dict[str, Any]:
    """The `video.*` fields of one camera, from what was written (the most common value if mixed)."""
    fields = {
        "video.codec": "codec",
        "video.pix_fmt": "pix_fmt",
        "video.width": "width",
        "video.height": "height",
        "video.g": "gop",
        "video.crf": "crf",
    }
    out: dict[str, Any] = {}
    for name, attr in fields.items():
        values = collections.Counter(getattr(r, attr) for r in records if getattr(r, attr) is not None)
        if values:
            out[name] = sorted(values.items(), key=lambda kv: (-kv[1], str(kv[0])))[0][0]
    return out


def source_revision(url: str) -> str | None:
    """The revision pinned in a Hub URL (`hf://datasets/<owner>/<name>@<revision>/...`), else None."""
    match = _HUB_REVISION.match(url)
    return match.group(1) if match else None


def reencoded_videos(records: Iterable[Record]) -> list[tuple[int, str, str]]:
    """(episode, camera, reason) of copy mode's fallbacks, sorted: the episode videos that had to be
    re-encoded because they do not start on a keyframe."""
    return sorted(
        (r.episode, r.key, r.reason) for r in records if isinstance(r, VideoRecord) and r.reason is not None
    )


def layout_json(source: V3Source, params: dict[str, Any], video_records: list[VideoRecord]) -> bytes:
    """`meta/lrs/layout.json`: layout version, tool, source, parameters, re-encoded episodes."""
    reencoded = reencoded_videos(video_records)
    doc = {
        "layout": LAYOUT_VERSION,
        "tool": tool_version(),
        "source": {
            "url": redact(source.url),
            "revision": source_revision(source.url),
            "codebase_version": source.info.raw.get("codebase_version"),
            "total_episodes": len(source.whole.episodes),
            "total_frames": source.whole.total_frames,
            "fingerprint": source.whole.fingerprint.to_json() if source.whole.fingerprint else None,
        },
        "dropped_episodes": len(source.selection.dropped) if source.selection else 0,
        "params": params,
        "reencoded": [{"episode": e, "camera": k, "reason": reason} for e, k, reason in reencoded],
    }
    return (json.dumps(doc, indent=2) + "\n").encode()
