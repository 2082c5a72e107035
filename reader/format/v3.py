"""The LeRobot v3.0 metadata contract, read side: `meta/info.json`, `meta/episodes/`, `meta/tasks.parquet`.

Parsing is pure (bytes and tables in, frozen records out) so that both the reader and `reshard`'s
validating source model build on the same definitions. Paths are dataset-relative, `/`-separated.
"""

from __future__ import annotations

import math
import posixpath
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reader.errors import DatasetError, NotADataset
from reader.format.jsonfile import json_limits, parse_json
from reader.format.parquet import MAX_METADATA_PARQUET_BYTES, parquet_limits, parse_parquet

if TYPE_CHECKING:
    from cache.remote import Remote

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
# lerobot's tasks are sentences and its feature names identifiers: the bounds keep a hostile string from
# costing memory many times over as it is copied (docs/limits.md).
MAX_TASK_BYTES = 64 << 10
MAX_FEATURE_NAME_BYTES = 256
# What a row of `meta/tasks.parquet` may take decompressed: its string (in the pandas index column) and
# `task_index`; `check_row_group_sizes` refuses more before decompressing.
TASK_ROW_BYTES = 2 * MAX_TASK_BYTES
EPISODES_DIR = "meta/episodes"
CODEBASE_VERSION = "v3.0"
DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
DEFAULT_EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
# Columns every v3 data file carries besides the features.
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclass(frozen=True)
class VideoSegment:
    """Where one episode of one camera lives: a file and a time range inside it."""

    key: str
    chunk_index: int
    file_index: int
    from_timestamp: float
    to_timestamp: float

    def __post_init__(self) -> None:
        if not (self.to_timestamp >= self.from_timestamp >= 0) or not math.isfinite(self.to_timestamp):
            raise ValueError(
                f"Invalid video time range ([{self.from_timestamp}, {self.to_timestamp}]) for {self.key!r}. "
                "Expected 0 <= from_timestamp <= to_timestamp."
            )

    def __repr__(self) -> str:
        return (
            f"VideoSegment({self.key}, chunk {self.chunk_index} file {self.file_index}, "
            f"[{self.from_timestamp:.3f}, {self.to_timestamp:.3f}])"
        )


@dataclass(frozen=True)
class EpisodeInfo:
    """One episode's v3 pointers: its rows `[dataset_from_index, dataset_to_index)` and its videos."""

    episode_index: int
    length: int
    dataset_from_index: int
    dataset_to_index: int
    data_chunk_index: int
    data_file_index: int
    tasks: tuple[str, ...]
    videos: tuple[VideoSegment, ...]

    def __post_init__(self) -> None:
        if self.length < 0 or self.dataset_to_index - self.dataset_from_index != self.length:
            raise ValueError(
                f"Invalid episode range ([{self.dataset_from_index}, {self.dataset_to_index}) with length "
                f"{self.length}). Expected dataset_to_index - dataset_from_index == length >= 0."
            )

    def video(self, key: str) -> VideoSegment:
        """The segment of camera `key`."""
        for segment in self.videos:
            if segment.key == key:
                return segment
        raise KeyError(key)

    def __repr__(self) -> str:
        return (
            f"EpisodeInfo({self.episode_index}, length={self.length}, "
            f"rows=[{self.dataset_from_index}, {self.dataset_to_index}), "
            f"data=chunk {self.data_chunk_index} file {self.data_file_index}, cameras={len(self.videos)})"
        )


