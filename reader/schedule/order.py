"""Steps 1-3 of an epoch's order (see `reader.schedule`): the episode order, the ranks' equal slices, and
each DataLoader worker's share of its rank's pieces. Pure functions of numpy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cache.arguments import check_int
from reader.schedule.keys import TAG_CONSUMER, TAG_ORDER, seed_words

# Consecutive frames a piece emits in a row (one per round); see `_run_frames`. Part of the order: a
# resume state is for one value (the state's version names it).
RUN_FRAMES = 8


@dataclass(frozen=True)
class Piece:
    """Frames [start, stop) of the episode at position `episode` of the selected episodes."""

    episode: int
    start: int
    stop: int

    def __post_init__(self) -> None:
        # One combined check: a consumer may hold hundreds of thousands of pieces.
        if not (type(self.episode) is type(self.start) is type(self.stop) is int) or not (
            self.episode >= 0 and 0 <= self.start < self.stop
        ):
            raise ValueError(
                f"Invalid piece of episode {self.episode!r} (frames {self.start!r}..{self.stop!r}). "
                "Expected ints with episode >= 0 and 0 <= start < stop."
            )

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Topology:
    """One consumer: a (rank, DataLoader worker) pair. `num_workers=0` means the main process only."""

    world_size: int = 1
    rank: int = 0
    num_workers: int = 0
    worker: int = 0

    def __post_init__(self) -> None:
        check_int("world_size", self.world_size, 1)
        check_int("rank", self.rank, 0, self.world_size)
        check_int("num_workers", self.num_workers, 0)
        check_int("worker", self.worker, 0, self.workers_per_rank)

    @property
    def workers_per_rank(self) -> int:
        """Consumers per rank: `max(1, num_workers)`."""
        return max(1, self.num_workers)

    @property
    def consumers(self) -> int:
        """Consumers in the whole job: `world_size * max(1, num_workers)`."""
        return self.world_size * self.workers_per_rank


def as_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Validate episode lengths (frames per selected episode) and return them as an int64 array."""
    array = np.asarray(lengths)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"Invalid episode lengths (shape {array.shape}, {array.dtype}). Expected 1-D ints.")
    bad = np.flatnonzero(array < 0)
    if bad.size:
        raise ValueError(f"Invalid length ({array[bad[0]]}) of episode at position {bad[0]}. Expected >= 0.")
    return array.astype(np.int64)


