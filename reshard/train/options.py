"""How `lrs train` reads lerobot's dataset settings: `--dataset.*` flags to `EpisodeStream` arguments.

Pure: it takes plain values (the glue in `reshard.train.lerobot` reads them off lerobot's config), so it is
tested without lerobot. lerobot-train's own dataset settings keep their meaning where a stream has one;
the rest is refused in one line rather than ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from reshard.errors import LrsError

# The URL schemes `EpisodeStream` reads (`cache.remote.resolve`); a repo_id without one is a path or a
# bare Hub repo id, as `lrs reshard` takes it.
_SCHEMES = ("hf://", "s3://", "http://", "https://", "file://", "gs://", "az://")


class TrainConfigError(LrsError):
    """A lerobot-train setting that `lrs train` cannot honour (the message says what to do instead)."""


@dataclass(frozen=True)
class StreamOptions:
    """lrs's own settings for the stream, from `lrs train`'s dashed options (None: the stream's default)."""

    cache_dir: str | None = None
    cache_max_bytes: int | None = None
    episode_pool_size: int | None = None
    prefetch_episodes: int | None = None
    decode_threads: int | None = None
    resize: tuple[int, int] | None = None  # (height, width), `lrs train --resize WxH`


@dataclass(frozen=True)
class DatasetSettings:
    """The part of lerobot's `TrainPipelineConfig` that says what to read (`--dataset.*`, `--seed`, ...)."""

    repo_id: str
    root: str | None = None
    repo_type: str = "dataset"
    revision: str | None = None
    episodes: Sequence[int] | None = None
    depth_output_unit: str = "mm"
    eval_split: float = 0.0
    seed: int | None = None
    batch_size: int = 8
    tolerance_s: float = 1e-4


def source_of(settings: DatasetSettings) -> str:
    """The URL or path to stream: `--dataset.root` when given (lerobot reads the dataset there), else
    `--dataset.repo_id`, which may be any lrs URL; `--dataset.repo_type=bucket` with a bare `owner/name`
    names `hf://buckets/owner/name`, as lerobot's streaming reader takes it.

    Raises:
        TrainConfigError: `--dataset.revision` is given (put it in the URL: `hf://datasets/owner/name@REV`).
    """
    if settings.revision is not None:
        raise TrainConfigError(
            f"Invalid --dataset.revision ({settings.revision}). Expected the revision in the URL: "
            f"--dataset.repo_id=hf://datasets/<owner>/<name>@{settings.revision}."
        )
    if settings.root:
        return str(settings.root)
    repo_id = settings.repo_id
    if settings.repo_type == "bucket" and not repo_id.startswith(_SCHEMES):
        return f"hf://buckets/{repo_id}"
    return repo_id


def stream_kwargs(settings: DatasetSettings, options: StreamOptions) -> dict[str, Any]:
    """`EpisodeStream` keyword arguments for lerobot-train's dataset (without the windows and the image
    transforms, which need lerobot's policy config, and without the eval split, which needs the
    episodes' tasks: `split_episodes`): frames as uint8, as lerobot-train's own datasets give them
    (`return_uint8=True`), normalized by its loop after the DataLoader.

    Raises:
        TrainConfigError: a setting the stream cannot honour (`--dataset.revision`).
    """
    kwargs: dict[str, Any] = {
        "source": source_of(settings),
        "episodes": list(settings.episodes) if settings.episodes is not None else None,
        "batch_size": settings.batch_size,
        "seed": settings.seed if settings.seed is not None else 0,
        "tolerance_s": settings.tolerance_s,
        "depth_output_unit": settings.depth_output_unit,
        "return_uint8": True,
    }
    names = (
        "cache_dir",
        "cache_max_bytes",
        "episode_pool_size",
        "prefetch_episodes",
        "decode_threads",
        "resize",
    )
    for name in names:
        value = getattr(options, name)
        if value is not None:
            kwargs[name] = value
    return kwargs


@dataclass(frozen=True)
class EpisodeSplit:
    """lerobot's train/eval split of the selected episodes (`split_episodes`).

    Attributes:
        train: the training episodes, task by task (the stream reads them in ascending order anyway).
        held_out: each task's held-out episodes, in episode order, tasks in their order of appearance.
    """

    train: tuple[int, ...]
    held_out: tuple[tuple[int, ...], ...]

    @property
    def eval(self) -> tuple[int, ...]:
        """Every held-out episode."""
        return tuple(episode for group in self.held_out for episode in group)

    def eval_within(self, max_samples: int, lengths: Sequence[int]) -> tuple[int, ...]:
        """The held-out episodes `--max_eval_samples` keeps: lerobot takes the first
        `max(1, max_samples // tasks)` frames of each task; a stream reads whole episodes, so each task's
        leading held-out episodes until they hold that many frames (rounded up to whole episodes).
        Every held-out episode when `max_samples` is 0 (lerobot's "all").

        Args:
            max_samples: `--max_eval_samples`.
            lengths: frames of every episode, by episode index.
        """
        if max_samples <= 0:
            return self.eval
        per_task = max(1, max_samples // len(self.held_out))
        kept: list[int] = []
        for group in self.held_out:
            frames = 0
            for episode in group:
                if frames >= per_task:
                    break
                kept.append(episode)
                frames += int(lengths[episode])
        return tuple(kept)


def split_episodes(episodes: Sequence[int], first_tasks: Sequence[str], eval_split: float) -> EpisodeSplit:
    """lerobot's `--dataset.eval_split` (`make_train_eval_datasets`): the selected episodes grouped by
    their first task, and the last `ceil(n x eval_split)` of each group of n held out.

    Args:
        episodes: the selected episodes, in order (`--dataset.episodes`, or every episode).
        first_tasks: each episode's first task by episode index ("" for an episode without tasks).
        eval_split: the fraction held out, in (0, 1).

    Raises:
        TrainConfigError: `eval_split` out of (0, 1), an episode the dataset does not have, or no
            training episode left.
    """
    if not 0.0 < eval_split < 1.0:
        raise TrainConfigError(f"Invalid --dataset.eval_split ({eval_split}). Expected a fraction in (0, 1).")
    groups: dict[str, list[int]] = {}
    for episode in episodes:
        if not 0 <= episode < len(first_tasks):
            raise TrainConfigError(
                f"Invalid --dataset.episodes entry ({episode}). Expected an episode index below "
                f"{len(first_tasks)}."
            )
        groups.setdefault(first_tasks[episode], []).append(episode)
    train: list[int] = []
    held_out: list[tuple[int, ...]] = []
    for group in groups.values():
        kept = len(group) - math.ceil(len(group) * eval_split)
        train.extend(group[:kept])
        held_out.append(tuple(group[kept:]))
    if not train:
        raise TrainConfigError(
            f"Invalid --dataset.eval_split ({eval_split}). Expected a split that leaves training episodes: "
            f"it holds out all {len(episodes)} selected episodes."
        )
    return EpisodeSplit(train=tuple(train), held_out=tuple(held_out))


# The settings lerobot keeps on `cfg` itself; every other `DatasetSettings` field is on `cfg.dataset`.
_TRAIN_SETTINGS = ("seed", "batch_size", "tolerance_s")


def settings_of(dataset: Any, train: Any) -> DatasetSettings:
    """`DatasetSettings` read off lerobot's `cfg.dataset` and `cfg` (any objects with those attributes),
    each field by its name."""
    return DatasetSettings(
        **{
            f.name: getattr(train if f.name in _TRAIN_SETTINGS else dataset, f.name)
            for f in fields(DatasetSettings)
        }
    )


def imagenet_stats(
    stats: MutableMapping[str, Any] | None,
    camera_keys: Sequence[str],
    depth_keys: Sequence[str],
    imagenet: Mapping,
) -> None:
    """lerobot's `use_imagenet_stats`: every RGB camera's mean and std (and whatever else `imagenet` holds)
    replaced in place by ImageNet's, depth cameras left alone; nothing without stats."""
    if stats is None:
        return
    for key in camera_keys:
        if key in depth_keys or key not in stats:
            continue
        stats[key] = {**stats[key], **imagenet}