@dataclass(frozen=True)
class Info:
    """`meta/info.json`, with the fields lrs relies on validated and the rest kept verbatim in `raw`."""

    raw: dict[str, Any]

    @classmethod
    def parse(cls, data: bytes | str, *, file: str = INFO_PATH) -> Info:
        """Parse and validate `meta/info.json` content.

        Raises:
            DatasetError: not JSON, not v3.0, or a required field missing or malformed.
        """
        raw = parse_json(data, file=file)
        if not isinstance(raw, dict):
            raise DatasetError("Invalid info (not an object). Expected a JSON object.", file=file)
        version = raw.get("codebase_version")
        if version != CODEBASE_VERSION:
            hint = ""
            if isinstance(version, str) and version.startswith("v2"):
                hint = (
                    " Convert it first with lerobot's converter: "
                    "`python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<owner>/<name> "
                    "--root=<dataset directory> --push-to-hub=false` (lerobot 0.6)."
                )
            raise DatasetError(
                f"Invalid codebase_version ({version!r}). Expected {CODEBASE_VERSION!r}.{hint}",
                file=file,
                field="codebase_version",
            )
        # lerobot's `DatasetInfo` fills these in where they are absent (not where they are null).
        raw.setdefault("data_path", DEFAULT_DATA_PATH)
        features = raw.get("features")
        if isinstance(features, dict) and any(
            isinstance(f, dict) and f.get("dtype") == "video" for f in features.values()
        ):
            raw.setdefault("video_path", DEFAULT_VIDEO_PATH)
        for key, kind in (("fps", (int, float)), ("features", dict), ("data_path", str)):
            if not isinstance(raw.get(key), kind):
                raise DatasetError(f"missing or malformed ({raw.get(key)!r})", file=file, field=key)
        if raw["fps"] <= 0:
            raise DatasetError(f"Invalid fps ({raw['fps']}). Expected > 0.", file=file, field="fps")
        for key, low in (("total_episodes", 0), ("total_frames", 0), ("total_tasks", 0), ("chunks_size", 1)):
            value = raw.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise DatasetError(
                    f"Invalid {key} ({value!r}). Expected an integer >= {low}.", file=file, field=key
                )
        for name, feature in raw["features"].items():
            if len(name.encode()) > MAX_FEATURE_NAME_BYTES:
                raise DatasetError(
                    f"Invalid feature name ({name[:40]!r}..., {len(name.encode())} bytes). Expected at most "
                    f"{MAX_FEATURE_NAME_BYTES} bytes.",
                    file=file,
                    field="features",
                )
            if not isinstance(feature, dict) or not isinstance(feature.get("dtype"), str):
                raise DatasetError(
                    f"Invalid feature ({feature!r:.80}). Expected an object with a dtype string.",
                    file=file,
                    field=f"features/{name}",
                )
        info = cls(raw=raw)
        if info.video_keys and not isinstance(raw.get("video_path"), str):
            raise DatasetError("missing although the dataset has videos", file=file, field="video_path")
        for key in TEMPLATE_FIELDS:
            if isinstance(raw.get(key), str):
                check_template(raw[key], file=file, field=key, video_keys=info.video_keys)
        return info

    @property
    def fps(self) -> float:
        return self.raw["fps"]

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.raw["features"]

    @property
    def video_keys(self) -> list[str]:
        """Camera keys stored as video, in `features` order."""
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        """Camera keys stored as images inside the parquet files."""
        return [k for k, f in self.features.items() if f.get("dtype") == "image"]

    @property
    def data_path(self) -> str:
        return self.raw["data_path"]

    @property
    def video_path(self) -> str | None:
        return self.raw.get("video_path")

    @property
    def total_episodes(self) -> int:
        return int(self.raw.get("total_episodes", 0))

    @property
    def total_frames(self) -> int:
        return int(self.raw.get("total_frames", 0))

    def data_file(self, chunk_index: int, file_index: int) -> str:
        """The dataset-relative path of a data file."""
        return format_template(self.data_path, chunk_index=chunk_index, file_index=file_index)

    def video_file(self, key: str, chunk_index: int, file_index: int) -> str:
        """The dataset-relative path of a video file of camera `key`."""
        if self.video_path is None:
            raise KeyError(key)
        return format_template(self.video_path, video_key=key, chunk_index=chunk_index, file_index=file_index)


def frame_size(feature: dict[str, Any]) -> tuple[int, int] | None:
    """The (height, width) a camera feature of `meta/info.json` declares, or None where its `shape` is not
    three whole numbers.

    lerobot writes `shape` [height, width, channels] with `names` ["height", "width", "channels"]; where the
    names say where height and width are, they are there. Otherwise lerobot's rule
    (`dataset_to_policy_features`): a shape whose last name is "channel(s)" is (height, width, channels),
    any other (channels, height, width). Without names, the channels are the side of 1, 3 or 4 at an end.
    """
    axes = _size_axes(feature)
    if axes is None:
        return None
    shape = feature["shape"]
    return shape[axes[0]], shape[axes[1]]


