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

import functools
import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from cache.checks import check_int

__all__ = [
    "Admission",
    "Emission",
    "Entries",
    "Piece",
    "Schedule",
    "Step",
    "Topology",
    "consumer_pieces",
    "consumer_stream",
    "dropped_frames",
    "epoch_order",
    "mixture_entries",
    "rank_range",
    "samples_per_rank",
    "worker_share",
]

# Domain tags keep the (seed, epoch) stream of the episode order apart from the consumers' streams.
_TAG_ORDER = 0x6F72
_TAG_CONSUMER = 0x636E
_TAG_MIXTURE = 0x6D78
_MAX_SEED = 2**64
_MAX_EPOCH = 2**32
_FEISTEL_ROUNDS = 4
_BLOCK_STEPS = 4096
# Consecutive frames a piece emits in a row (one per round); see `_run_frames`. Part of the order: a
# resume state is for one value (the state's version names it).
RUN_FRAMES = 8
_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_ODD = _U64(0xD6E8FEB86659FD93)


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


def _as_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
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
    words = _seed_words(seed, epoch)
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([_TAG_ORDER, *words])))
    return rng.permutation(n).astype(np.int64)


def _seed_words(seed: int, epoch: int) -> list[int]:
    """Fixed-width 32-bit words of (seed, epoch), so distinct inputs never alias in a SeedSequence."""
    seed = check_int("seed", seed, 0, _MAX_SEED)
    epoch = check_int("epoch", epoch, 0, _MAX_EPOCH)
    return [seed & 0xFFFFFFFF, seed >> 32, epoch]


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


def _cut(order: np.ndarray, lengths: np.ndarray, low: int, high: int) -> np.ndarray:
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


