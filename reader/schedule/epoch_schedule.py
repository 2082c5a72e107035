"""`Schedule`: every consumer's order for a run, the one object the reader and `lrs prewarm` both build
(steps 1-4 of `reader.schedule`), and `EpochPlan`, what the stream, prewarm and an elastic resume ask of
an epoch's order, which the rest of an epoch on a new topology (`reader.schedule.rest.RestSchedule`)
answers too.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from cache.arguments import check_int
from reader.schedule.emission import Emission, EmissionPlan
from reader.schedule.keys import seed_words
from reader.schedule.mixture import Entries, check_weights, mixture_entries
from reader.schedule.order import (
    Piece,
    Share,
    Topology,
    as_lengths,
    consumer_share,
    consumer_stream,
    dropped_frames,
    samples_per_rank,
    worker_share,
)


class EpochPlan(Protocol):
    """An epoch's order as the stream, prewarm and an elastic resume ask it: a `Schedule`, or the rest
    of an epoch on a new topology (`reader.schedule.rest.RestSchedule`)."""

    @property
    def lengths(self) -> tuple[int, ...]: ...

    @property
    def sources(self) -> tuple[int, ...] | None: ...

    @property
    def world_size(self) -> int: ...

    @property
    def num_workers(self) -> int: ...

    @property
    def epoch_frames(self) -> int: ...

    @property
    def samples_per_rank(self) -> int: ...

    @property
    def dropped_frames(self) -> int: ...

    def entries(self, epoch: int) -> Entries: ...

    def worker_samples(self) -> tuple[int, ...]: ...

    def with_topology(self, world_size: int, num_workers: int, pool_size: int) -> EpochPlan: ...

    def pieces(self, epoch: int, rank: int, worker: int) -> list[Piece]: ...

    def emission(self, epoch: int, rank: int, worker: int) -> EmissionPlan: ...

    def first_samples(self, epoch: int, rank: int, worker: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The entry of each of the first `count` samples of consumer (rank, worker) in `epoch`, and its
        frame counted from the first frame this plan streams of that entry."""
        ...


@dataclass(frozen=True)
class Schedule:
    """Every consumer's order for a run: the one object the reader and `lrs prewarm` both build.

    Args:
        lengths: Frames of each selected episode (positions are `Piece.episode`).
        seed: Run seed, in [0, 2**64).
        shuffle: Shuffle episodes, pool rounds and frames; False streams sequentially.
        world_size: Number of ranks.
        num_workers: DataLoader workers per rank (0: the main process).
        pool_size: Episode pool size K of each consumer.
        sources: A mixture's source of each selected episode (non-decreasing; None: one source).
        weights: A weighted mixture's weight of each source (None: every frame of every source once
            per epoch). See `mixture_entries`.
        samples: A weighted mixture's samples per epoch (None: the selected frames of all sources).
    """

    lengths: tuple[int, ...] = field(repr=False)
    seed: int
    shuffle: bool = True
    world_size: int = 1
    num_workers: int = 0
    pool_size: int = 1
    sources: tuple[int, ...] | None = field(default=None, repr=False)
    weights: tuple[float, ...] | None = None
    samples: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengths", tuple(as_lengths(self.lengths).tolist()))
        seed_words(self.seed, 0)
        Topology(self.world_size, 0, self.num_workers, 0)
        check_int("pool_size", self.pool_size, 1)
        if self.sources is not None:
            sources = tuple(int(s) for s in self.sources)
            if len(sources) != len(self.lengths) or any(b < a for a, b in itertools.pairwise(sources)):
                raise ValueError("Invalid sources. Expected a non-decreasing source index per episode.")
            object.__setattr__(self, "sources", sources)
        if self.weights is not None:
            if self.sources is None:
                raise ValueError("Invalid weights without sources. Expected the source of each episode.")
            n = max(self.sources, default=-1) + 1
            object.__setattr__(self, "weights", check_weights(self.weights, len(self.weights)))
            if len(self.weights) < n:
                raise ValueError(f"Invalid weights ({len(self.weights)}). Expected one per source ({n}).")
        if self.samples is not None:
            check_int("samples", self.samples, 0)
            if self.weights is None:
                raise ValueError("Invalid samples without weights. Expected weights to share them out.")

    @property
    def total_frames(self) -> int:
        """Frames of the selected episodes."""
        return sum(self.lengths)

    @property
    def epoch_frames(self) -> int:
        """Frames of an epoch's stream: the selected frames, or a weighted mixture's `samples`."""
        if self.weights is not None and self.samples is not None:
            return self.samples
        return self.total_frames

    @property
    def samples_per_rank(self) -> int:
        """Samples each rank yields per epoch (equal on every rank)."""
        return samples_per_rank(self.epoch_frames, self.world_size)

    @property
    def dropped_frames(self) -> int:
        """Frames no rank yields per epoch (the stream's tail, < world_size)."""
        return dropped_frames(self.epoch_frames, self.world_size)

    def entries(self, epoch: int) -> Entries:
        """The entries of `epoch` (`Piece.episode` indexes them): the selected episodes, or a weighted
        mixture's share of each source (`mixture_entries`)."""
        if self.weights is None:
            n = len(self.lengths)
            lengths = np.asarray(self.lengths, dtype=np.int64)
            return Entries(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), lengths)
        assert self.sources is not None
        return mixture_entries(
            self.lengths,
            self.sources,
            self.weights,
            self.epoch_frames,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
        )

    def worker_samples(self) -> tuple[int, ...]:
        """Samples per epoch of each worker of a rank (the same on every rank and every epoch)."""
        return tuple(
            worker_share(self.samples_per_rank, self.num_workers, w) for w in range(max(1, self.num_workers))
        )

    def topology(self, rank: int, worker: int) -> Topology:
        """The consumer (rank, worker) of this run."""
        return Topology(self.world_size, rank, self.num_workers, worker)

    def pieces(self, epoch: int, rank: int, worker: int) -> list[Piece]:
        """The pieces of consumer (rank, worker) in `epoch`, in admission order (`Piece.episode` is an
        index of `entries(epoch)`, the selected position itself without weights)."""
        share = self._share(epoch, self.topology(rank, worker))
        return [Piece(*row) for row in share.rows.tolist()]

    def _share(self, epoch: int, topology: Topology) -> Share:
        entries = self.entries(epoch)
        return consumer_share(
            entries.stops - entries.starts,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            topology=topology,
            starts=entries.starts if self.weights is not None else None,
        )

    def with_topology(self, world_size: int, num_workers: int, pool_size: int) -> Schedule:
        """This run's order on another topology (the entries and their order do not change)."""
        return dataclasses.replace(self, world_size=world_size, num_workers=num_workers, pool_size=pool_size)

    def emission(self, epoch: int, rank: int, worker: int) -> Emission:
        """The emission plan of consumer (rank, worker) in `epoch`."""
        topology = self.topology(rank, worker)
        return Emission(
            self._share(epoch, topology),
            pool_size=self.pool_size,
            shuffle=self.shuffle,
            stream=consumer_stream(self.seed, epoch, topology),
        )

    def first_samples(self, epoch: int, rank: int, worker: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The entry of each of the first `count` samples of consumer (rank, worker) in `epoch`, and its
        frame counted from the entry's first frame."""
        emission = self.emission(epoch, rank, worker)
        piece, frame = emission.arrays(0, count)
        entry = emission.entry_of(piece)
        # The emission gives episode frames; a (mixture) entry's frames count from its start.
        return entry, frame - self.entries(epoch).starts[entry]