def with_frame_size(feature: dict[str, Any], height: int, width: int) -> list[int] | None:
    """The `shape` of a camera feature that declares (`frame_size`) `height` x `width` frames, its other
    side kept; None where its shape declares no size."""
    axes = _size_axes(feature)
    if axes is None:
        return None
    shape = list(feature["shape"])
    shape[axes[0]], shape[axes[1]] = height, width
    return shape


def _size_axes(feature: dict[str, Any]) -> tuple[int, int] | None:
    """Where `frame_size` reads the height and the width in the feature's `shape`."""
    shape, names = feature.get("shape"), feature.get("names")
    if not isinstance(shape, (list, tuple)) or len(shape) != 3:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in shape):
        return None
    if isinstance(names, (list, tuple)) and len(names) == 3:
        if "height" in names and "width" in names:
            return names.index("height"), names.index("width")
        if names[2] not in ("channel", "channels"):
            return 1, 2
    elif shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4):
        return 1, 2
    return 0, 1


def format_template(template: str, **fields: Any) -> str:
    """Fill a v3 path template (one `check_template` accepted) and check that the result stays inside the
    dataset root."""
    path = template.format(**fields)
    check_relative(path, what="path")
    return path


# The fields lerobot 0.6's v3 reader fills in each path template of `meta/info.json`
# (`data_path.format(chunk_index=, file_index=)`, `video_path.format(video_key=, chunk_index=, file_index=)`);
# v2.1's names (`episode_chunk`, `episode_index`) are not among them: lrs reads v3.0 alone.
TEMPLATE_FIELDS: dict[str, tuple[str, ...]] = {
    "data_path": ("chunk_index", "file_index"),
    "video_path": ("video_key", "chunk_index", "file_index"),
}
# `{chunk_index:0Nd}`: lerobot writes `03d`; 12 digits number more files than any store holds.
MAX_FIELD_WIDTH = 12
# The longest dataset-relative path a template may make (Linux's PATH_MAX).
MAX_PATH_BYTES = 4096
_ZERO_PADDED = re.compile(r"0([0-9]{1,2})d")
# An index from `meta/episodes` is an int64: at most 19 digits and a sign.
_INDEX_CHARS = 20


def check_template(template: str, *, file: str, field: str, video_keys: Sequence[str] = ()) -> None:
    """Check a path template of `meta/info.json` before anything formats it: only lerobot's fields
    (`TEMPLATE_FIELDS`), each `{name}` or, for an index, `{name:0Nd}` with N <= `MAX_FIELD_WIDTH`; the
    paths it makes at most `MAX_PATH_BYTES` long, relative and inside the dataset root (for every camera
    of `video_keys`).

    Python's format mini-language would otherwise let a dataset ask for a 400-million-character field
    (`{chunk_index:>400000000}`: gigabytes and a minute per path), or a field lrs does not fill (a
    `KeyError` at the first path).

    Raises:
        DatasetError: naming `file`, the field and the template.
    """
    shown = template if len(template) <= 200 else f"{template[:200]}..."
    allowed = TEMPLATE_FIELDS[field]
    expected = (
        f"Expected fields among {{{'}, {'.join(allowed)}}}, each as {{name}} or, for an index, "
        f"{{name:0Nd}} with N <= {MAX_FIELD_WIDTH}"
    )
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise DatasetError(
            f"Invalid path template ({shown!r}): {exc}. {expected}.", file=file, field=field
        ) from exc
    longest = 0
    for text, name, spec, conversion in parts:
        longest += len(text.encode())
        if name is None:
            continue
        width = _field_width(name, spec or "", conversion, allowed)
        if width is None:
            bad = f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}"
            raise DatasetError(
                f"Invalid path template ({shown!r}): field {bad if len(bad) <= 80 else bad[:80] + '...'}. "
                f"{expected}.",
                file=file,
                field=field,
            )
        if name == "video_key":
            width = max((len(key.encode()) for key in video_keys), default=0)
        longest += width
    if longest > MAX_PATH_BYTES:
        raise DatasetError(
            f"Invalid path template ({shown!r}): its paths may be {longest} bytes long. Expected at most "
            f"{MAX_PATH_BYTES}.",
            file=file,
            field=field,
        )
    for key in (list(video_keys) or ["k"]) if "video_key" in allowed else [""]:
        try:
            check_relative(template.format(chunk_index=0, file_index=0, video_key=key), what="template")
        except ValueError as exc:
            raise DatasetError(str(exc), file=file, field=field) from exc


