"""Step 4 of an epoch's order (see `reader.schedule`): how one consumer's pool admits its pieces and emits
their frames, as a pure plan computed block-wise (counter-based randomness: any round's order and any
frame of a piece's permutation is computed from (key, counters), so a resume replays no earlier rounds)."""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from cache.arguments import check_int
from reader.schedule.keys import FEISTEL_ROUNDS, GOLDEN, hash64, permute_within
from reader.schedule.order import RUN_FRAMES, Piece, Share, deal, piece_rows

# Steps computed per block when an emission is walked or searched (bounds the arrays' size).
_BLOCK_STEPS = 4096


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
    if in_order is not None and keys is not None:
        prefix = in_order[piece]
        rest = np.flatnonzero(t >= prefix)
        if rest.size:
            t = t.copy()
            left = share.length[piece[rest]] - prefix[rest]
            t[rest] = prefix[rest] + permute_within(
                keys[::-1] ^ GOLDEN, piece[rest], t[rest] - prefix[rest], left
            )
    head, runs = share.head[piece], share.runs[piece]
    u = t - head
    frame = share.rows[piece, 1] + t  # the head
    inside = np.flatnonzero((u >= 0) & (u < runs * RUN_FRAMES))
    if inside.size:
        run = u[inside] // RUN_FRAMES
        if keys is not None:
            run = permute_within(keys, piece[inside], run, runs[inside])
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
    return np.lexsort((hash64(key, np.zeros_like(rnd), piece), rnd))


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


class EmissionPlan(Protocol):
    """What the pool and the fetch plan read of a consumer's emission plan: an `Emission`, or the rest of
    an epoch's (`reader.schedule.rest.RestSchedule.emission`), whose frames are episode frames too."""

    def __len__(self) -> int: ...

    @property
    def pieces(self) -> tuple[Piece, ...]: ...

    @property
    def admission_steps(self) -> np.ndarray: ...

    @property
    def departure_steps(self) -> np.ndarray: ...

    def entry_of(self, piece: np.ndarray) -> np.ndarray: ...

    def arrays(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def steps(self, start: int = 0) -> Iterator[Step]: ...

    @property
    def tail_lengths(self) -> np.ndarray: ...

    def tail(self, piece: int) -> np.ndarray: ...


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
            rows = piece_rows(pieces)
            share = deal(rows, np.zeros(len(rows), dtype=np.int64), 1, 0)
        rows = share.rows
        self._share = share
        self.pool_size = check_int("pool_size", pool_size, 1)
        self.shuffle = bool(shuffle)
        keys = stream.generate_state(1 + FEISTEL_ROUNDS, dtype=np.uint64)
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

    def entry_of(self, piece: np.ndarray) -> np.ndarray:
        """The entry (`Piece.episode`) of each of these piece indices."""
        return self._episodes[piece]

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

    @functools.cached_property
    def tail_lengths(self) -> np.ndarray:
        """Read-only: frames of each piece emitted in the random tail (see `_run_frames`'s `in_order`):
        once the pool is no longer refilled, one at a time in a pseudo-random order. 0 unshuffled."""
        if not self.shuffle or not self._lengths.size:
            tail = np.zeros(self._lengths.size, dtype=np.int64)
        else:
            tail = (self._lengths - self._in_order).astype(np.int64)
        tail.setflags(write=False)
        return tail

    def tail(self, piece: int) -> np.ndarray:
        """The frames piece `piece` emits in its random tail, in the order it emits them (empty if none).

        The plan's own frames, so a reader can decode them ahead in file order (`reader.decode.tail`).
        """
        count = int(self.tail_lengths[piece])
        t = np.arange(int(self._lengths[piece]) - count, int(self._lengths[piece]), dtype=np.int64)
        if not count:
            return t
        return _run_frames(self._frame_keys, self._share, np.full(count, piece), t, self._in_order)

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