def epoch_order(n_episodes: int, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The order of the selected episodes in this epoch.

    Args:
        n_episodes: Number of selected episodes.
        seed: Run seed, in [0, 2**64).
        epoch: Epoch number, in [0, 2**32).
        shuffle: False returns the identity.

    Returns:
        An int64 permutation of `range(n_episodes)`, the same for the same (seed, epoch).
    """
    n = check_int("n_episodes", n_episodes, 0)
    words = seed_words(seed, epoch)
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([TAG_ORDER, *words])))
    return rng.permutation(n).astype(np.int64)


def samples_per_rank(total_frames: int, world_size: int) -> int:
    """Samples every rank yields per epoch: `total_frames // world_size`."""
    return check_int("total_frames", total_frames, 0) // check_int("world_size", world_size, 1)


def dropped_frames(total_frames: int, world_size: int) -> int:
    """Frames of the epoch's stream tail no rank yields: `total_frames % world_size` (< world_size)."""
    return check_int("total_frames", total_frames, 0) % check_int("world_size", world_size, 1)


def rank_range(total_frames: int, world_size: int, rank: int) -> tuple[int, int]:
    """Half-open range of the epoch's frame stream that `rank` yields: `[rank*S, (rank+1)*S)`."""
    size = samples_per_rank(total_frames, world_size)
    rank = check_int("rank", rank, 0, world_size)
    return rank * size, (rank + 1) * size


def worker_share(rank_samples: int, num_workers: int, worker: int) -> int:
    """Samples per epoch of one worker of a rank: its runs of the rank's frame stream (see `deal`)."""
    lanes = max(1, check_int("num_workers", num_workers, 0))
    worker = check_int("worker", worker, 0, lanes)
    full, rest = divmod(check_int("rank_samples", rank_samples, 0), lanes * RUN_FRAMES)
    return full * RUN_FRAMES + min(max(rest - worker * RUN_FRAMES, 0), RUN_FRAMES)


@dataclass(frozen=True)
class Share:
    """One consumer's share of its rank's pieces (arrays, one entry per piece it emits from).

    A piece's frames, in the order the consumer emits them when shuffling: the `head` frames from the
    piece's start (the consumer's first run, cut by the piece's start), then `runs` whole runs of
    `RUN_FRAMES` frames (run j starts at frame `full0 + j * stride`; shuffled, they come in a random
    order), then the `tail` frames from frame `tail0` (its last run, cut by the piece's end).
    """

    rows: np.ndarray  # (episode, start, stop) of the rank's pieces that this consumer emits from
    length: np.ndarray  # frames this consumer emits of each
    head: np.ndarray
    full0: np.ndarray
    runs: np.ndarray
    stride: int
    tail0: np.ndarray


def deal(rows: np.ndarray, offsets: np.ndarray, num_workers: int, worker: int) -> Share:
    """The share of `worker` in a rank's pieces `rows` (episode, start, stop) whose first frames sit at
    `offsets` in the rank's frame stream.

    With one worker every frame is its own, and the runs lie on each episode's grid of `RUN_FRAMES`
    (frame 0, 8, 16, ...). With W > 1, run k of the rank's stream (positions [k*R, (k+1)*R)) belongs to
    worker k % W; a run that straddles two pieces gives that worker the end of one and the start of the
    next.
    """
    lanes, size = max(1, num_workers), RUN_FRAMES
    start, stop = rows[:, 1], rows[:, 2]
    shift = offsets - start if lanes > 1 else np.zeros_like(start)  # a frame's position in the run grid
    x0, x1 = start + shift, stop + shift
    k0, k1 = x0 // size, (x1 - 1) // size
    first, last = k0 + (worker - k0) % lanes, k1 - (k1 - worker) % lanes  # this worker's first/last run
    cut_head = (first == k0) & (x0 > k0 * size)
    head = np.where(cut_head, np.minimum((k0 + 1) * size, x1) - x0, 0)
    first_full = np.where(cut_head, first + lanes, first)
    cut_tail = ((last + 1) * size > x1) & ~(cut_head & (last == k0))
    tail = np.where(cut_tail, x1 - last * size, 0)
    last_full = np.where(cut_tail, last - lanes, last)
    runs = np.where(last_full >= first_full, (last_full - first_full) // lanes + 1, 0)
    length = np.where(first <= last, head + runs * size + tail, 0)
    keep = length > 0
    return Share(
        rows=rows[keep],
        length=length[keep],
        head=head[keep],
        full0=(first_full * size - shift)[keep],
        runs=runs[keep],
        stride=lanes * size,
        tail0=(last * size - shift)[keep],
    )


def cut_pieces(order: np.ndarray, lengths: np.ndarray, low: int, high: int) -> np.ndarray:
    """Rows (episode, start, stop) of the pieces covering frames [low, high) of `lengths[order]` concatenated."""
    if low >= high:
        return np.zeros((0, 3), dtype=np.int64)
    ordered = lengths[order]
    ends = np.cumsum(ordered)
    first = int(np.searchsorted(ends, low, side="right"))
    last = int(np.searchsorted(ends, high, side="left"))
    span = np.arange(first, last + 1)
    begins = ends[span] - ordered[span]
    rows = np.stack(
        [order[span], np.maximum(begins, low) - begins, np.minimum(ends[span], high) - begins], axis=1
    )
    return rows[rows[:, 2] > rows[:, 1]]


def consumer_share(
    lengths: Sequence[int] | np.ndarray,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    topology: Topology,
    starts: np.ndarray | None = None,
) -> Share:
    """`starts`: the first frame of each entry in its episode (a weighted mixture's entries may begin
    mid-episode); the pieces then hold episode frames, not entry frames."""
    lengths = as_lengths(lengths)
    order = epoch_order(lengths.size, seed=seed, epoch=epoch, shuffle=shuffle)
    rank_low, rank_high = rank_range(int(lengths.sum()), topology.world_size, topology.rank)
    rows = cut_pieces(order, lengths, rank_low, rank_high)
    offsets = np.cumsum(rows[:, 2] - rows[:, 1]) - (rows[:, 2] - rows[:, 1])
    if starts is not None and rows.size:
        rows[:, 1:] += starts[rows[:, 0], None]
    return deal(rows, offsets, topology.num_workers, topology.worker)


def consumer_pieces(
    lengths: Sequence[int] | np.ndarray, *, seed: int, epoch: int, shuffle: bool, topology: Topology
) -> list[Piece]:
    """The pieces one consumer streams in this epoch, in admission order.

    Args:
        lengths: Frames of each selected episode; `Piece.episode` is a position in this sequence.
        seed: Run seed.
        epoch: Epoch number.
        shuffle: Shuffle the episode order (and, in `Emission`, the frames).
        topology: The consumer.

    Returns:
        The rank's pieces (contiguous frame ranges of one episode) that this consumer emits frames of;
        with several workers, each emits its runs of every piece (see `deal`).
    """
    share = consumer_share(lengths, seed=seed, epoch=epoch, shuffle=shuffle, topology=topology)
    return [Piece(*row) for row in share.rows.tolist()]


def piece_rows(pieces: Sequence[Piece] | np.ndarray) -> np.ndarray:
    """Pieces as validated int64 rows (episode, start, stop)."""
    if not isinstance(pieces, np.ndarray):
        return np.asarray([(p.episode, p.start, p.stop) for p in pieces], dtype=np.int64).reshape(-1, 3)
    if pieces.ndim != 2 or pieces.shape[1] != 3 or (pieces.size and pieces.dtype.kind not in "iu"):
        raise ValueError(f"Invalid piece rows (shape {pieces.shape}, {pieces.dtype}). Expected (n, 3) ints.")
    bad = np.flatnonzero((pieces[:, 0] < 0) | (pieces[:, 1] < 0) | (pieces[:, 2] <= pieces[:, 1]))
    if bad.size:
        raise ValueError(f"Invalid piece {bad[0]} ({pieces[bad[0]].tolist()}). Expected 0 <= start < stop.")
    return pieces.astype(np.int64)


def consumer_stream(seed: int, epoch: int, topology: Topology) -> np.random.SeedSequence:
    """The random stream of one consumer: derived from (seed, epoch, rank, worker) only."""
    words = seed_words(seed, epoch)
    return np.random.SeedSequence([TAG_CONSUMER, *words, topology.rank, topology.worker])