def _field_width(name: str, spec: str, conversion: str | None, allowed: Sequence[str]) -> int | None:
    """The most characters a template field makes, or None where lrs does not accept it."""
    if name not in allowed or conversion is not None:
        return None
    if not spec:
        return _INDEX_CHARS
    padded = _ZERO_PADDED.fullmatch(spec)
    if name == "video_key" or padded is None or not 1 <= int(padded.group(1)) <= MAX_FIELD_WIDTH:
        return None
    return max(int(padded.group(1)), _INDEX_CHARS)


def check_relative(path: str, *, what: str) -> None:
    """Raise ValueError when `path` is absolute or escapes its root with `..`."""
    norm = posixpath.normpath(path)
    if path.startswith(("/", "\\")) or "://" in path or norm == ".." or norm.startswith("../"):
        raise ValueError(f"Invalid {what} ({path!r}). Expected a relative path inside the dataset root.")
    if ".." in path.replace("\\", "/").split("/"):
        raise ValueError(f"Invalid {what} ({path!r}). Expected a relative path without '..'.")


def read_tasks(data: bytes, *, file: str = TASKS_PATH) -> list[str]:
    """`meta/tasks.parquet`'s bytes as task strings by `task_index` (`parse_tasks`), a row group larger
    than `TASK_ROW_BYTES` a row allows refused before it is decompressed."""
    table = parse_parquet(data, file=file, bytes_per_row=TASK_ROW_BYTES, max_bytes=MAX_METADATA_PARQUET_BYTES)
    return parse_tasks(table, file=file)


def parse_tasks(table: pa.Table, *, file: str = TASKS_PATH) -> list[str]:
    """Task strings by `task_index` from `meta/tasks.parquet`.

    lerobot writes a pandas frame indexed by the task string, so the strings sit in the pandas index
    column (`task` or `__index_level_0__`) next to `task_index`.

    Raises:
        DatasetError: a column is missing, the indices are not 0..n-1, or a task is not a string of at
            most `MAX_TASK_BYTES` bytes (naming its task index).
    """
    names = table.column_names
    if "task_index" not in names:
        raise DatasetError("missing column", file=file, field="task_index")
    text_col = next((n for n in ("task", "__index_level_0__") if n in names), None)
    if text_col is None:
        raise DatasetError("no task string column (expected 'task')", file=file, field="task")
    indices = table.column("task_index").to_pylist()
    texts = table.column(text_col).to_pylist()
    if sorted(indices) != list(range(len(indices))):
        raise DatasetError(
            f"Invalid task_index values ({sorted(indices)[:10]}...). Expected 0..{len(indices) - 1}.",
            file=file,
            field="task_index",
        )
    tasks = [""] * len(indices)
    for i, text in zip(indices, texts, strict=True):
        size = len(text.encode()) if isinstance(text, str) else None
        if size is None or size > MAX_TASK_BYTES:
            shown = f"{size} bytes" if size is not None else type(text).__name__
            raise DatasetError(
                f"Invalid task string of task_index {i} ({shown}). Expected a string of at most "
                f"{MAX_TASK_BYTES} bytes.",
                file=file,
                field="task",
            )
        tasks[i] = text
    return tasks


