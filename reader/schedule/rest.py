"""The rest of an epoch after a preemption, on another topology (elastic resume), as pure functions.

A job stopped after every rank consumed `batches_consumed` batches of `batch_size` with `num_workers`
workers (a `RunSegment`) has consumed a set of frames that follows from the schedule alone: each logical
worker's first `n_w` emitted samples (`reader.plan.resume.loader_math.loader_resume`). The rest of the epoch is every
other frame of the epoch's entries. `rest_after` computes it, for any number of segments run one after
another (a job preempted twice in one epoch, each time on another topology).

`RestSchedule` streams that rest on a new topology with the machinery of a whole epoch, run over
*virtual* entries: entry i of the epoch, cut down to its `n_i` remaining frames, numbered `0..n_i-1`.
The entries keep the epoch's order (the same `epoch_order` permutation), their remaining frames are
cut into equal rank slices (the last `rest % world_size` frames dropped, as for any epoch), dealt to the
workers in runs and emitted by each consumer's pool as usual; each emitted virtual frame is then mapped
back to its episode frame. So the frames consumed before plus those of the rest are every frame of the
epoch once, but for fewer than `world_size` frames per segment, and every rank of the new topology
yields the same number of samples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import numpy as np

from cache.arguments import check_int
from reader.plan.resume.loader_math import loader_resume
from reader.schedule.emission import Emission, Step
from reader.schedule.epoch_schedule import EpochPlan, Schedule
from reader.schedule.keys import TAG_REST
from reader.schedule.mixture import Entries
from reader.schedule.order import (
    Piece,
    Topology,
    consumer_share,
    consumer_stream,
    samples_per_rank,
    worker_share,
)

T = TypeVar("T")


@dataclass(frozen=True)
class RunSegment:
    """One run of a job inside an epoch: its topology and how far every rank got.

    Attributes:
        world_size: ranks.
        num_workers: DataLoader workers per rank (0: the main process).
        batch_size: the DataLoader's batch size.
        batches_consumed: batches each rank consumed in this run (the same on every rank).
        pool_size: the episode pool size of its consumers.
    """

    world_size: int
    num_workers: int
    batch_size: int
    batches_consumed: int
    pool_size: int

    def __post_init__(self) -> None:
        check_int("world_size", self.world_size, 1)
        check_int("num_workers", self.num_workers, 0)
        check_int("batch_size", self.batch_size, 1)
        check_int("batches_consumed", self.batches_consumed, 0)
        check_int("pool_size", self.pool_size, 1)

    def to_json(self) -> dict[str, int]:
        return {
            "world_size": self.world_size,
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
            "batches_consumed": self.batches_consumed,
            "episode_pool_size": self.pool_size,
        }


@dataclass(frozen=True)
class Rest:
    """The frames of an epoch's entries not yet consumed, as entry-relative frame numbers.

    Entry i keeps `frames[offsets[i]:offsets[i + 1]]` (ascending, `0 <= f < entry length`).
    """

    offsets: np.ndarray
    frames: np.ndarray

    @classmethod
    def whole(cls, lengths: np.ndarray) -> Rest:
        """Every frame of entries of `lengths` frames."""
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return cls(offsets, np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lengths))

    @property
    def lengths(self) -> np.ndarray:
        """Remaining frames of each entry."""
        return np.diff(self.offsets)

    @property
    def total(self) -> int:
        return int(self.offsets[-1])

    def without(self, entry: np.ndarray, virtual: np.ndarray) -> Rest:
        """This rest less the frames at `virtual` positions of entries `entry`.

        Raises:
            ValueError: a frame given twice or not in the rest (a schedule error, never user input).
        """
        keep = np.ones(self.total, dtype=bool)
        where = self.offsets[entry] + virtual
        if np.any(virtual >= self.lengths[entry]):
            raise ValueError("Invalid consumed frames. Expected frames of the rest.")
        keep[where] = False
        if self.total - np.count_nonzero(keep) != where.size:
            raise ValueError("Invalid consumed frames. Expected each remaining frame at most once.")
        counts = np.bincount(
            np.repeat(np.arange(self.lengths.size), self.lengths)[keep], minlength=self.lengths.size
        )
        return Rest(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), self.frames[keep])


def consumed_counts(plan: EpochPlan, segment: RunSegment) -> tuple[int, ...]:
    """The samples each logical worker of a rank consumed in `segment`, run on `plan` (a `Schedule` for
    a segment from the epoch's start, or a `RestSchedule` after earlier segments): arithmetic only.

    Raises:
        ValueError: the segment counts more batches than its run of the epoch has.
    """
    schedule = plan.with_topology(segment.world_size, segment.num_workers, segment.pool_size)
    counts = loader_resume(schedule.worker_samples(), segment.batch_size, segment.batches_consumed)
    if counts.overflow_batches:
        batches = segment.batches_consumed - counts.overflow_batches
        raise ValueError(
            f"Invalid batches_consumed ({segment.batches_consumed}). Expected at most {batches}, the batches "
            f"of the epoch on each rank with world_size={segment.world_size}, num_workers="
            f"{segment.num_workers} and batch_size={segment.batch_size}."
        )
    return counts.samples_consumed


def segment_consumed(plan: EpochPlan, epoch: int, segment: RunSegment) -> tuple[np.ndarray, np.ndarray]:
    """The (entry, virtual frame) of every sample the ranks consumed in `segment`, run on `plan`
    (see `consumed_counts`)."""
    counts = consumed_counts(plan, segment)
    schedule = plan.with_topology(segment.world_size, segment.num_workers, segment.pool_size)
    entries, frames = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for rank in range(segment.world_size):
        for worker, n in enumerate(counts):
            entry, frame = schedule.first_samples(epoch, rank, worker, n)
            entries.append(entry)
            frames.append(frame)
    return np.concatenate(entries), np.concatenate(frames)


def rest_after(base: Schedule, epoch: int, segments: Sequence[RunSegment]) -> Rest:
    """The frames of `epoch` left after `segments`, run one after another from its start.

    Args:
        base: the run's `Schedule` (its topology does not matter).
        epoch: the epoch.
        segments: the runs, in order.

    Raises:
        ValueError: a segment counts more batches than its run has.
    """
    entries = base.entries(epoch)
    rest = Rest.whole(entries.stops - entries.starts)
    plan: EpochPlan = base
    for segment in segments:
        entry, virtual = segment_consumed(plan, epoch, segment)
        rest = rest.without(entry, virtual)
        plan = RestSchedule(base, epoch, rest)
    return rest


class _MappedEmission:
    """An `Emission` over virtual entries whose frames come out as episode frames (see `RestSchedule`)."""

    def __init__(self, emission: Emission, rest: Rest, entries: Entries) -> None:
        self._emission, self._rest, self._entries = emission, rest, entries
        self._pieces: tuple[Piece, ...] | None = None

    def __len__(self) -> int:
        return len(self._emission)

    @property
    def admission_steps(self) -> np.ndarray:
        return self._emission.admission_steps

    @property
    def departure_steps(self) -> np.ndarray:
        return self._emission.departure_steps

    def __repr__(self) -> str:
        return f"Rest{self._emission!r}"

    def entry_of(self, piece: np.ndarray) -> np.ndarray:
        return self._emission.entry_of(piece)

    def _frames(self, piece: np.ndarray, virtual: np.ndarray) -> np.ndarray:
        entry = self._emission.entry_of(piece)
        return self._entries.starts[entry] + self._rest.frames[self._rest.offsets[entry] + virtual]

    def arrays(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        piece, virtual = self._emission.arrays(start, stop)
        return piece, self._frames(piece, virtual)

    @property
    def tail_lengths(self) -> np.ndarray:
        return self._emission.tail_lengths

    def tail(self, piece: int) -> np.ndarray:
        virtual = self._emission.tail(piece)
        return self._frames(np.full(virtual.size, piece), virtual)

    def steps(self, start: int = 0) -> Iterator[Step]:
        starts, offsets, frames = self._entries.starts, self._rest.offsets, self._rest.frames
        entry_of = self._emission.entry_of(np.arange(self._emission.admission_steps.size)).tolist()
        for step in self._emission.steps(start):
            entry = entry_of[step.piece]
            yield step._replace(frame=int(starts[entry]) + int(frames[offsets[entry] + step.frame]))

    def __iter__(self) -> Iterator[Step]:
        return self.steps()

    @property
    def pieces(self) -> tuple[Piece, ...]:
        """The pieces in episode frames: from the first to one past the last frame they emit."""
        if self._pieces is None:
            self._pieces = tuple(self.piece(i) for i in range(len(self._emission.pieces)))
        return self._pieces

    def piece(self, index: int) -> Piece:
        virtual = self._emission.piece(index)
        ends = self._frames(np.asarray([index, index]), np.asarray([virtual.start, virtual.stop - 1]))
        return Piece(virtual.episode, int(ends[0]), int(ends[1]) + 1)


class _BaseSetting(Generic[T]):
    """A read-only `RestSchedule` attribute that is its base `Schedule`'s attribute of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, rest: RestSchedule, owner: type | None = None) -> T:
        return cast(T, getattr(rest.base, self.name))


class RestSchedule:
    """The rest of one epoch on a topology: an `EpochPlan`, as `Schedule` is, for the stream and prewarm.

    Args:
        base: the run's `Schedule`, with the new topology (world size, workers, pool size).
        epoch: the epoch the rest belongs to.
        rest: its remaining frames (`rest_after`).
    """

    def __init__(self, base: Schedule, epoch: int, rest: Rest) -> None:
        self.base, self.epoch, self.rest = base, epoch, rest
        self._entries = base.entries(epoch)

    def __repr__(self) -> str:
        return f"RestSchedule(epoch={self.epoch}, frames={self.rest.total}, {self.base!r})"

    def with_topology(self, world_size: int, num_workers: int, pool_size: int) -> RestSchedule:
        return RestSchedule(
            self.base.with_topology(world_size, num_workers, pool_size), self.epoch, self.rest
        )

    # The run's own settings are the base schedule's; what depends on the frames left is defined below.
    lengths = _BaseSetting[tuple[int, ...]]()
    sources = _BaseSetting[tuple[int, ...] | None]()
    seed = _BaseSetting[int]()
    shuffle = _BaseSetting[bool]()
    world_size = _BaseSetting[int]()
    num_workers = _BaseSetting[int]()
    pool_size = _BaseSetting[int]()

    @property
    def epoch_frames(self) -> int:
        """Frames of the rest."""
        return self.rest.total

    @property
    def samples_per_rank(self) -> int:
        return samples_per_rank(self.rest.total, self.base.world_size)

    @property
    def dropped_frames(self) -> int:
        return self.rest.total - self.samples_per_rank * self.base.world_size

    def entries(self, epoch: int) -> Entries:
        return self.base.entries(epoch)

    def worker_samples(self) -> tuple[int, ...]:
        workers = self.base.num_workers
        return tuple(worker_share(self.samples_per_rank, workers, w) for w in range(max(1, workers)))

    def _check_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            raise ValueError(
                f"Invalid epoch ({epoch}) for the rest of epoch {self.epoch}. Expected {self.epoch}."
            )

    def virtual_emission(self, epoch: int, rank: int, worker: int) -> Emission:
        """The emission plan over the virtual entries (frames `0..n_i-1` of what remains of entry i)."""
        self._check_epoch(epoch)
        topology = Topology(self.base.world_size, rank, self.base.num_workers, worker)
        share = consumer_share(
            self.rest.lengths, seed=self.base.seed, epoch=epoch, shuffle=self.base.shuffle, topology=topology
        )
        stream = consumer_stream(self.base.seed, epoch, topology)
        words = stream.generate_state(4, dtype=np.uint32).tolist()
        return Emission(
            share,
            pool_size=self.base.pool_size,
            shuffle=self.base.shuffle,
            stream=np.random.SeedSequence([TAG_REST, *words, self.rest.total]),
        )

    def emission(self, epoch: int, rank: int, worker: int) -> _MappedEmission:
        """The emission plan of consumer (rank, worker), in episode frames."""
        return _MappedEmission(self.virtual_emission(epoch, rank, worker), self.rest, self._entries)

    def first_samples(self, epoch: int, rank: int, worker: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The entry of each of the first `count` samples of consumer (rank, worker) in `epoch`, and its
        virtual frame (counted in what remains of the entry)."""
        emission = self.virtual_emission(epoch, rank, worker)
        piece, frame = emission.arrays(0, count)
        return emission.entry_of(piece), frame

    def pieces(self, epoch: int, rank: int, worker: int) -> list[Piece]:
        return list(self.emission(epoch, rank, worker).pieces)