def _consumer_share(
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
    lengths = _as_lengths(lengths)
    order = epoch_order(lengths.size, seed=seed, epoch=epoch, shuffle=shuffle)
    rank_low, rank_high = rank_range(int(lengths.sum()), topology.world_size, topology.rank)
    rows = _cut(order, lengths, rank_low, rank_high)
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
    share = _consumer_share(lengths, seed=seed, epoch=epoch, shuffle=shuffle, topology=topology)
    return [Piece(*row) for row in share.rows.tolist()]


def _piece_rows(pieces: Sequence[Piece] | np.ndarray) -> np.ndarray:
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
    words = _seed_words(seed, epoch)
    return np.random.SeedSequence([_TAG_CONSUMER, *words, topology.rank, topology.worker])


# ---------------------------------------------------------------------------------------------------------
# Counter-based randomness: any round's order and any frame of a piece's permutation is computed directly
# from (key, counters), so a resume never replays earlier rounds and whole blocks vectorize.


def _mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: a bijective 64-bit mixer (uint64 arrays wrap, as intended)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _hash(key: np.uint64, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 64-bit pseudo-random value per (key, a, b), for 1-D int arrays a and b."""
    return _mix64(_mix64(key ^ (a.astype(_U64) * _GOLDEN)) + b.astype(_U64) * _ODD)


def _feistel(keys: np.ndarray, piece: np.ndarray, x: np.ndarray, half: np.ndarray) -> np.ndarray:
    """A keyed bijection of [0, 4**half) per piece (balanced Feistel network of `half`-bit halves)."""
    mask = (_U64(1) << half) - _U64(1)
    left, right = x >> half, x & mask
    for key in keys:
        left, right = right, left ^ (_hash(key, piece, right) & mask)
    return (left << half) | right


def _permute_within(keys: np.ndarray, piece: np.ndarray, t: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Element `t` of a pseudo-random permutation of `range(length)`, one permutation per piece.

    Cycle-walking: the Feistel bijection is over the smallest power of four >= length (< 4 * length), and
    out-of-range outputs are fed back in until they land in range; that restricts a bijection of the
    larger domain to a bijection of [0, length), on average in fewer than four passes.
    """
    piece = piece.astype(_U64)
    length = length.astype(_U64)
    half = ((np.frexp((length - _U64(1)).astype(np.float64))[1] + 1) // 2).astype(_U64)
    y = _feistel(keys, piece, t.astype(_U64), half)
    todo = np.flatnonzero(y >= length)
    while todo.size:
        y[todo] = _feistel(keys, piece[todo], y[todo], half[todo])
        todo = todo[y[todo] >= length[todo]]
    return y.astype(np.int64)


def _run_frames(
    keys: np.ndarray | None,
    share: Share,
    piece: np.ndarray,
    t: np.ndarray,
    in_order: np.ndarray | None = None,
) -> np.ndarray:
    """The frame (episode frame index) that each `piece` emits `t`-th: its share's frames in runs.

    The run sequence of a piece: the head first, then the whole runs in a pseudo-random order (one
    permutation per piece, from `keys`; None keeps them in order), each read front to back, then the
    tail. A decoder that follows a piece reads forward and seeks only where a run starts, while the
    piece's position in its episode still jumps at random every `RUN_FRAMES` samples.

    `in_order[p]` (default: all) is how many of that sequence's frames piece p emits in it; the rest
    come in a pseudo-random order. The consumer's last rounds use this (see `Emission`): once the pool
    can no longer be refilled it shrinks below a batch, and a piece read forward would put neighbouring
    frames of one episode into one batch.
    """
    if in_order is not None:
        prefix = in_order[piece]
        rest = np.flatnonzero(t >= prefix)
        if rest.size:
            t = t.copy()
            left = share.length[piece[rest]] - prefix[rest]
            t[rest] = prefix[rest] + _permute_within(
                keys[::-1] ^ _GOLDEN, piece[rest], t[rest] - prefix[rest], left
            )
    head, runs = share.head[piece], share.runs[piece]
    u = t - head
    frame = share.rows[piece, 1] + t  # the head
    inside = np.flatnonzero((u >= 0) & (u < runs * RUN_FRAMES))
    if inside.size:
        run = u[inside] // RUN_FRAMES
        if keys is not None:
            run = _permute_within(keys, piece[inside], run, runs[inside])
        frame[inside] = share.full0[piece[inside]] + run * share.stride + u[inside] % RUN_FRAMES
    tail = np.flatnonzero(u >= runs * RUN_FRAMES)
    frame[tail] = share.tail0[piece[tail]] + u[tail] - runs[tail] * RUN_FRAMES
    return frame


def _in_order_prefix(share: Share, first: np.ndarray) -> np.ndarray:
    """Frames of each piece's run sequence emitted in it: those of the runs begun before the last piece
    starts (from that round on, the pool is never refilled and only shrinks)."""
    drain = int(first[-1])
    emitted = np.clip(drain - first, 0, share.length)
    head, whole = share.head, share.head + share.runs * RUN_FRAMES
    runs_begun = -(-(emitted - head) // RUN_FRAMES)  # ceil: a run in progress is finished in order
    prefix = np.where(emitted <= head, np.where(emitted > 0, head, 0), head + runs_begun * RUN_FRAMES)
    return np.where(prefix >= whole, share.length, np.minimum(prefix, share.length))


def _round_major(key: np.uint64, rnd: np.ndarray, piece: np.ndarray) -> np.ndarray:
    """Indices sorting (round, piece) pairs by round, then by one random order of the pieces that holds
    for every round (a piece joining the pool takes its place in that order).

    A fixed cyclic order puts a piece's consecutive samples one round (the pool's size K) apart, less the
    pieces that left in between, so a batch smaller than the pool rarely holds two samples of one piece
    while the pool is full; a fresh order per round would put them anywhere from 1 to 2K - 1 samples
    apart. Ties of the 64-bit hash fall back to input order, which is piece order in every caller.
    """
    return np.lexsort((_hash(key, np.zeros_like(rnd), piece), rnd))


def _spans(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Concatenated `arange(first[i], first[i] + count[i])` for every i."""
    offsets = np.cumsum(count) - count
    return np.repeat(first - offsets, count) + np.arange(int(count.sum()), dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------
# The pool plan. Each round every piece in the pool emits exactly one frame, so which pieces are in the
# pool in which round does not depend on randomness: a piece admitted to start in round a, with L frames,
# is emitted in rounds a .. a+L-1 and leaves in round e = a+L-1; the pieces that start in round e+1 are
# the next ones in order, one per departure. Only the order inside a round is random.


def _start_rounds(lengths: np.ndarray, pool_size: int) -> np.ndarray:
    """The round each piece is first emitted in (non-decreasing in piece order). O(P log K)."""
    if pool_size == 1:
        return np.cumsum(lengths) - lengths
    sizes = lengths.tolist()
    starts = [0] * len(sizes)
    ends = [size - 1 for size in sizes[:pool_size]]
    heapq.heapify(ends)
    for j in range(pool_size, len(sizes)):
        # The earliest departure frees the slot; ties depart in the same round, so order among them is moot.
        starts[j] = ends[0] + 1
        heapq.heapreplace(ends, starts[j] + sizes[j] - 1)
    return np.asarray(starts, dtype=np.int64)


def _round_offsets(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Step at which each round begins (pool size summed over rounds); one extra entry, the total."""
    rounds = int(last.max()) + 1
    delta = np.bincount(first, minlength=rounds + 1) - np.bincount(last + 1, minlength=rounds + 1)
    return np.concatenate([[0], np.cumsum(np.cumsum(delta)[:rounds])]).astype(np.int64)


def _departure_steps(key: np.uint64, first: np.ndarray, last: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Step of each piece's last frame: its position in the random order of its last round.

    Only the rounds where some piece leaves are ordered, so the work is bounded by the consumer's samples.
    """
    rounds = np.unique(last)
    low = np.searchsorted(rounds, first, side="left")
    count = np.searchsorted(rounds, last, side="right") - low
    piece = np.repeat(np.arange(first.size, dtype=np.int64), count)
    rnd = rounds[_spans(low, count)]
    order = _round_major(key, rnd, piece)
    rnd, piece = rnd[order], piece[order]
    position = np.arange(rnd.size) - np.searchsorted(rnd, rnd, side="left")
    leaving = rnd == last[piece]
    departure = np.empty(first.size, dtype=np.int64)
    departure[piece[leaving]] = offsets[rnd[leaving]] + position[leaving]
    return departure


def _admission_steps(first: np.ndarray, last: np.ndarray, departure: np.ndarray) -> np.ndarray:
    """Step before which each piece is admitted: pieces starting in round r+1 take, in piece order, the
    slots freed by round r's departures in emission order, right after each departing frame."""
    admission = np.zeros(first.size, dtype=np.int64)
    later = np.flatnonzero(first > 0)
    by_step = np.argsort(departure, kind="stable")
    freed, freed_round = departure[by_step], last[by_step]
    nth = later - np.searchsorted(first, first[later], side="left")
    admission[later] = freed[np.searchsorted(freed_round, first[later] - 1, side="left") + nth] + 1
    return admission


class Step(NamedTuple):
    """One emitted sample of a consumer (a NamedTuple: one is built per sample, on the hot path).

    Attributes:
        step: Index of this sample in the consumer's epoch stream.
        piece: Index of its piece in `Emission.pieces`.
        frame: Frame index within the episode (`pieces[piece].start <= frame < pieces[piece].stop`).
        last: This is the piece's final frame; the piece leaves the pool after it.
        admitted: Pieces to admit into the pool before this sample, in admission order.
    """

    step: int
    piece: int
    frame: int
    last: bool
    admitted: tuple[int, ...]


@dataclass(frozen=True)
class Admission:
    """A piece and the step before which it enters the pool."""

    step: int
    index: int
    piece: Piece


class Emission:
    """The order in which one consumer emits the frames of its pieces, as a pure plan.

    Pieces are admitted in order into a pool of up to `pool_size` (K). Emission proceeds in rounds: each
    round visits every piece in the pool once, in one random cyclic order (see `_round_major`), and
    emits that piece's next frame: its frames come in runs of `RUN_FRAMES` consecutive frames, the runs
    in a random order (see `_run_frames`), so each piece is decoded forward. A piece that runs out
    leaves the pool and the next piece is admitted at once (it joins the next round), so the pool never
    exceeds K and consecutive samples come from distinct episodes. With `shuffle=False` the frames are emitted sequentially (pieces
    in order, frames in order) and piece j >= K is admitted right after piece j-K's last frame.

    Everything is derived from the pieces, K and the consumer's `SeedSequence`, so `steps(start=n)`
    resumes exactly after n samples by arithmetic, and round orders are computed block-wise with numpy.
    """

    def __init__(
        self,
        pieces: Sequence[Piece] | np.ndarray | Share,
        *,
        pool_size: int,
        shuffle: bool,
        stream: np.random.SeedSequence,
    ) -> None:
        if isinstance(pieces, Share):
            share = pieces
        else:  # pieces one consumer emits whole
            rows = _piece_rows(pieces)
            share = deal(rows, np.zeros(len(rows), dtype=np.int64), 1, 0)
        rows = share.rows
        self._share = share
        self.pool_size = check_int("pool_size", pool_size, 1)
        self.shuffle = bool(shuffle)
        keys = stream.generate_state(1 + _FEISTEL_ROUNDS, dtype=np.uint64)
        self._round_key, self._frame_keys = keys[0], keys[1:]
        self._episodes, self._starts, self._lengths = rows[:, 0], rows[:, 1], share.length
        self._offsets = np.concatenate([[0], np.cumsum(self._lengths)]).astype(np.int64)
        self.total = int(self._offsets[-1])
        if not rows.size:
            self._admission = self._departure = np.zeros(0, dtype=np.int64)
        elif self.shuffle:
            self._plan_rounds()
        else:
            self._departure = self._offsets[1:] - 1
            self._admission = np.concatenate(
                [np.zeros(min(self.pool_size, len(rows)), dtype=np.int64),
                 self._offsets[1 : max(1, len(rows) - self.pool_size + 1)]]
            )  # fmt: skip
        self._admission.setflags(write=False)
        self._departure.setflags(write=False)

    def _plan_rounds(self) -> None:
        self._first = _start_rounds(self._lengths, self.pool_size)
        self._in_order = _in_order_prefix(self._share, self._first)
        self._last = self._first + self._lengths - 1
        self._round_offsets = _round_offsets(self._first, self._last)
        self._departure = _departure_steps(self._round_key, self._first, self._last, self._round_offsets)
        self._admission = _admission_steps(self._first, self._last, self._departure)

    def __repr__(self) -> str:
        return f"Emission(pieces={self._starts.size}, total={self.total}, pool_size={self.pool_size}, shuffle={self.shuffle})"

    def __len__(self) -> int:
        return self.total

    def __iter__(self) -> Iterator[Step]:
        return self.steps()

    @functools.cached_property
    def pieces(self) -> tuple[Piece, ...]:
        """The consumer's pieces, in admission order."""
        return tuple(Piece(*row) for row in zip(*self._columns(), strict=True))

    def piece(self, index: int) -> Piece:
        """Piece `index` (as in `Step.piece`), built on demand."""
        return Piece(
            int(self._episodes[index]),
            int(self._starts[index]),
            int(self._share.rows[index, 2]),
        )

    def _columns(self) -> tuple[list[int], list[int], list[int]]:
        return self._episodes.tolist(), self._starts.tolist(), self._share.rows[:, 2].tolist()

    @property
    def lengths(self) -> np.ndarray:
        """Frames this consumer emits of each piece (its share of it; see `deal`)."""
        return self._lengths

    @property
    def admission_steps(self) -> np.ndarray:
        """Read-only: the step before which each piece is admitted (non-decreasing in piece order)."""
        return self._admission

    @property
    def departure_steps(self) -> np.ndarray:
        """Read-only: the step of each piece's last frame."""
        return self._departure

    def admission_order(self) -> list[Admission]:
        """The pieces in admission order (the piece order) with the step before which each is admitted."""
        return [
            Admission(int(s), i, p) for i, (s, p) in enumerate(zip(self._admission, self.pieces, strict=True))
        ]

    def pool_at(self, step: int) -> tuple[int, ...]:
        """Pieces in the pool just before `step` is emitted (admitted before or at it, not yet gone)."""
        step = self._check_start(step)
        return tuple(np.flatnonzero((self._admission <= step) & (self._departure >= step)).tolist())

    def arrays(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Piece indices and episode frame indices of steps [start, stop), as int64 arrays."""
        start = self._check_start(start)
        stop = self.total if stop is None else check_int("stop", stop, start, self.total + 1)
        pieces, frames = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for block_start, piece, frame, _ in self._blocks(start):
            if block_start >= stop:
                break
            pieces.append(piece[: stop - block_start])
            frames.append(frame[: stop - block_start])
        return np.concatenate(pieces), np.concatenate(frames)

    def steps(self, start: int = 0) -> Iterator[Step]:
        """Iterate the samples from step `start` on, exactly as an uninterrupted iteration would.

        A resumed iteration (start > 0) admits the whole pool it resumes into (`pool_at(start)`) before
        its first sample; after that, admissions are those of the uninterrupted iteration.
        """
        start = self._check_start(start)
        admission = self._admission.tolist()
        pending = int(np.searchsorted(self._admission, start, side="right"))
        admitted = self.pool_at(start)
        for block_start, piece, frame, last in self._blocks(start):
            rows = zip(piece.tolist(), frame.tolist(), last.tolist(), strict=True)
            for step, (p, f, end) in enumerate(rows, start=block_start):
                if step > start:
                    first = pending
                    while pending < len(admission) and admission[pending] == step:
                        pending += 1
                    admitted = tuple(range(first, pending))
                yield Step(step, p, f, end, admitted)

    def _check_start(self, start: int) -> int:
        return check_int(f"start step of a consumer with {self.total} samples", start, 0, self.total + 1)

    def _blocks(self, start: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """(first step, piece, frame, last) arrays of consecutive steps from `start` to the end."""
        if start >= self.total:
            return
        yield from (self._shuffled_blocks(start) if self.shuffle else self._sequential_blocks(start))

    def _sequential_blocks(self, start: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        for low in range(start, self.total, _BLOCK_STEPS):
            step = np.arange(low, min(low + _BLOCK_STEPS, self.total), dtype=np.int64)
            piece = np.searchsorted(self._offsets, step, side="right") - 1
            t = step - self._offsets[piece]
            yield low, piece, _run_frames(None, self._share, piece, t), t == self._lengths[piece] - 1

    def _shuffled_blocks(self, start: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        first, last, offsets = self._first, self._last, self._round_offsets
        rounds = offsets.size - 1
        r0 = int(np.searchsorted(offsets, start, side="right")) - 1
        skip = start - int(offsets[r0])
        active = np.flatnonzero((first <= r0) & (last >= r0))
        fresh = int(np.searchsorted(first, r0, side="right"))
        while r0 < rounds:
            target = int(np.searchsorted(offsets, offsets[r0] + _BLOCK_STEPS, side="right")) - 1
            r1 = min(rounds, max(r0 + 1, target))
            newcomers = int(np.searchsorted(first, r1 - 1, side="right"))
            pool = np.concatenate([active, np.arange(fresh, newcomers, dtype=np.int64)])
            piece, rnd = self._round_block(pool, r0, r1)
            frame = _run_frames(self._frame_keys, self._share, piece, rnd - first[piece], self._in_order)
            yield (
                int(offsets[r0]) + skip,
                piece[skip:],
                frame[skip:],
                (rnd == last[piece])[skip:],
            )
            active, fresh, r0, skip = pool[last[pool] >= r1], newcomers, r1, 0

    def _round_block(self, pool: np.ndarray, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
        """(piece, round) of every emission in rounds [r0, r1), in emission order, for these pieces."""
        low = np.maximum(self._first[pool], r0)
        count = np.minimum(self._last[pool], r1 - 1) - low + 1
        piece = np.repeat(pool, count)
        rnd = _spans(low, count)
        order = _round_major(self._round_key, rnd, piece)
        return piece[order], rnd[order]


# ---------------------------------------------------------------------------------------------------------
# Weighted mixtures: which frames of each source an epoch holds.


class Entries(NamedTuple):
    """An epoch's entries: contiguous frame ranges `[starts, stops)` of the selected episodes at
    `positions`. `epoch_order` permutes them and `Piece.episode` indexes them. Without weights every
    selected episode is one whole entry (`positions` is the identity)."""

    positions: np.ndarray
    starts: np.ndarray
    stops: np.ndarray


def check_weights(weights: Sequence[float], n_sources: int) -> tuple[float, ...]:
    """`weights` as floats, if there is one per source, each finite and >= 0, with a positive sum.

    Raises:
        ValueError: naming the problem.
    """
    chosen = list(weights)
    if len(chosen) != n_sources:
        raise ValueError(
            f"Invalid weights ({chosen}): {len(chosen)} given. Expected one per source ({n_sources})."
        )
    values = []
    for i, w in enumerate(chosen):
        if (
            isinstance(w, bool)
            or not isinstance(w, (int, float, np.integer, np.floating))
            or not np.isfinite(w)
            or w < 0
        ):
            raise ValueError(f"Invalid weight of source {i} ({w!r}). Expected a finite number >= 0.")
        values.append(float(w))
    if not sum(values) > 0:
        raise ValueError(f"Invalid weights ({chosen}): they sum to 0. Expected a positive sum.")
    return tuple(values)


def source_quotas(weights: Sequence[float], samples: int) -> list[int]:
    """Samples of each source in an epoch of `samples`: `samples * w / sum(w)`, rounded by largest
    remainder (ties to the lower source) so that they add up to `samples` exactly."""
    total = float(sum(weights))
    exact = [samples * w / total for w in weights]
    quotas = [int(np.floor(x)) for x in exact]
    rest = samples - sum(quotas)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in by_remainder[:rest]:
        quotas[i] += 1
    return quotas


def mixture_entries(
    lengths: Sequence[int] | np.ndarray,
    sources: Sequence[int] | np.ndarray,
    weights: Sequence[float],
    samples: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
) -> Entries:
    """The entries of `epoch` of a weighted mixture.

    A source of F selected frames with quota `q = k * F + r` (`source_quotas`) gives every selected
    episode k times (repeats, which `epoch_order` spreads over the epoch), plus r frames read off a ring:
    the source's selected episodes in one order seeded by (seed, s) (the selection order without
    `shuffle`), epoch e taking frames `[e * r, (e + 1) * r)` modulo F. So every frame comes k or k + 1
    times in an epoch, and the extra frames go round the whole source, a different part each epoch,
    every frame once per turn of the ring. The entries at a part's edges may be parts of episodes.

    Args:
        lengths: frames of each selected episode, all sources concatenated.
        sources: the source of each (non-decreasing).
        weights: one per source (`check_weights`).
        samples: samples of the epoch.
        seed, epoch, shuffle: as the schedule's.
    """
    lengths = _as_lengths(lengths)
    source_of = np.asarray(sources, dtype=np.int64)
    seed = check_int("seed", seed, 0, _MAX_SEED)
    epoch = check_int("epoch", epoch, 0, _MAX_EPOCH)
    positions, starts, stops = (
        [np.zeros(0, dtype=np.int64)],
        [np.zeros(0, dtype=np.int64)],
        [np.zeros(0, dtype=np.int64)],
    )
    for s, quota in enumerate(source_quotas(weights, samples)):
        members = np.flatnonzero(source_of == s)
        member_lengths = lengths[members]
        size = int(member_lengths.sum())
        if quota == 0:
            continue
        if size == 0:
            raise ValueError(f"Invalid mixture: source {s} has no frames selected but weight > 0.")
        whole, rest = divmod(quota, size)
        if whole:
            positions.append(np.tile(members, whole))
            starts.append(np.zeros(members.size * whole, dtype=np.int64))
            stops.append(np.tile(member_lengths, whole))
        if not rest:
            continue
        order = _ring_order(members.size, seed=seed, source=s, shuffle=shuffle)
        low = epoch * rest % size
        for a, b in ((low, min(size, low + rest)), (0, max(0, low + rest - size))):
            rows = _cut(order, member_lengths, a, b)
            positions.append(members[rows[:, 0]])
            starts.append(rows[:, 1])
            stops.append(rows[:, 2])
    return Entries(np.concatenate(positions), np.concatenate(starts), np.concatenate(stops))


def _ring_order(n: int, *, seed: int, source: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    words = [_TAG_MIXTURE, seed & 0xFFFFFFFF, seed >> 32, source]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words))).permutation(n).astype(np.int64)


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

    def emission(self, epoch: int, rank: int, worker: int) -> Emission:
        """The emission plan of consumer (rank, worker) in `epoch`."""
        topology = self.topology(rank, worker)
        return Emission(
            self._share(epoch, topology),
            pool_size=self.pool_size,
            shuffle=self.shuffle,
            stream=consumer_stream(self.seed, epoch, topology),
        )