def episode_columns(video_keys: list[str]) -> list[str]:
    """The `meta/episodes` columns lrs reads (stats are left on disk); `OPTIONAL_EPISODE_COLUMNS` may be
    missing."""
    cols = [
        "episode_index",
        "tasks",
        "length",
        "data/chunk_index",
        "data/file_index",
        "dataset_from_index",
        "dataset_to_index",
    ]
    for key in video_keys:
        cols += [f"videos/{key}/{f}" for f in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    return cols


# What lerobot 0.6.1's reader does without, and lrs too: the episode's task list (the rows' `task_index`
# gives each frame its task), its length (dataset_to_index - dataset_from_index) and a video's
# `to_timestamp` (from_timestamp + length / fps).
OPTIONAL_EPISODE_COLUMNS = ("tasks", "length")
OPTIONAL_VIDEO_COLUMNS = ("to_timestamp",)


def missing_optional_columns(names: Sequence[str], video_keys: list[str]) -> list[str]:
    """The optional `meta/episodes` columns a table of `names` lacks."""
    optional = [*OPTIONAL_EPISODE_COLUMNS]
    optional += [f"videos/{k}/{c}" for k in video_keys for c in OPTIONAL_VIDEO_COLUMNS]
    return [c for c in optional if c not in names]


def optional_columns_warning(missing: Sequence[str], *, file: str) -> str:
    """The one-line warning for optional `meta/episodes` columns that are missing."""
    return (
        f"{file}: no {', '.join(repr(c) for c in missing)} column{'s' if len(missing) != 1 else ''}; "
        "lerobot's reader does without, and so does lrs (tasks come from the rows' task_index, lengths "
        "and video end times from the row ranges)"
    )


def concat_episode_tables(tables: list[pa.Table], *, file: str = EPISODES_DIR) -> pa.Table:
    """The `meta/episodes/` files' tables as one (schemas promoted where they differ compatibly).

    Raises:
        DatasetError: the files disagree on their schema.
    """
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowInvalid as exc:
        raise DatasetError(f"files disagree on their schema ({exc})", file=file) from exc


def check_episode_tasks(table: pa.Table, *, file: str) -> None:
    """Refuse a task string of `meta/episodes`' `tasks` column longer than `MAX_TASK_BYTES`, measured in
    Arrow, before any value becomes a Python object (a copy per step).

    Raises:
        DatasetError: naming the file and the episode.
    """
    if "tasks" not in table.column_names:
        return
    column = table.column("tasks")
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return  # not lerobot's list of strings: `parse_episodes` says what is wrong with it
    if not pa.types.is_string(column.type.value_type) and not pa.types.is_large_string(
        column.type.value_type
    ):
        return
    first = 0
    for chunk in column.chunks:
        lengths = pc.binary_length(chunk.flatten()).to_numpy(zero_copy_only=False)
        over = np.flatnonzero(lengths > MAX_TASK_BYTES)
        if over.size:
            row = first + int(pc.list_parent_indices(chunk)[int(over[0])].as_py())
            episode = (
                table.column("episode_index")[row].as_py() if "episode_index" in table.column_names else None
            )
            raise DatasetError(
                f"Invalid task string ({int(lengths[over[0]])} bytes). Expected at most {MAX_TASK_BYTES} bytes.",
                file=file,
                episode=episode if isinstance(episode, int) else None,
                field="tasks",
            )
        first += len(chunk)


def parse_episodes(
    table: pa.Table, video_keys: list[str], *, fps: float, file: str = EPISODES_DIR
) -> list[EpisodeInfo]:
    """Records from the concatenated `meta/episodes` tables, sorted by episode index.

    `missing_optional_columns` may be missing: an episode's tasks are then empty, its length its row
    range, and a video's `to_timestamp` its `from_timestamp + length / fps`.

    Raises:
        DatasetError: a required column is missing, a value is null or inconsistent, or indices repeat or
            skip.
    """
    optional = missing_optional_columns(table.column_names, video_keys)
    missing = [c for c in episode_columns(video_keys) if c not in table.column_names and c not in optional]
    if missing:
        raise DatasetError(f"missing columns {missing}", file=file, field=missing[0])
    cols = {c: table.column(c).to_pylist() for c in episode_columns(video_keys) if c not in optional}
    episodes = []
    for row in range(table.num_rows):
        ep = cols["episode_index"][row]
        try:
            episodes.append(_episode(cols, row, video_keys, fps))
        except (TypeError, ValueError) as exc:
            raise DatasetError(str(exc), file=file, episode=ep) from exc
    episodes.sort(key=lambda e: e.episode_index)
    for position, episode in enumerate(episodes):
        if episode.episode_index != position:
            raise DatasetError(
                f"Invalid episode_index ({episode.episode_index}) at position {position}. "
                "Expected episode indices 0..N-1, each once.",
                file=file,
                episode=episode.episode_index,
                field="episode_index",
            )
    return episodes


def _episode(cols: dict[str, list[Any]], row: int, video_keys: list[str], fps: float) -> EpisodeInfo:
    start, end = int(cols["dataset_from_index"][row]), int(cols["dataset_to_index"][row])
    length = int(cols["length"][row]) if "length" in cols else end - start
    videos = []
    for key in video_keys:
        begin = float(cols[f"videos/{key}/from_timestamp"][row])
        stop = cols.get(f"videos/{key}/to_timestamp")
        videos.append(
            VideoSegment(
                key=key,
                chunk_index=int(cols[f"videos/{key}/chunk_index"][row]),
                file_index=int(cols[f"videos/{key}/file_index"][row]),
                from_timestamp=begin,
                to_timestamp=float(stop[row]) if stop is not None else begin + length / float(fps),
            )
        )
    return EpisodeInfo(
        episode_index=int(cols["episode_index"][row]),
        length=length,
        dataset_from_index=start,
        dataset_to_index=end,
        data_chunk_index=int(cols["data/chunk_index"][row]),
        data_file_index=int(cols["data/file_index"][row]),
        tasks=tuple(cols["tasks"][row] or ()) if "tasks" in cols else (),
        videos=tuple(videos),
    )


def check_tiling(episodes: Sequence[Any], *, file: str, error: type[DatasetError] = DatasetError) -> int:
    """Check that episodes (records with `episode_index`, `dataset_from_index`, `length`) are numbered
    0..N-1 in order, each at least one frame long, with rows tiling `[0, total)` in order; the total.

    Raises:
        `error`: naming `file`, the first episode that breaks the rule and its field.
    """
    expected = 0
    for position, episode in enumerate(episodes):
        where = {"file": file, "episode": episode.episode_index}
        if episode.episode_index != position:
            raise error(
                f"Invalid episode_index ({episode.episode_index}) at position {position}. "
                "Expected episode indices 0..N-1, each once.",
                **where,
                field="episode_index",
            )
        if episode.dataset_from_index != expected:
            raise error(
                f"Invalid dataset_from_index ({episode.dataset_from_index}). Expected {expected} "
                "(episodes must tile the index range in order).",
                **where,
                field="dataset_from_index",
            )
        if episode.length < 1:
            raise error(f"Invalid length ({episode.length}). Expected >= 1.", **where, field="length")
        expected += episode.length
    return expected


def read_episode_files(
    remote: Any, info: Info, *, columns: list[str] | None = None
) -> list[tuple[str, pa.Table, bytes]]:
    """The `meta/episodes/` files as (path, table, bytes), found by walking lerobot's chunk/file numbering
    until `total_episodes` are counted: one read per file, on any store (plain HTTP cannot list). The one
    way the reader and reshard find them.

    `columns`: only those of them a file has (`episode_columns`: what the episode records need), not
    the per-episode stats that make most of a table (93 columns, 2.1 KB per episode, for a 1-camera
    dataset); None: every column.

    Raises:
        DatasetError: a file of the numbering is missing before every episode is counted, or unreadable.
    """
    chunks_size = int(info.raw.get("chunks_size") or 1000)
    found: list[tuple[str, pa.Table, bytes]] = []
    counted = 0
    while counted < info.total_episodes or not found:
        chunk, index = divmod(len(found), chunks_size)
        rel = DEFAULT_EPISODES_PATH.format(chunk_index=chunk, file_index=index)
        try:
            data = remote.cat(rel, limit=MAX_METADATA_PARQUET_BYTES)
        except FileNotFoundError as exc:
            if not found and not info.total_episodes:
                return found  # an empty dataset may have no episodes file at all
            # lerobot writes meta/episodes at `finalize()`: none at all is a recording not finalized.
            unfinalized = (
                "; the dataset looks unfinalized (lerobot writes meta/episodes when the recorder calls "
                "finalize()): finish or finalize the recording first"
                if not found
                else ""
            )
            raise DatasetError(
                f"missing: {counted} of total_episodes={info.total_episodes} episodes found before it"
                + unfinalized,
                file=remote.display(rel),
            ) from exc
        table = parse_parquet(
            data,
            file=remote.display(rel),
            columns=columns,
            missing_ok=True,
            max_bytes=MAX_METADATA_PARQUET_BYTES,
        )
        check_episode_tasks(table, file=remote.display(rel))
        counted += table.num_rows
        found.append((rel, table, data))
    return found


class OpenedDataset:
    """What an opened dataset (`Catalog`, `Layout`, `reshard.source.V3Source`) says the same way, from its
    `remote` and its `info`: its URL, cameras and fps.

    Attributes:
        remote: where the dataset's files are.
        info: its `meta/info.json`.
    """

    remote: Remote
    info: Info

    @property
    def url(self) -> str:
        return self.remote.url

    @property
    def video_keys(self) -> list[str]:
        return self.info.video_keys

    @property
    def fps(self) -> float:
        return self.info.fps


@dataclass(frozen=True)
class V3Metadata:
    """A v3 dataset's metadata as read: each file's bytes (what a fingerprint hashes) and what it says.

    Attributes:
        info_bytes, info: `meta/info.json`.
        episode_files: each `meta/episodes/` file as (path, bytes), in the numbering's order.
        table: those files' rows as one table, in `episode_index` order.
        episodes: one record per row of `table`.
        tasks_bytes, tasks: `meta/tasks.parquet`, its task strings by task index.
        warning: what optional columns `meta/episodes` lacks (`optional_columns_warning`), or None.
    """

    info_bytes: bytes
    info: Info
    episode_files: tuple[tuple[str, bytes], ...]
    table: pa.Table
    episodes: list[EpisodeInfo]
    tasks_bytes: bytes
    tasks: list[str]
    warning: str | None


def read_v3_metadata(
    remote: Remote, *, cat: Callable[[str], bytes] | None = None, all_columns: bool = False
) -> V3Metadata:
    """Read and parse a v3 dataset's info, episodes and tasks: the one way the reader's `Catalog` and
    reshard's `V3Source` open a v3 dataset.

    `cat` reads info.json and tasks.parquet (default `remote.cat`; the catalog passes its batched
    prefetch). `all_columns`: keep every `meta/episodes` column, the per-episode stats included; False:
    only those the episode records need (`episode_columns`).

    Raises:
        DatasetError: a file is missing or unreadable, the dataset has no episode, or the metadata is
            inconsistent; the message names the file.
    """
    cat = cat or remote.bounded({**json_limits(INFO_PATH), **parquet_limits(TASKS_PATH)}).cat
    try:
        info_bytes = cat(INFO_PATH)
    except FileNotFoundError as exc:
        raise NotADataset("missing: not a LeRobot v3 dataset root", file=remote.display(INFO_PATH)) from exc
    info = Info.parse(info_bytes, file=remote.display(INFO_PATH))
    # The tasks first: a small file whose strings the episodes' repeat, refused before those are read.
    try:
        tasks_bytes = cat(TASKS_PATH)
    except FileNotFoundError as exc:
        raise DatasetError("missing", file=remote.display(TASKS_PATH)) from exc
    tasks_file = remote.display(TASKS_PATH)
    tasks = read_tasks(tasks_bytes, file=tasks_file)
    columns = None if all_columns else episode_columns(info.video_keys)
    found = read_episode_files(remote, info, columns=columns)
    where = remote.display(EPISODES_DIR)
    if not found:
        raise DatasetError("no episodes: meta/episodes/ holds no parquet file", file=where)
    table = sorted_by_episode_index(concat_episode_tables([t for _, t, _ in found], file=where))
    episodes = parse_episodes(table, info.video_keys, fps=info.fps, file=where)
    if not episodes:
        raise DatasetError("no episodes: the dataset is empty", file=where)
    missing = missing_optional_columns(table.column_names, info.video_keys)
    return V3Metadata(
        info_bytes=info_bytes,
        info=info,
        episode_files=tuple((rel, data) for rel, _, data in found),
        table=table,
        episodes=episodes,
        tasks_bytes=tasks_bytes,
        tasks=tasks,
        warning=optional_columns_warning(missing, file=where) if missing else None,
    )


def sorted_by_episode_index(table: pa.Table) -> pa.Table:
    """The rows in `episode_index` order: the table itself where they are (lerobot writes them so), else a
    sorted copy (a copy of every stats column: megabytes at 10,000 episodes)."""
    if "episode_index" in table.column_names and table.column("episode_index").null_count == 0:
        order = table.column("episode_index").to_numpy()
        if np.all(order[1:] >= order[:-1]):
            return table
    return table.take(pc.sort_indices(table, [("episode_index", "ascending")]))
