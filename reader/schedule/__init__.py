"""The order of an epoch, as pure functions of (seed, epoch, shuffle, topology, episode lengths, pool size).

Nothing here does I/O, so prefetch can run ahead of emission, `lrs prewarm` (another process) can compute
what a node will read first, and a resume replays arithmetic instead of data.

An epoch is built in four steps, each a small function over numpy arrays:

1. `epoch_order`: a permutation of the selected episodes, seeded by (seed, epoch).
2. `rank_range`: the episodes' frames are concatenated in that order and cut into `world_size` equal
   slices of `S = total // world_size` frames, so every rank yields the same number of samples and DDP
   never hangs. The last `total % world_size` frames of the stream are dropped: at most `world_size - 1`
   frames per epoch, and different ones every epoch when shuffled. If `total < world_size`, `S = 0` and
   every rank is empty.
3. `worker_share`: a rank's DataLoader workers share its pieces. The rank's frame stream is cut into
   runs of `RUN_FRAMES` positions, dealt to the `max(1, num_workers)` workers in turn, so every worker
   holds a share of every piece of its rank (`deal`): the workers' pools hold the same episodes at the
   same time (a video is fetched once per node, at about the same time for every worker), and a
   worker's pool can hold as many episodes as its rank has, not a 1/num_workers slice of them. A
   worker's share of the epoch, `worker_share`, depends on nothing but the rank's sample count: the
   shares differ by at most `RUN_FRAMES` and are the same every epoch.
4. `Emission`: a consumer admits its pieces in order into a pool of up to K and emits in rounds; see
   the class docstring.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy as np

from cache.checks import check_int
from reader.schedule.emission import Admission, Emission, Step
from reader.schedule.mixture import Entries, check_weights, mixture_entries, source_quotas
from reader.schedule.order import (
    RUN_FRAMES,
    Piece,
    Share,
    Topology,
    _as_lengths,
    _consumer_share,
    _seed_words,
    consumer_pieces,
    consumer_stream,
    deal,
    dropped_frames,
    epoch_order,
    rank_range,
    samples_per_rank,
    worker_share,
)

__all__ = [
    "Admission",
    "Emission",
    "Entries",
    "Piece",
    "RUN_FRAMES",
    "Schedule",
    "Share",
    "Step",
    "Topology",
    "check_weights",
    "consumer_pieces",
    "consumer_stream",
    "deal",
    "dropped_frames",
    "epoch_order",
    "mixture_entries",
    "rank_range",
    "samples_per_rank",
    "source_quotas",
    "worker_share",
]


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
        object.__setattr__(self, "lengths", tuple(_as_lengths(self.lengths).tolist()))
        _seed_words(self.seed, 0)
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
        return _consumer_share(
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
