"""`DatasetMeta`: what lerobot's `LeRobotDatasetMetadata` gives a training script, without lerobot.

lerobot builds a policy from its dataset's metadata (`make_policy(cfg, ds_meta=dataset.meta)` reads
`features` and `stats`; training scripts read `fps`, `camera_keys` and the rest), so `EpisodeStream.meta`
offers the same names with the same values:

- `features` (shapes as tuples, as lerobot loads them; a stream's `resize` as its colour cameras'
  shapes), `fps`, `robot_type`, `total_episodes`, `total_frames`, `total_tasks`, `names`, `shapes`,
  `info` (the whole `meta/info.json`), and the key lists `camera_keys`, `video_keys`, `image_keys`,
  `depth_keys`;
- `stats`: `meta/stats.json` as numpy arrays (lerobot's `cast_stats_to_numpy`: every leaf through
  `np.atleast_1d`), None when the file is missing, with depth features' stats rescaled from the unit
  recorded in `info.depth_unit` to the stream's `depth_output_unit` (lerobot's `rescale_depth_stats`:
  every statistic but `count`);
- `tasks`: lerobot's pandas DataFrame (index `task`, column `task_index`), built on first use (pandas
  is imported then, as lerobot has it); `task_names` gives the strings by task index without pandas;
- `episodes`: the columns of lerobot's episodes table that its trainer reads (`episode_index`, `length`,
  `dataset_from_index`, `dataset_to_index`, numpy arrays by episode index; None for a mixture), and
  `has_language_columns` (lerobot's test for its language-aware collate).

Importing this module loads neither torch nor pandas.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cache.redaction import scrubbed
from reader.decode.depth import MM_PER_METRE, is_depth
from reader.errors import DatasetError
from reader.format.jsonfile import cat_json, parse_json
from reader.format.v3 import STATS_PATH, Info, with_frame_size
from reader.plan.spec import DepthUnit, check_unit

# lerobot's `LANGUAGE_COLUMNS` (lerobot.datasets.language): the features its trainer collates as lists.
LANGUAGE_COLUMNS = ("language_persistent", "language_events")


def episode_columns(lengths: np.ndarray, from_indices: np.ndarray) -> dict[str, np.ndarray]:
    """lerobot's episode columns from each episode's length and first row's `index` (by episode index):
    episode `i` holds the rows `[dataset_from_index[i], dataset_to_index[i])`."""
    length = np.asarray(lengths, dtype=np.int64)
    start = np.asarray(from_indices, dtype=np.int64)
    return {
        "episode_index": np.arange(length.size, dtype=np.int64),
        "length": length,
        "dataset_from_index": start,
        "dataset_to_index": start + length,
    }


def stats_to_numpy(stats: Mapping[str, Any]) -> dict[str, Any]:
    """lerobot's `cast_stats_to_numpy`: nested dicts kept, every leaf `np.atleast_1d(np.array(leaf))`."""
    return {
        key: stats_to_numpy(value) if isinstance(value, Mapping) else np.atleast_1d(np.array(value))
        for key, value in stats.items()
    }


def parse_stats(stats_json: bytes, *, file: str = STATS_PATH) -> dict[str, Any]:
    """`meta/stats.json` parsed and checked: a JSON object of per-feature objects whose leaves are numbers
    or (nested) lists of numbers, as lerobot writes it.

    Raises:
        DatasetError: it is not valid JSON, or not of that shape (naming the feature and statistic).
    """
    raw = parse_json(stats_json, file=file)
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise DatasetError("Invalid stats. Expected a JSON object of per-feature objects.", file=file)
    for feature, value in raw.items():
        _check_stat_leaves(value, f"{feature}", file=file)
    return raw


