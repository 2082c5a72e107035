"""`EpisodeStream`: the training-time IterableDataset over an lrs/1 (or plain v3) dataset.

The class only wires things together: `reader.plan.read_plan` opens each dataset once
(`reader.plan.source`: its catalog, selection, windows, quantizers and node cache), `reader.schedule`
decides the order, `reader.plan.resume` resumes (`Resumption`, its one entry point), and
`reader.runtime.pool` reads, fetches and decodes. Everything a process needs at run time
(`reader.runtime.counters`: cache threads, open decoders, parquet footers) is created lazily in the process
that iterates, so the stream pickles and forks cleanly into DataLoader workers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from cache import NodeCache, Remote
from cache.arguments import check_int
from cache.counter_files import discard_counter_files
from cache.exits import cleanup_on_sigterm
from cache.process import ProcessLocal
from cache.redaction import scrubbed, scrubbed_iter
from reader.decode.video import Decoders, check_device
from reader.errors import StateError
from reader.format.catalog import Catalog, EpisodeRef
from reader.format.parquet import data_row_bytes
from reader.metadata import DatasetMeta
from reader.plan.read_plan import EntryRefs, ReadPlan
from reader.plan.resume.resumption import IterationCursor, Resumption
from reader.plan.source import OpenedSource
from reader.plan.spec import (
    DEFAULT_DECODE_AHEAD,
    DEFAULT_DECODE_THREADS,
    DEFAULT_PREFETCH_EPISODES,
    DepthUnit,
    ReadSpec,
    SeekMode,
    check_spec_alone,
    keyword_defaults,
    resolve_topology,
)
from reader.runtime.counters import ReaderProcessState, ReaderStats, read_published
from reader.runtime.pool import Consumer, Options
from reader.runtime.rows import RowGroupReader
from reader.schedule import Schedule
from reader.schedule.single_frame import SingleFrame

# The keywords of `__init__` that a `ReadSpec` holds (its fields are their one statement; a test checks that
# the signature and the docstring agree with them).
_SPEC_KEYWORDS = frozenset(keyword_defaults())


class EpisodeStream(IterableDataset):
    """Every frame of the selected episodes once per epoch, value-identical to lerobot's `LeRobotDataset`.

    Each consumer (rank x DataLoader worker) holds a pool of `episode_pool_size` episodes' rows and emits
    their frames in a random order that reads each episode's videos forward, in runs of a few frames
    (`reader.schedule`); video is fetched ahead into the node cache, and `decode_threads` threads decode
    the next `decode_ahead` samples while the current one is handed out.

    Args:
        source: a `reader.plan.spec.ReadSpec`, which holds every argument below but `rank`,
            `image_transforms` and `storage_options` (leave those others at their defaults); or, as sugar
            that builds one (`stream.spec`), the dataset (a path or URL, see `cache.remote.resolve`),
            lrs/1 or plain v3; or a list of
            them, a mixture: samples then carry `dataset_index` (the source's position in the list) and
            only the features every source has (as lerobot's `MultiLeRobotDataset`), windows follow each
            source's fps, and one node cache holds them all.
        weights: a mixture's share of each source in an epoch's samples (None: every frame of every
            source once per epoch). Below a source's size, each epoch reads another part of it (every
            episode once per cycle through it); above, its episodes repeat, spread over the epoch.
        samples_per_epoch: a weighted mixture's samples per epoch (default: the selected frames of all
            sources).
        delta_timestamps: seconds relative to each sample, per key (lerobot's windows).
        episodes: episode indices to read (default: all), read in ascending order. A mixture takes one
            such list (or None) per source.
        episode_pool_size: episodes each consumer holds and mixes frames from (K). Default:
            `default_pool_size(batch_size)`, max(16, 1.25 x batch_size). The pool is visited in one
            cyclic order, so a batch smaller than the pool rarely holds an episode twice while the pool
            is full (a piece recurs one round later, less the pieces that left meanwhile).
        batch_size: the DataLoader's batch size, when known: the default pool follows it.
        shuffle: shuffle episodes and frames; False reads sequentially.
        seed: the run's seed; the order is a pure function of it, the epoch and the topology.
        rank: this process's rank. Default from torch.distributed when initialized, else the RANK
            environment variable, else 0 (`reader.plan.spec.resolve_topology`).
        world_size: the number of ranks. Default from torch.distributed when initialized, else the
            WORLD_SIZE environment variable, else 1.
        num_workers: the DataLoader's workers per rank, when known: recorded in `stream.spec`, for
            `lrs prewarm --spec` to plan for (the stream reads whatever DataLoader drives it).
        cache_dir: the node cache directory (shared by every process on the node). None: local sources
            are read in place, remote ones through a temporary directory removed at exit.
        cache_max_bytes: the cache's byte budget; leave room for the videos of the pool and of the
            prefetched episodes, or evicted files are fetched again.
        prefetch_episodes: how many episodes ahead of admission rows and videos are fetched.
        decode_device: "cpu", or "cuda[:n]" (torchcodec decodes on the GPU; use num_workers=0 then).
        return_uint8: return frames as uint8 instead of float32 in [0, 1].
        image_transforms: applied to each camera's tensor.
        tolerance_s: the largest distance between a frame's timestamp and the one asked for.
        storage_options: passed to the fsspec filesystem.
        decoder_cache_size: open decoders kept per process (default: (pool size + decode_ahead) x
            cameras); at least pool size x cameras, since each piece of the pool reads its cameras forward
            through its own decoders.
        seek_mode: torchcodec's seek mode ("approximate" is lerobot's, and value-identical here).
        decode_threads: threads per consumer building samples ahead (decoding, float conversion); 0
            builds each sample when it is asked for. Decoding releases the GIL, so with
            `num_workers=0` two threads use two cores without worker processes.
        decode_ahead: samples built ahead of the one handed out. Memory: this many samples' frames
            (cameras x window frames x H x W x 3 bytes, x4 for float32).
        depth_output_unit: depth cameras (lerobot's `is_depth_map` features) come as float32 (1, H, W)
            depth in millimetres ("mm", rounded, lerobot's default) or metres ("m"), whatever
            `return_uint8` says; `image_transforms` is not applied to them (as in lerobot).
        resize: (height, width) the colour cameras come in (None: as stored), video and image cameras
            alike: decoded at full size, then scaled in uint8 exactly as torchvision's `Resize` scales a
            tensor (bilinear, antialiased), before the float conversion and `image_transforms`. `meta`
            reports the new shapes; the order does not change (a resume state may be loaded at another
            size). Depth cameras keep their size (an interpolated depth lies between surfaces).
            `lrs reshard --resize` stores and decodes fewer pixels instead.

    Raises:
        ValueError: a bad argument (the message names it).
        DatasetError: the dataset's metadata is missing or malformed.
    """

    @scrubbed  # a traceback of the caller's shows the whole chain of what it raises: none of it credentialed
    def __init__(
        self,
        source: ReadSpec | str | os.PathLike[str] | Remote | Sequence[str | os.PathLike[str] | Remote],
        *,
        weights: Sequence[float] | None = None,
        samples_per_epoch: int | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        episodes: Sequence[int] | Sequence[Sequence[int] | None] | None = None,
        episode_pool_size: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_max_bytes: int | None = None,
        prefetch_episodes: int = DEFAULT_PREFETCH_EPISODES,
        decode_device: str = "cpu",
        return_uint8: bool = False,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        tolerance_s: float = 1e-4,
        storage_options: dict[str, Any] | None = None,
        decoder_cache_size: int | None = None,
        seek_mode: SeekMode = "approximate",
        decode_threads: int = DEFAULT_DECODE_THREADS,
        decode_ahead: int = DEFAULT_DECODE_AHEAD,
        depth_output_unit: DepthUnit = "mm",
        resize: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        given = {name: value for name, value in locals().items() if name in _SPEC_KEYWORDS}
        if isinstance(source, ReadSpec):
            check_spec_alone(given)
            spec = source
        else:
            spec = ReadSpec.of(source, **given)
        if image_transforms is not None and not callable(image_transforms):
            raise ValueError(f"Invalid image_transforms ({image_transforms!r}). Expected a callable or None.")
        self._open(spec, rank, image_transforms, storage_options, _remotes(source))

    def _open(
        self,
        spec: ReadSpec,
        rank: int | None,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None,
        storage_options: dict[str, Any] | None,
        remotes: Sequence[Remote | None] | None,
    ) -> None:
        """Open the spec's sources on this process's topology (the rest of `__init__`)."""
        self._cleanup: weakref.finalize | None = None
        self.rank, self.world_size = resolve_topology(rank, spec.world_size)
        self._spec = replace(spec, world_size=self.world_size)
        cache_dir = spec.cache_dir if spec.cache_dir is not None else self._temporary_cache_dir()
        self.plan = ReadPlan.open(
            self._spec, storage_options=storage_options, remotes=remotes, cache_dir=cache_dir
        )
        self.sources: tuple[OpenedSource, ...] = self.plan.sources
        self.seed, self.epoch = spec.seed, 0
        self.delta_timestamps = spec.windows or None  # what lerobot's trainer reads on a dataset
        base = self.schedule(0)
        if base.samples_per_rank == 0:
            raise ValueError(
                f"Invalid world_size ({self.world_size}). Expected at most the {base.epoch_frames} frames of an "
                "epoch: every rank yields the same number of samples (so DDP never hangs), which with more "
                "ranks than frames is none."
            )
        self._options = Options(
            tolerance_s=spec.tolerance_s,
            return_uint8=spec.return_uint8,
            image_transforms=image_transforms,
            prefetch_episodes=spec.prefetch_episodes,
            decode_threads=spec.decode_threads,
            decode_ahead=spec.decode_ahead if spec.decode_threads else 0,
            depth_unit=spec.depth_output_unit,
            resize=spec.resize,
        )
        self._decoding = (
            _decoder_capacity(
                spec.decoder_cache_size,
                self.plan.episode_pool_size,
                self.options.decode_ahead,
                max(len(s.catalog.info.video_keys) for s in self.sources),
            ),
            check_device(spec.decode_device),
            spec.seek_mode,
            spec.resize,
        )
        self.identity = self.plan.identity
        # How a trainer's resume dict without a pool size is read: the pool its run had (`load_state_dict`).
        default_pool = None if spec.episode_pool_size is not None else spec.batch_size is not None
        self._resumption = Resumption(self.identity, default_pool)
        self._process = ProcessLocal(self._make_runtime)
        self._meta: DatasetMeta | None = None
        self._run = uuid.uuid4().hex[:12]  # names this stream's published counters (see `stats`)

    @property
    def spec(self) -> ReadSpec:
        """What this stream reads, as one JSON-able record (`spec.to_json()`): its world size as found, its
        seed as a loaded state may have set it. `EpisodeStream(spec)` and `lrs prewarm --spec` read it."""
        return self._spec if self._spec.seed == self.seed else replace(self._spec, seed=self.seed)

    def __repr__(self) -> str:
        where = ", ".join(f"{s.catalog.remote.shown!r}, {s.catalog.kind}" for s in self.sources)
        weights = f", weights={list(self.weights)}" if self.weights is not None else ""
        return (
            f"EpisodeStream({'[' + where + ']' if self.mixture else where}{weights}, "
            f"episodes={sum(len(s.episodes) for s in self.sources)}, rank={self.rank}/{self.world_size}, "
            f"pool={self.episode_pool_size}, seed={self.seed}, epoch={self.epoch})"
        )

    @property
    def mixture(self) -> bool:
        """Whether the source was a list of datasets (samples then carry `dataset_index`)."""
        return self.plan.mixture

    @property
    def weights(self) -> tuple[float, ...] | None:
        return self.plan.weights

    @property
    def samples_per_epoch(self) -> int | None:
        return self.plan.samples_per_epoch

    @property
    def episode_pool_size(self) -> int:
        return self.plan.episode_pool_size

    @property
    def shuffle(self) -> bool:
        return self.plan.shuffle

    @property
    def catalog(self) -> Catalog:
        """The dataset's catalog (a mixture has one per source: `sources[i].catalog`)."""
        return self._only("catalog").catalog

    @property
    def cache(self) -> NodeCache:
        """The dataset's node cache (a mixture's sources share its directory: `sources[i].cache`)."""
        return self.sources[0].node_cache

    @property
    def episodes(self) -> list[int]:
        """The selected episode indices (a mixture has one list per source: `sources[i].episodes`)."""
        return list(self._only("episodes").episodes)

    @property
    def options(self) -> Options:
        """How the stream reads (a mixture's sources differ only in windows and depth: `sources[i].windows`,
        `sources[i].depth`)."""
        return self._options

    def _only(self, what: str) -> OpenedSource:
        if self.mixture:
            raise AttributeError(f"A mixture has one {what} per source. Expected stream.sources[i].{what}.")
        return self.sources[0]

    @property
    def meta(self) -> DatasetMeta:
        """The dataset's metadata under lerobot's `LeRobotDatasetMetadata` names, for
        `make_policy(cfg, ds_meta=stream.meta)`: features, stats (depth in `depth_output_unit`), fps,
        camera keys, tasks (`reader.metadata`). Describes the whole dataset, whatever `episodes` selects.

        Raises:
            DatasetError: `meta/stats.json` is malformed (a missing one gives `stats=None`, as in lerobot).
            FetchError: it could not be read.
        """
        if self._meta is None:
            unit, size = self.options.depth_unit, self.options.resize
            metas = [
                DatasetMeta.from_catalog(s.catalog, depth_output_unit=unit, resize=size) for s in self.sources
            ]
            self._meta = DatasetMeta.merge(metas) if self.mixture else metas[0]
        return self._meta

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        """`meta/info.json`'s features (lerobot's `LeRobotDataset.features`)."""
        return self.meta.features

    @property
    def fps(self) -> int | float:
        """The dataset's fps (a mixture's first source's; `sources[i].catalog.info.fps` for each)."""
        return self.sources[0].catalog.info.fps

    @property
    def num_frames(self) -> int:
        """Frames of the selected episodes (lerobot's `LeRobotDataset.num_frames`; a mixture's summed)."""
        return sum(self.lengths)

    @property
    def num_episodes(self) -> int:
        """Selected episodes (lerobot's `LeRobotDataset.num_episodes`; a mixture's summed)."""
        return len(self.lengths)

    @property
    def repo_id(self) -> str:
        """Where the dataset is, as given but without credentials (lerobot's name; a mixture's URLs joined by
        ", ")."""
        return self.meta.repo_id

    @property
    def root(self) -> Path | None:
        """The dataset's local directory (lerobot's `root`), or None for a remote dataset or a mixture."""
        remote = self.sources[0].catalog.remote
        if self.mixture or not remote.is_local:
            return None
        return Path(remote.root)

    @property
    def lengths(self) -> list[int]:
        """Frames of each selected episode, in selection order (a mixture's sources one after another)."""
        return self.plan.lengths

    @scrubbed
    def __getitem__(self, index: int) -> dict[str, Any]:
        """The frame at `index` of the selected episodes (ascending, a mixture's sources one after another),
        with its windows: `LeRobotDataset(...)[index]`'s keys and values, as the stream yields that frame.

        For looking at a frame, not for training: each call decodes from the frame's keyframe and does not
        prefetch. Training iterates the stream (random order, in-order decode, exact resume).

        Raises:
            IndexError: `index` is not in [-num_frames, num_frames).
        """
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(
                f"Invalid index ({index!r}). Expected an int: the frame's position in the dataset."
            )
        total = self.num_frames
        if not -total <= index < total:
            raise IndexError(f"Invalid index ({index}). Expected -{total} <= index < {total} (num_frames).")
        ends = np.cumsum(self.lengths)
        entry = int(np.searchsorted(ends, index % total, side="right"))
        frame = int(index % total - (ends[entry] - self.lengths[entry]))
        process = self._runtime()
        refs = EntryRefs(self.sources, [(s.catalog, s.episodes) for s in self.sources])
        consumer = Consumer(
            SingleFrame(entry, frame, self.lengths[entry]),
            refs,
            start=0,
            rows=process.rows,
            decoders=process.decoders,
            options=replace(self.options, decode_threads=0, decode_ahead=0),
            counters=process.counters,
        )
        return next(iter(consumer))

    def __len__(self) -> int:
        """Samples this rank yields per epoch (across its DataLoader workers)."""
        return self.schedule(0).samples_per_rank

    def schedule(self, num_workers: int) -> Schedule:
        """The order of this run for a DataLoader with `num_workers` workers (0: the main process)."""
        return self.plan.schedule(self.seed, num_workers)

    def entry_refs(self, epoch: int) -> Sequence[tuple[OpenedSource, EpisodeRef]]:
        """The source and episode of each entry of `epoch` (`Piece.episode` indexes it)."""
        return self.plan.entry_refs(self.seed, epoch, self.sources)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration streams (a new order per epoch). Call it in the main process
        before creating the DataLoader iterator (with `persistent_workers=False`, the default).

        A loaded resume state stays pending until the epoch moves away from the one it names.
        """
        self.epoch = check_int("epoch", epoch, 0)
        self._resumption.set_epoch(self.epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        num_workers, physical = (info.num_workers, info.id) if info is not None else (0, 0)
        consumer, process = self._consumer(num_workers, physical)
        return iter(()) if consumer is None else scrubbed_iter(publishing(consumer, process))

    def batches(
        self, batch_size: int, *, threads: int | None = None, ahead: int = 2, channels_last: bool = False
    ) -> Iterator[dict[str, Any]]:
        """This rank's samples of the current epoch in batches, built in this process without DataLoader
        workers: what `DataLoader(stream, batch_size, num_workers=0, collate_fn=reader.collate)` yields,
        batch for batch (the same order, keys, dtypes and values), assembled by `threads` threads
        (default: `decode_threads`, at least 1) that write each sample straight into its batch, `ahead`
        batches ahead. `reader.BatchLoader` wraps it with `len` and exact resume. With `channels_last`,
        video frames come in channels-last memory order (`torch.channels_last` for one frame per camera):
        the same shapes and values, without the per-frame transposition a (C, H, W)-contiguous batch
        costs on the CPU (call `.contiguous()` on the GPU if a model needs it).

        Raises:
            ValueError: called inside a DataLoader worker, or a bad argument.
        """
        if get_worker_info() is not None:
            raise ValueError(
                "Invalid stream.batches() call in a DataLoader worker. Expected it in the trainer's process "
                "(iterate the stream itself through a DataLoader instead)."
            )
        lanes = (
            check_int("threads", threads, 1) if threads is not None else max(1, self.options.decode_threads)
        )
        check_int("batch_size", batch_size, 1)
        check_int("ahead", ahead, 0)
        consumer, process = self._consumer(0, 0)
        if consumer is None:
            return iter(())
        cameras = (
            frozenset(k for s in self.sources for k in s.catalog.info.video_keys)
            if channels_last
            else frozenset()
        )
        return publishing(
            consumer.batches(batch_size, lanes=lanes, ahead=ahead, channels_last=cameras), process
        )

    def _consumer(self, num_workers: int, physical: int) -> tuple[Consumer | None, ReaderProcessState]:
        """The consumer this process iterates as worker `physical` of `num_workers` (None: a resume left
        it nothing), registered as the process's running iteration.

        Raises:
            ValueError: the spec names another `num_workers` (what `lrs prewarm --spec` planned for).
        """
        if self._spec.num_workers is not None and self._spec.num_workers != num_workers:
            how = f"a DataLoader with {num_workers} workers" if num_workers else "one consumer per rank"
            raise ValueError(
                f"Invalid num_workers for this stream (it is read by {how}; its spec says "
                f"num_workers={self._spec.num_workers}). Expected the count the stream was built with: "
                "`lrs prewarm --spec` plans the order that count gives (BatchLoader and num_workers=0 "
                "read one consumer per rank)."
            )
        start = self._resumption.start(self.schedule(num_workers), self.epoch, physical=physical)
        process = self._runtime()
        if start.logical is None:
            process.cursor = None
            return None, process
        consumer = Consumer(
            start.schedule.emission(self.epoch, self.rank, start.logical),
            self.plan.entry_refs(self.seed, self.epoch, self.sources, start.schedule),
            start=start.samples,
            rows=process.rows,
            decoders=process.decoders,
            options=self.options,
            counters=process.counters,
        )
        process.cursor = IterationCursor(consumer, self.epoch, start.logical, num_workers, start.history)
        return consumer, process

    def state_dict(
        self,
        batches_consumed: int | None = None,
        batch_size: int | None = None,
        num_workers: int | None = None,
    ) -> dict[str, Any]:
        """A small JSON-able resume state.

        With `batches_consumed`, `batch_size` and `num_workers` (what a trainer driving a standard DataLoader
        knows, see `ResumableLoader`): the state after that many batches of the current epoch. Without
        them, inside the process iterating (a DataLoader worker, or the main process with num_workers=0,
        as torchdata's StatefulDataLoader calls it): the position of that iteration.

        Raises:
            StateError: no arguments and no iteration running in this process.
        """
        given = [v is not None for v in (batches_consumed, batch_size, num_workers)]
        if batches_consumed is not None and batch_size is not None and num_workers is not None:
            return self._resumption.loader_state(
                seed=self.seed,
                epoch=self.epoch,
                batches_consumed=batches_consumed,
                batch_size=batch_size,
                num_workers=num_workers,
            )
        if any(given):
            raise ValueError(
                "Invalid state_dict arguments. Expected batches_consumed, batch_size and num_workers together."
            )
        process = self._process.peek()
        cursor = process.cursor if process is not None else None
        if cursor is None:
            raise StateError(
                "Invalid state_dict() call: no iteration runs in this process. Expected "
                "state_dict(batches_consumed=k, batch_size=B, num_workers=W) from the trainer (see ResumableLoader)."
            )
        return self._resumption.cursor_state(cursor, seed=self.seed)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at the exact next sample when the stream next iterates the state's epoch.

        Accepts what `state_dict` returns, or a trainer's `{"batches_consumed": k, "batch_size": B,
        "num_workers": W}` (optionally with "epoch" and "seed"). Sets the epoch (and seed) it names.

        Raises:
            StateError: the state is malformed or was made for another dataset, episode selection, pool
                size, world size or shuffle (another num_workers is refused when iterating).
        """
        self.epoch, self.seed = self._resumption.load(
            state, seed=self.seed, epoch=self.epoch, schedule=lambda seed: self.plan.schedule(seed, 0)
        )

    def pending_batches(self, num_workers: int | None = None) -> int:
        """Batches a pending trainer state says were consumed in the current epoch by the run that a
        DataLoader with `num_workers` continues (0 if none, or where that DataLoader streams the rest of
        the epoch on a new topology: it counts its own batches from 0)."""
        return self._resumption.pending_batches(self.epoch, num_workers)

    def stats(self, all_processes: bool = False) -> ReaderStats:
        """The reader's counters: this process's, or with `all_processes` the sum over every process that
        iterated this stream (the DataLoader workers included, also those that have exited), which is
        what a trainer with `num_workers > 0` wants.

        Each process publishes its counters under the cache directory (`.lrs/reader-stats/`) at most once
        a second while it iterates and when its iteration ends, so a running worker's share can lag by
        up to a second. The cache counters are this stream's too (what its processes fetched, hit and
        evicted), not another run's or `lrs prewarm`'s: the node's totals are `cache.sum_cache_stats`.
        """
        if not all_processes:
            return self._runtime().snapshot()
        total = sum(read_published(self.cache.cache_dir, self._run), ReaderStats())
        process = self._process.peek()
        if process is not None and (process.published is None or not process.published.written):
            total = total + process.snapshot()  # this process has not published yet
        return total

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_process"]  # made afresh in the process that unpickles it
        state["_cleanup"] = None  # the creating process alone removes a temporary cache directory
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._process = ProcessLocal(self._make_runtime)

    def _temporary_cache_dir(self) -> str:
        """A cache directory removed when this stream goes or the process exits; DataLoader workers share
        it (they inherit the path), and only the creating process removes it, also when SIGTERM ends it
        (what SLURM and torchrun send)."""
        path = tempfile.mkdtemp(prefix="lrs-cache-")
        self._cleanup = weakref.finalize(self, _remove_dir, path, os.getpid())
        cleanup_on_sigterm(self._cleanup)
        return path

    def _runtime(self) -> ReaderProcessState:
        return self._process.get()

    def _make_runtime(self) -> ReaderProcessState:
        capacity, device, seek_mode, resize = self._decoding
        rows = tuple(
            RowGroupReader(
                s.node_cache,
                s.data_file_size,
                s.display,
                row_groups=s.catalog.row_group_ranges,
                columns=s.catalog.column_order,
                bytes_per_row=data_row_bytes(s.catalog.info.features),
            )
            for s in self.sources
        )
        process = ReaderProcessState(
            rows,
            Decoders(capacity, device=device, seek_mode=seek_mode, resize=resize),
            caches=tuple(s.node_cache for s in self.sources),  # for this stream's cache counters
        )
        process.publish_under(self.cache.cache_dir, self._run)
        return process


def publishing(items: Iterable[dict[str, Any]], process: ReaderProcessState) -> Iterator[dict[str, Any]]:
    """Iterate a consumer's samples (or batches), publishing the process's counters as each one is handed
    out (at most once a second) and once more when the iteration ends (`reader.runtime.counters`)."""
    try:
        for item in items:
            process.publish()
            yield item
    finally:
        process.publish(force=True)


def _decoder_capacity(given: int | None, pool_size: int, ahead: int, cameras: int) -> int:
    """Decoders a process keeps open: every piece the pool (and the samples built ahead) reads from needs
    one per camera, or a piece would reopen its videos and seek again for every sample."""
    needed = pool_size * max(1, cameras)
    if given is None:
        return (pool_size + ahead) * max(1, cameras)
    if given < needed:
        raise ValueError(
            f"Invalid decoder_cache_size ({given}). Expected at least episode_pool_size x cameras "
            f"({pool_size} x {cameras} = {needed}): each piece of the pool reads its cameras forward "
            "through decoders of its own."
        )
    return given


def _remotes(source: Any) -> list[Remote | None] | None:
    """Per source, a `cache.Remote` given to read it through (None where a URL was given)."""
    if isinstance(source, ReadSpec):
        return None
    given = list(source) if isinstance(source, (list, tuple)) else [source]
    return [s if isinstance(s, Remote) else None for s in given]


def _remove_dir(path: str, pid: int) -> None:
    if os.getpid() == pid:
        discard_counter_files(path)  # at exit, the counters' last write would come after this removal
        shutil.rmtree(path, ignore_errors=True)
