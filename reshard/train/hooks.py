"""`lrs train`: lerobot's own `lerobot-train` with an `EpisodeStream` for its dataset.

lerobot is imported here only, when the command runs. `run` calls lerobot's `train()` (its parser, policy,
processors, optimizer, scheduler, logging, checkpoints, `--resume`) with three names replaced for the
duration of the call, each where lerobot looks it up at call time:

- `lerobot.scripts.lerobot_train.make_train_eval_datasets` builds the stream (`make_datasets`): the windows
  from lerobot's own `resolve_delta_timestamps`, its `ImageTransforms`, `use_imagenet_stats`, uint8
  frames, and on `--resume` the stream state of the checkpoint. It sets `cfg.dataset.streaming`, so
  lerobot's loop takes its IterableDataset branch (no sampler) and saves that in its config. With
  `--dataset.eval_split` it also builds the eval stream: the held-out episodes
  (`reshard.train.options.split_episodes`), in order, the same windows, no image transforms.
- `accelerate.Accelerator` (which `train()` imports when it starts) becomes a subclass whose
  `prepare_data_loader` hands back a `TrainLoader` for a DataLoader over a stream, untouched by
  accelerate: the stream is already this rank's share, which accelerate would otherwise dispatch from
  rank 0 or cut to every Nth batch. The train stream's loader is the one checkpoints save; the eval
  stream's records nothing. Other DataLoaders go to accelerate as before. Every other argument
  lerobot gives the Accelerator (precision, CPU, DDP settings) is its own.
- `lerobot.scripts.lerobot_train.save_checkpoint` also writes `training_state/lrs_stream.json`
  (`reshard.train.resume`).

These are the narrowest places: lerobot 0.6.1 has no dataset registry or DataLoader hook, and building
the Accelerator ourselves (train()'s `accelerator=` argument) would copy its precision and device rules.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from reader.format.catalog import Catalog
from reader.format.v3 import EPISODES_DIR, concat_episode_tables, read_episode_files
from reader.metadata import DatasetMeta
from reader.plan.resume.loader_math import batches_per_epoch
from reader.stream import EpisodeStream
from reshard.errors import LrsError
from reshard.train.loader import TrainLoader
from reshard.train.options import (
    EpisodeSplit,
    StreamOptions,
    imagenet_stats,
    settings_of,
    split_episodes,
    stream_kwargs,
)
from reshard.train.resume import STATE_FILE, SavedStream, TrainTopology, read_saved, resume_state, write_saved

INSTALL = "pip install 'lerobot[training]==0.6.1'"
# What `run` replaces in lerobot's training module (looked up there when train() runs).
REPLACED = ("make_train_eval_datasets", "save_checkpoint")

log = logging.getLogger(__name__)


class MissingLerobot(LrsError, ImportError):
    """`lrs train` runs lerobot's trainer, and lerobot (or accelerate) is not installed here."""


def import_lerobot_train() -> Any:
    """lerobot's `lerobot.scripts.lerobot_train` module.

    Raises:
        MissingLerobot: lerobot or accelerate cannot be imported (the message names the install command).
    """
    try:
        module = importlib.import_module("lerobot.scripts.lerobot_train")
        importlib.import_module("accelerate")
    except ImportError as exc:
        raise MissingLerobot(
            f"lrs train needs lerobot's trainer ({exc}). Install it in this environment: {INSTALL} "
            "(Python 3.12)."
        ) from None
    missing = [name for name in (*REPLACED, "train") if not hasattr(module, name)]
    if missing:
        version = getattr(importlib.import_module("lerobot"), "__version__", "?")
        raise MissingLerobot(
            f"Invalid lerobot ({version}: its trainer has no {', '.join(missing)}). Expected lerobot 0.6: {INSTALL}."
        )
    return module


