"""What `lrs show` draws of one episode, read through `EpisodeStream` as a training run reads it.

The stream is opened on the one episode, unshuffled, with `return_uint8=True` (lerobot-train's transport),
so every frame comes in order; the state and action values of every frame are kept for the curves, the
camera frames only at the `frames` evenly spaced indices shown in the strips.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cache.redaction import redact
from reader.errors import DatasetError
from reader.format.v3 import INDEX_COLUMNS

if TYPE_CHECKING:
    from reader.metadata import DatasetMeta

# Curves drawn first, in this order; other numeric features follow in `info.json` order.
FIRST_CURVES = ("observation.state", "action")
NUMERIC = ("float", "int", "uint", "bool")


@dataclass(frozen=True)
class CameraFrames:
    """One camera's frames at the picked frame indices, as the stream returned them (CHW arrays)."""

    key: str
    frame_indices: tuple[int, ...]
    frames: tuple[np.ndarray, ...] = field(repr=False)
    depth: bool = False

    def __post_init__(self) -> None:
        if len(self.frames) != len(self.frame_indices):
            raise ValueError(
                f"Invalid frames ({len(self.frames)} for {self.key}). "
                f"Expected one per frame index ({len(self.frame_indices)})."
            )
        for frame in self.frames:
            if frame.ndim != 3 or frame.shape[0] not in (1, 3):
                raise ValueError(
                    f"Invalid frame shape {frame.shape} for {self.key}. Expected (1 or 3, H, W)."
                )


@dataclass(frozen=True)
class Curve:
    """A feature's values over the episode: `values[t, d]` is dimension `names[d]` at frame `t`."""

    key: str
    names: tuple[str, ...]
    values: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or self.values.shape[1] != len(self.names):
            raise ValueError(
                f"Invalid values shape {self.values.shape} for {self.key}. "
                f"Expected (frames, {len(self.names)}), one column per name."
            )


@dataclass(frozen=True)
class EpisodeView:
    """Everything `lrs show` draws of one episode."""

    source: str
    episode: int
    fps: float
    length: int
    tasks: tuple[str, ...]
    cameras: tuple[CameraFrames, ...]
    curves: tuple[Curve, ...]

    def __post_init__(self) -> None:
        if self.length < 1 or self.fps <= 0:
            raise ValueError(f"Invalid episode (length {self.length}, fps {self.fps}). Expected both > 0.")
        for curve in self.curves:
            if len(curve.values) != self.length:
                raise ValueError(
                    f"Invalid curve {curve.key} ({len(curve.values)} frames). Expected {self.length}."
                )


def frame_picks(length: int, count: int) -> tuple[int, ...]:
    """`count` evenly spaced frame indices of an episode of `length` frames, first and last included
    (fewer, each once, when the episode is shorter)."""
    if length < 1 or count < 1:
        raise ValueError(f"Invalid length ({length}) or count ({count}). Expected both >= 1.")
    return tuple(sorted({int(i) for i in np.linspace(0, length - 1, count).round()}))


def curve_keys(features: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The numeric, non-camera features worth a curve: state and action first, then in `info.json` order."""
    keys = [
        key
        for key, spec in features.items()
        if key not in INDEX_COLUMNS  # lerobot's bookkeeping columns: no curve worth drawing
        and str(spec.get("dtype", "")).startswith(NUMERIC)
        and len(spec.get("shape") or ()) <= 1
    ]
    first = [key for key in FIRST_CURVES if key in keys]
    return first + [key for key in keys if key not in first]


def dimension_names(key: str, names: Any, size: int) -> tuple[str, ...]:
    """`info.json`'s names of a feature's dimensions (a list, or lerobot's `{"motors": [...]}`), or
    `key[i]` where they are missing or do not match its size."""
    if isinstance(names, Mapping) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, Sequence) and not isinstance(names, str) and len(names) == size:
        return tuple(str(name) for name in names)
    return tuple(f"{key}[{i}]" for i in range(size))


def read_episode_view(
    source: str, episode: int, *, frames: int = 8, cache_dir: str | Path | None = None
) -> EpisodeView:
    """Read episode `episode` of the dataset at `source` (lrs/1 or plain v3, any lrs URL).

    Raises:
        DatasetError: the dataset has no such episode (the message names the dataset and the episode),
            or it is malformed.
        FetchError: it could not be read.
    """
    from reader import DatasetMeta, EpisodeStream

    meta = DatasetMeta.open(source)
    if not 0 <= episode < meta.total_episodes:
        raise DatasetError(
            f"Invalid episode ({episode}). Expected 0..{meta.total_episodes - 1}, "
            f"the dataset's {meta.total_episodes} episodes.",
            file=source,
        )
    length = int(meta.episodes["length"][episode]) if meta.episodes is not None else meta.total_frames
    picks = frame_picks(length, frames)
    stream = EpisodeStream(source, episodes=[episode], shuffle=False, return_uint8=True, cache_dir=cache_dir)
    keys = curve_keys(meta.features)
    return _collect(stream, meta, episode=episode, source=source, picks=picks, keys=keys)


def _value(item: Mapping[str, Any], key: str, source: str, episode: int) -> Any:
    """The sample's value of feature `key`, which `meta/info.json` declares.

    Raises:
        DatasetError: the sample has none (the data files lack the column).
    """
    if key not in item:
        raise DatasetError(
            f"Invalid sample (no {key!r} value). Expected every feature meta/info.json declares: the data "
            f"files lack its column (`lrs doctor {redact(source)}` names them).",
            file=redact(source),
            episode=episode,
        )
    return item[key]


def _collect(
    items: Iterable[Mapping[str, Any]],
    meta: DatasetMeta,
    *,
    episode: int,
    source: str,
    picks: tuple[int, ...],
    keys: list[str],
) -> EpisodeView:
    """The view of one episode's samples, in frame order."""
    values: dict[str, list[np.ndarray]] = {key: [] for key in keys}
    shots: dict[str, list[np.ndarray]] = {key: [] for key in meta.camera_keys}
    tasks: dict[str, None] = {}
    wanted = set(picks)
    length = 0
    for position, item in enumerate(items):
        length = position + 1
        for key in keys:
            values[key].append(np.asarray(_value(item, key, source, episode), dtype=np.float64).reshape(-1))
        if position in wanted:
            for key in shots:
                shots[key].append(np.asarray(item[key]))
        if "task" in item:
            tasks[str(item["task"])] = None
    cameras = tuple(
        CameraFrames(key, picks, tuple(shots[key]), depth=key in meta.depth_keys) for key in shots
    )
    curves = tuple(
        Curve(key, dimension_names(key, meta.names.get(key), values[key][0].size), np.stack(values[key]))
        for key in keys
        if values[key]
    )
    # The title drawn into the PNG names the dataset: without the credentials its URL may hold.
    return EpisodeView(redact(source), episode, float(meta.fps), length, tuple(tasks), cameras, curves)