def _check_stat_leaves(value: Mapping[str, Any], where: str, *, file: str) -> None:
    for name, leaf in value.items():
        if isinstance(leaf, Mapping):
            _check_stat_leaves(leaf, f"{where}/{name}", file=file)
            continue
        try:
            kind = np.array(leaf).dtype.kind
        except (TypeError, ValueError):  # ragged nested lists
            kind = "O"
        if kind not in "biuf":
            raise DatasetError(
                f"Invalid stats ({leaf!r:.60}). Expected a number or a list of numbers.",
                file=file,
                field=f"{where}/{name}",
            )


def aggregate_stats(stats: Sequence[Mapping[str, Any]], where: Sequence[str]) -> dict[str, Any]:
    """lerobot's `aggregate_stats` over several datasets' numpy stats: for every feature any of them has,
    min of the mins, max of the maxes, and mean, std (the parallel variance) and quantiles weighted by
    `count`, which is summed.

    Raises:
        DatasetError: a feature's stats lack `count` or `mean`/`std` (naming the dataset).
    """
    keys = list(dict.fromkeys(k for s in stats for k in s))
    out: dict[str, Any] = {}
    for key in keys:
        having = [(s[key], w) for s, w in zip(stats, where, strict=True) if key in s]
        for one, w in having:
            missing = [name for name in ("count", "mean", "std", "min", "max") if name not in one]
            if missing:
                raise DatasetError(
                    f"Invalid stats of {key!r}: no {', '.join(missing)}. Expected them to aggregate a mixture.",
                    file=f"{w}/{STATS_PATH}",
                )
        parts = [one for one, _ in having]
        means = np.stack([p["mean"] for p in parts])
        variances = np.stack([p["std"] ** 2 for p in parts])
        counts = np.stack([p["count"] for p in parts])
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = np.expand_dims(counts, axis=-1)
        mean = (means * counts).sum(axis=0) / total
        variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
        merged = {
            "min": np.min(np.stack([p["min"] for p in parts]), axis=0),
            "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
            "mean": mean,
            "std": np.sqrt(variance),
            "count": total,
        }
        for q in [k for k in parts[0] if k.startswith("q") and k[1:].isdigit()]:
            if all(q in p for p in parts):
                merged[q] = (np.stack([p[q] for p in parts]) * counts).sum(axis=0) / total
        out[key] = merged
    return out


def rescale_depth_stats(
    stats: dict[str, Any], features: Mapping[str, Mapping[str, Any]], unit: DepthUnit
) -> dict[str, Any]:
    """lerobot's `rescale_depth_stats`: depth stats from their recorded `depth_unit` to `unit`.

    A depth feature without a recorded unit keeps its stats as they are (lerobot warns and does the same).
    """
    out = dict(stats)
    for key, feature in features.items():
        stored = (feature.get("info") or {}).get("depth_unit")
        if not is_depth(feature) or stored is None or stored == unit or key not in out:
            continue
        factor = MM_PER_METRE if stored == "m" else 1.0 / MM_PER_METRE
        out[key] = {stat: v if stat == "count" else v * factor for stat, v in out[key].items()}
    return out


def resize_camera(feature: dict[str, Any], size: tuple[int, int]) -> None:
    """A camera feature as a stream resizing its frames to `size` (height, width) gives them: its `shape`
    (where it declares a frame size, `frame_size`) and its `info`'s `video.height`/`video.width` (where it
    has them) say that size, as `lrs reshard --resize` writes them."""
    shape = with_frame_size(feature, *size)
    if shape is not None:
        feature["shape"] = tuple(shape)
    info = feature.get("info")
    if isinstance(info, dict) and "video.height" in info and "video.width" in info:
        info["video.height"], info["video.width"] = size