def first_tasks(catalog: Catalog) -> list[str]:
    """Each episode's first task by episode index, "" for one without tasks (lerobot's
    `meta.episodes["tasks"][i][0]`), from the `meta/episodes/` files (lrs/1 keeps them as lerobot's)."""
    files = read_episode_files(catalog.remote, catalog.info, columns=["episode_index", "tasks"])
    tables = [table for _, table, _ in files]  # not the per-episode stats: most of the table
    table = concat_episode_tables(tables, file=catalog.remote.display(EPISODES_DIR))
    if "tasks" not in table.column_names:  # optional: lerobot's reader does without
        return [""] * len(catalog.lengths)
    tasks = dict(
        zip(table.column("episode_index").to_pylist(), table.column("tasks").to_pylist(), strict=True)
    )
    return [(tasks.get(episode) or [""])[0] for episode in range(len(catalog.lengths))]


class Session:
    """The state `lrs train`'s replacements share: lrs's options, the eval stream and the train loader."""

    def __init__(self, options: StreamOptions, on_output_dir: Callable[[Path], None] | None = None) -> None:
        self.options = options
        self.on_output_dir = on_output_dir
        self.loader: TrainLoader | None = None
        self.eval_stream: EpisodeStream | None = None

    def make_datasets(self, cfg: Any) -> tuple[EpisodeStream, EpisodeStream | None]:
        """lerobot's `make_train_eval_datasets(cfg)`: a stream for the train set, and with
        `--dataset.eval_split` one over the held-out episodes (else None)."""
        from lerobot.datasets.factory import resolve_delta_timestamps
        from lerobot.transforms import ImageTransforms
        from lerobot.utils.constants import IMAGENET_STATS

        if self.on_output_dir is not None and cfg.output_dir is not None:
            self.on_output_dir(Path(cfg.output_dir))
        settings = settings_of(cfg.dataset, cfg)
        kwargs = stream_kwargs(settings, self.options)
        catalog = Catalog.open(kwargs["source"])
        meta = DatasetMeta.from_catalog(catalog, depth_output_unit=kwargs["depth_output_unit"])
        windows = resolve_delta_timestamps(cfg.trainable_config, meta)
        split = self._split(catalog, kwargs["episodes"], settings.eval_split) if settings.eval_split else None
        if split is not None:
            kwargs["episodes"] = list(split.train)
            held_out = split.eval_within(cfg.max_eval_samples, catalog.lengths.tolist())
            self.eval_stream = self._eval_stream({**kwargs, "episodes": list(held_out)}, windows)
        transforms = cfg.dataset.image_transforms
        stream = EpisodeStream(
            **kwargs,
            delta_timestamps=windows,
            image_transforms=ImageTransforms(transforms) if transforms.enable else None,
        )
        if cfg.dataset.use_imagenet_stats:
            imagenet = {k: torch.tensor(v, dtype=torch.float32) for k, v in IMAGENET_STATS.items()}
            for each in (stream, self.eval_stream):
                if each is not None:
                    imagenet_stats(each.meta.stats, each.meta.camera_keys, each.meta.depth_keys, imagenet)
        cfg.dataset.streaming = True  # lerobot's IterableDataset branch: no sampler, no shuffle
        if cfg.resume:
            self._resume(cfg, stream)
        return stream, self.eval_stream

    @staticmethod
    def _eval_stream(kwargs: dict[str, Any], windows: Any) -> EpisodeStream:
        """The held-out episodes as lerobot's eval dataset reads them: in order, no image transforms."""
        log.info("lrs: eval stream over %d episodes", len(kwargs["episodes"]))
        return EpisodeStream(**kwargs, delta_timestamps=windows, shuffle=False)

    @staticmethod
    def _split(catalog: Catalog, episodes: list[int] | None, eval_split: float) -> EpisodeSplit:
        selected = episodes if episodes is not None else range(len(catalog.lengths))
        split = split_episodes(selected, first_tasks(catalog), eval_split)
        log.info(
            "lrs: train/eval split: %d train, %d eval episodes (eval_split=%s, %d tasks)",
            len(split.train),
            len(split.eval),
            eval_split,
            len(split.held_out),
        )
        return split

    def _resume(self, cfg: Any, stream: EpisodeStream) -> None:
        from lerobot.common.train_utils import (
            load_training_batch_size,
            load_training_num_processes,
            load_training_step,
        )
        from lerobot.utils.constants import TRAINING_STATE_DIR

        checkpoint = Path(cfg.checkpoint_path)
        state_dir = checkpoint / TRAINING_STATE_DIR
        step = load_training_step(state_dir)
        topology = TrainTopology(cfg.batch_size, cfg.num_workers, stream.world_size)
        saved_topology = TrainTopology(
            load_training_batch_size(checkpoint) or cfg.batch_size,
            cfg.num_workers,
            load_training_num_processes(checkpoint) or stream.world_size,
        )
        per_epoch = batches_per_epoch(stream.schedule(cfg.num_workers).worker_samples(), cfg.batch_size)
        state = resume_state(
            step,
            read_saved(state_dir),
            saved_topology=saved_topology,
            topology=topology,
            batches_per_epoch=per_epoch,
            file=str(state_dir / STATE_FILE),
        )
        if state is not None:
            stream.load_state_dict(state)
            batches = stream.pending_batches(cfg.num_workers)
            log.info("lrs: step %d resumes the data at epoch %d, batch %d", step, stream.epoch, batches)

    def save_checkpoint(self, original: Any) -> Any:
        """lerobot's `save_checkpoint`, then the stream's state beside its training state."""

        def save(checkpoint_dir: Path, step: int, *args: Any, **kwargs: Any) -> None:
            original(checkpoint_dir, step, *args, **kwargs)
            if self.loader is not None:
                from lerobot.utils.constants import TRAINING_STATE_DIR

                saved = SavedStream(step=step, state=self.loader.state_dict())
                write_saved(Path(checkpoint_dir) / TRAINING_STATE_DIR, saved)

        return save

    def accelerator_class(self, base: type) -> type:
        """`base` (accelerate's Accelerator) whose `prepare_data_loader` leaves a stream's DataLoader to lrs."""
        session = self

        class StreamAccelerator(base):
            def prepare_data_loader(self, data_loader: Any, *args: Any, **kwargs: Any) -> Any:
                dataset = getattr(data_loader, "dataset", None)
                if not isinstance(dataset, EpisodeStream):
                    return super().prepare_data_loader(data_loader, *args, **kwargs)
                if dataset is session.eval_stream:  # not trained on: neither saved nor recorded
                    return TrainLoader.like(data_loader, record=False)
                session.loader = TrainLoader.like(data_loader)
                return session.loader

        return StreamAccelerator


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    old = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = old


def run(
    args: Sequence[str], options: StreamOptions, *, on_output_dir: Callable[[Path], None] | None = None
) -> None:
    """Run lerobot-train with `args` (its own flags) on an `EpisodeStream` (see the module docstring);
    `on_output_dir` is told the run's output directory once lerobot has chosen it.

    Raises:
        MissingLerobot: lerobot or accelerate is not installed.
        LrsError: the dataset cannot be read, or a setting cannot be honoured (`TrainConfigError`).
    """
    lerobot_train = import_lerobot_train()
    import accelerate

    session = Session(options, on_output_dir)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_argv(["lrs train", *args]))
        stack.enter_context(_replaced(lerobot_train, "make_train_eval_datasets", session.make_datasets))
        stack.enter_context(
            _replaced(
                lerobot_train, "save_checkpoint", session.save_checkpoint(lerobot_train.save_checkpoint)
            )
        )
        stack.enter_context(
            _replaced(accelerate, "Accelerator", session.accelerator_class(accelerate.Accelerator))
        )
        lerobot_train.register_third_party_plugins()
        lerobot_train.train()