@dataclass(frozen=True)
class DatasetMeta:
    """A dataset's metadata under lerobot's `LeRobotDatasetMetadata` names (see the module docstring).

    Attributes:
        parsed: `meta/info.json` (`info` is its content, verbatim but for shapes as tuples).
        stats: per-feature statistics as numpy arrays (depth in `depth_output_unit`), or None.
        task_names: task strings by task index.
        depth_output_unit: the unit depth features' frames and stats are given in.
        repo_id: where the dataset is (a path or URL).
        episodes: per-episode columns by episode index (see the module docstring), or None.
    """

    parsed: Info = field(repr=False)
    stats: dict[str, Any] | None = field(repr=False)
    task_names: tuple[str, ...] = field(repr=False)
    depth_output_unit: DepthUnit = "mm"
    repo_id: str = ""
    sources: tuple[DatasetMeta, ...] = field(default=(), repr=False)
    episodes: Mapping[str, np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def merge(cls, metas: Sequence[DatasetMeta]) -> DatasetMeta:
        """The metadata of a mixture of these datasets, as lerobot's `MultiLeRobotDataset` sees it:
        the features every source has (in the first source's order and with its entries), stats
        aggregated over the sources (lerobot's `aggregate_stats`: min of mins, max of maxes, mean, std
        and quantiles weighted by count; None if a source has none), totals summed, the tasks of all
        sources (first occurrence order), the first source's fps, and `robot_type` where all agree.
        `sources` keeps each source's own metadata.

        Raises:
            DatasetError: a source's stats lack the `count` the aggregation weighs by.
        """
        metas = list(metas)
        first = metas[0]
        common = [k for k in first.features if all(k in m.features for m in metas[1:])]
        raw = copy.deepcopy(first.info)
        raw["features"] = {k: raw["features"][k] for k in common}
        tasks = tuple(dict.fromkeys(t for m in metas for t in m.task_names))
        raw["total_episodes"] = sum(m.total_episodes for m in metas)
        raw["total_frames"] = sum(m.total_frames for m in metas)
        raw["total_tasks"] = len(tasks)
        if len({m.robot_type for m in metas}) != 1:
            raw["robot_type"] = None
        stats = None
        if all(m.stats is not None for m in metas):
            stats = aggregate_stats([m.stats for m in metas], [m.repo_id for m in metas])  # type: ignore[misc]
        return cls(
            parsed=Info(raw=raw),
            stats=stats,
            task_names=tasks,
            depth_output_unit=first.depth_output_unit,
            repo_id=", ".join(m.repo_id for m in metas),
            sources=tuple(metas),
        )

    @classmethod
    def build(
        cls,
        info: Info,
        stats_json: bytes | None,
        task_names: tuple[str, ...],
        *,
        depth_output_unit: DepthUnit = "mm",
        repo_id: str = "",
        file: str = STATS_PATH,
        episodes: Mapping[str, np.ndarray] | None = None,
        resize: tuple[int, int] | None = None,
    ) -> DatasetMeta:
        """Metadata from a parsed `info.json`, the raw `meta/stats.json` (None: no stats) and the tasks;
        with `resize`, its colour cameras as a stream that resizes gives them (`resize_camera`).

        Raises:
            DatasetError: `meta/stats.json` is not a JSON object of per-feature objects.
        """
        unit = check_unit(depth_output_unit)
        stats = None
        if stats_json is not None:
            raw = parse_stats(stats_json, file=file)
            try:
                stats = rescale_depth_stats(stats_to_numpy(raw), info.features, unit)
            except (TypeError, ValueError) as exc:
                raise DatasetError(f"Invalid stats ({exc}). Expected numbers.", file=file) from exc
        raw_info = copy.deepcopy(info.raw)
        for feature in raw_info["features"].values():
            if isinstance(feature, dict) and isinstance(feature.get("shape"), list):
                feature["shape"] = tuple(feature["shape"])  # as lerobot's `load_info` gives them
                if (
                    resize is not None
                    and feature.get("dtype") in ("video", "image")
                    and not is_depth(feature)
                ):
                    resize_camera(feature, resize)
        return cls(
            parsed=Info(raw=raw_info),
            stats=stats,
            task_names=tuple(task_names),
            depth_output_unit=unit,
            repo_id=repo_id,
            episodes=episodes,
        )

    @classmethod
    @scrubbed
    def open(
        cls,
        source: str,
        *,
        storage_options: dict[str, Any] | None = None,
        depth_output_unit: DepthUnit = "mm",
        resize: tuple[int, int] | None = None,
    ) -> DatasetMeta:
        """The metadata of the dataset at `source` (a path or URL, lrs/1 or v3), without a stream: what
        lerobot's `LeRobotDatasetMetadata(repo_id)` is for, e.g. the fps to write `delta_timestamps` in.

        Raises:
            DatasetError: the metadata is missing or malformed.
            FetchError: it could not be read.
        """
        from reader.format.catalog import Catalog

        catalog = Catalog.open(source, storage_options=storage_options)
        return cls.from_catalog(catalog, depth_output_unit=depth_output_unit, resize=resize)

    @classmethod
    def from_catalog(
        cls, catalog: Any, *, depth_output_unit: DepthUnit = "mm", resize: tuple[int, int] | None = None
    ) -> DatasetMeta:
        """The metadata of an opened `reader.format.catalog.Catalog`, reading `meta/stats.json` (if any)."""
        remote = catalog.remote
        try:
            stats_json: bytes | None = cat_json(remote, STATS_PATH)
        except FileNotFoundError:
            stats_json = None
        return cls.build(
            catalog.info,
            stats_json,
            catalog.tasks,
            depth_output_unit=depth_output_unit,
            repo_id=remote.shown,
            file=remote.display(STATS_PATH),
            episodes=episode_columns(catalog.lengths, catalog.from_indices),
            resize=resize,
        )

    def __repr__(self) -> str:
        return (
            f"DatasetMeta({self.repo_id!r}, fps={self.fps}, episodes={self.total_episodes}, "
            f"frames={self.total_frames}, cameras={self.camera_keys})"
        )

    @property
    def info(self) -> dict[str, Any]:
        """`meta/info.json`'s content."""
        return self.parsed.raw

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        """Every feature of `meta/info.json` (dtype, shape, names, info)."""
        return self.parsed.features

    @property
    def fps(self) -> int | float:
        return self.parsed.fps

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def total_episodes(self) -> int:
        return self.parsed.total_episodes

    @property
    def total_frames(self) -> int:
        return self.parsed.total_frames

    @property
    def total_tasks(self) -> int:
        return int(self.info.get("total_tasks", len(self.task_names)))

    @property
    def video_keys(self) -> list[str]:
        return self.parsed.video_keys

    @property
    def image_keys(self) -> list[str]:
        return self.parsed.image_keys

    @property
    def camera_keys(self) -> list[str]:
        """Cameras, stored as video or as images, in `features` order."""
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    @property
    def depth_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if is_depth(f)]

    @property
    def names(self) -> dict[str, Any]:
        return {k: f.get("names") for k, f in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(f["shape"]) for k, f in self.features.items()}

    @property
    def tasks(self) -> Any:
        """lerobot's tasks table: a pandas DataFrame indexed by task string, with column `task_index`.

        Raises:
            ImportError: pandas is not installed (lerobot installs it; `task_names` needs nothing).
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError(
                "DatasetMeta.tasks is a pandas DataFrame, as in lerobot: install pandas, or use "
                "meta.task_names (task strings by task index)."
            ) from exc
        return pd.DataFrame(
            {"task_index": range(len(self.task_names))}, index=pd.Index(list(self.task_names), name="task")
        )

    @property
    def has_language_columns(self) -> bool:
        """Whether a feature is one of lerobot's language columns (lerobot's own test, same name)."""
        return any(key in self.features for key in LANGUAGE_COLUMNS)

    def get_task_index(self, task: str) -> int | None:
        """The index of a task string, or None (lerobot's name)."""
        try:
            return self.task_names.index(task)
        except ValueError:
            return None
