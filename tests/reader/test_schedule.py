"""The epoch order (`reader.schedule`) and DataLoader resume arithmetic (`reader.plan.resume.loader_math`): pure, no I/O."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from reader.plan.resume.loader_math import LoaderResume, batches_per_epoch, batches_per_worker, loader_resume
from reader.schedule import (
    RUN_FRAMES,
    Emission,
    Piece,
    Schedule,
    Topology,
    consumer_pieces,
    consumer_stream,
    dropped_frames,
    epoch_order,
    rank_range,
    samples_per_rank,
    worker_share,
)

SEEDS = [0, 1, 7, 2**40 + 3]
POOL_SIZES = [1, 4, 16]
LENGTHS = {
    "mixed": [5, 1, 12, 3, 1, 7, 20, 2, 9, 4],
    "ones": [1] * 13,
    "tiny": [2, 1],
    "with-empty": [3, 0, 4, 1],
    "long": np.random.default_rng(5).integers(1, 60, 40).tolist(),
}


def emitted(emission: Emission, start: int = 0) -> list[tuple[int, int]]:
    """(episode position, frame) of every sample from `start` on."""
    pieces, frames = emission.arrays(start)
    episodes = np.asarray([p.episode for p in emission.pieces], dtype=np.int64)
    return list(zip(episodes[pieces].tolist(), frames.tolist(), strict=True))


def stream_of(lengths: Sequence[int], order: Iterable[int]) -> list[tuple[int, int]]:
    """The epoch's frame stream: every episode's frames, episodes in `order`."""
    return [(int(e), f) for e in order for f in range(lengths[e])]


def simulate_pool(emission: Emission) -> list[tuple[int, ...]]:
    """Replay the admission events; check pool and piece invariants; return the pool before each step."""
    pool: set[int] = set()
    admitted: list[int] = []
    pools = []
    for step in emission.steps():
        for index in step.admitted:
            assert index not in pool and index not in admitted, f"piece {index} admitted twice"
            pool.add(index)
            admitted.append(index)
        assert len(pool) <= emission.pool_size, f"pool of {len(pool)} at step {step.step}"
        assert step.piece in pool, f"piece {step.piece} emitted at step {step.step} before admission"
        piece = emission.pieces[step.piece]
        assert piece.start <= step.frame < piece.stop
        pools.append(tuple(sorted(pool)))
        if step.last:
            pool.remove(step.piece)
    assert admitted == list(range(len(emission.pieces)))
    assert not pool
    return pools


def check_rounds(emission: Emission, pools: list[tuple[int, ...]]) -> None:
    """While the pool is full, every K consecutive steps form a round: each pooled piece exactly once."""
    k = emission.pool_size
    pieces, _ = emission.arrays()
    full = next((i for i, pool in enumerate(pools) if len(pool) < k), len(pools))
    for low in range(0, full - k + 1, k):
        assert sorted(pieces[low : low + k].tolist()) == list(pools[low]), f"round at step {low}"


def check_epoch(schedule: Schedule, epoch: int) -> None:
    lengths = schedule.lengths
    ws, parts = schedule.world_size, max(1, schedule.num_workers)
    order = epoch_order(len(lengths), seed=schedule.seed, epoch=epoch, shuffle=schedule.shuffle)
    stream = stream_of(lengths, order)
    per_rank = len(stream) // ws
    assert schedule.samples_per_rank == per_rank
    assert schedule.dropped_frames == len(stream) - ws * per_rank < ws
    # Workers are dealt the rank's runs of RUN_FRAMES positions in turn.
    dealt = [[x for x in range(per_rank) if (x // RUN_FRAMES) % parts == w] for w in range(parts)]
    sizes = [len(positions) for positions in dealt]
    assert schedule.worker_samples() == tuple(sizes)
    assert max(sizes) - min(sizes) <= RUN_FRAMES
    seen: list[tuple[int, int]] = []
    for rank in range(ws):
        low = rank * per_rank
        for worker, size in enumerate(sizes):
            emission = schedule.emission(epoch, rank, worker)
            samples = emitted(emission)
            expected = [stream[low + x] for x in dealt[worker]]
            if schedule.shuffle:
                assert len(samples) == size and set(samples) == set(expected)
            else:
                assert samples == expected, "shuffle=False must stream sequentially"
            pools = simulate_pool(emission)
            if schedule.shuffle:
                check_rounds(emission, pools)
            seen += samples
    assert sorted(seen) == sorted(stream[: ws * per_rank]), "every frame exactly once but the dropped tail"


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3], ids=lambda w: f"workers{w}")
@pytest.mark.parametrize("world_size", [1, 2, 3, 4], ids=lambda w: f"world{w}")
@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
def test_every_frame_once_per_epoch(lengths: list[int], world_size: int, num_workers: int) -> None:
    for seed, pool_size, shuffle in itertools.product(SEEDS, POOL_SIZES, [True, False]):
        schedule = Schedule(lengths, seed=seed, shuffle=shuffle, world_size=world_size,
                            num_workers=num_workers, pool_size=pool_size)  # fmt: skip
        check_epoch(schedule, epoch=seed % 3)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_epoch_order_is_seeded_permutation(seed: int) -> None:
    order = epoch_order(50, seed=seed, epoch=0, shuffle=True)
    assert sorted(order.tolist()) == list(range(50))
    assert order.tolist() == epoch_order(50, seed=seed, epoch=0, shuffle=True).tolist()
    assert order.tolist() != epoch_order(50, seed=seed, epoch=1, shuffle=True).tolist()
    assert order.tolist() != epoch_order(50, seed=seed + 1, epoch=0, shuffle=True).tolist()
    assert epoch_order(50, seed=seed, epoch=3, shuffle=False).tolist() == list(range(50))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_same_seed_same_order_new_epoch_new_order(seed: int) -> None:
    def orders(epoch: int, run_seed: int = seed) -> list[list[tuple[int, int]]]:
        schedule = Schedule(LENGTHS["long"], seed=run_seed, world_size=2, num_workers=2, pool_size=4)
        return [emitted(schedule.emission(epoch, r, w)) for r in range(2) for w in range(2)]

    first = orders(0)
    assert first == orders(0)
    assert all(a != b for a, b in zip(first, orders(1), strict=True))
    assert all(a != b for a, b in zip(first, orders(0, seed + 1), strict=True))


def test_seed_and_epoch_never_alias() -> None:
    # Seeds wider than 32 bits are split into fixed words: (2**32 + 5, epoch 1) is not (5, 1) shifted.
    assert consumer_stream(2**32 + 5, 1, Topology()).entropy != consumer_stream(5, 1, Topology()).entropy
    assert (
        epoch_order(30, seed=2**32, epoch=0, shuffle=True).tolist()
        != epoch_order(30, seed=0, epoch=1, shuffle=True).tolist()
    )


CUTS = [
    # (world_size, rank, num_workers, worker) -> pieces of lengths [4, 3, 5] in order (shuffle=False).
    ((2, 0, 0, 0), [Piece(0, 0, 4), Piece(1, 0, 2)]),
    ((2, 1, 0, 0), [Piece(1, 2, 3), Piece(2, 0, 5)]),
    ((2, 1, 2, 0), [Piece(1, 2, 3), Piece(2, 0, 5)]),  # the rank's 6 frames are one run: worker 0's
    ((2, 1, 2, 1), []),
    ((5, 4, 0, 0), [Piece(2, 1, 3)]),
    ((1, 0, 3, 2), []),
]


@pytest.mark.parametrize("workers", [2, 3], ids=lambda w: f"workers{w}")
def test_workers_share_every_piece_of_their_rank(workers: int) -> None:
    lengths = [30, 17, 44, 9, 25]
    schedule = Schedule(lengths, seed=0, shuffle=False, num_workers=workers)
    rank_pieces = consumer_pieces(lengths, seed=0, epoch=0, shuffle=False, topology=Topology())
    for worker in range(workers):
        emission = schedule.emission(0, 0, worker)
        frames = emission.arrays()[1].tolist()
        # Every piece longer than the workers' runs together gives this worker a share of it, in runs.
        long = [p for p in rank_pieces if len(p) >= workers * RUN_FRAMES]
        assert set(long) <= set(emission.pieces)
        assert sum(emission.lengths.tolist()) == len(frames) == schedule.worker_samples()[worker]
    assert schedule.worker_samples() == tuple(worker_share(sum(lengths), workers, w) for w in range(workers))


@pytest.mark.parametrize(("topology", "pieces"), CUTS, ids=lambda v: str(v) if isinstance(v, tuple) else "")
def test_consumer_pieces_cut_at_boundaries(topology: tuple[int, int, int, int], pieces: list[Piece]) -> None:
    got = consumer_pieces([4, 3, 5], seed=0, epoch=0, shuffle=False, topology=Topology(*topology))
    assert got == pieces


def test_ranges_and_dropped_tail() -> None:
    assert [rank_range(10, 3, r) for r in range(3)] == [(0, 3), (3, 6), (6, 9)]
    assert samples_per_rank(10, 3) == 3 and dropped_frames(10, 3) == 1
    assert [worker_share(50, 3, w) for w in range(3)] == [18, 16, 16]  # runs 0,3,6 | 1,4 | 2,5 (+2)
    assert [worker_share(7, 3, w) for w in range(3)] == [7, 0, 0]
    assert worker_share(5, 0, 0) == 5


def test_total_smaller_than_consumers_gives_empty_consumers() -> None:
    none = Schedule([2, 1], seed=0, world_size=4, num_workers=2)
    assert (none.samples_per_rank, none.dropped_frames) == (0, 3)
    assert all(len(none.emission(0, r, w)) == 0 for r in range(4) for w in range(2))
    assert list(none.emission(0, 3, 1).steps()) == [] and none.emission(0, 0, 0).pool_at(0) == ()
    some = Schedule([2, 1], seed=0, world_size=2, num_workers=3)
    assert some.worker_samples() == (1, 0, 0) and some.dropped_frames == 1


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 16, 17, 100, 1025], ids=lambda n: f"len{n}")
@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_frames_of_a_piece_are_a_permutation(length: int, seed: int) -> None:
    # A second piece comes after: the first is emitted while the pool is still refilled, so in runs.
    emission = Emission([Piece(0, 3, 3 + length), Piece(1, 0, 5)], pool_size=1, shuffle=True,
                        stream=consumer_stream(seed, 0, Topology()))  # fmt: skip
    frames = emission.arrays()[1].tolist()[:length]
    assert sorted(frames) == list(range(3, 3 + length))
    # Runs on the episode's grid of RUN_FRAMES: the head [3, 8) first, then whole runs read forward.
    head = min(5, length)
    assert frames[:head] == list(range(3, 3 + head))
    runs = (length - head) // RUN_FRAMES
    for r in range(runs):
        run = frames[head + r * RUN_FRAMES : head + (r + 1) * RUN_FRAMES]
        assert run == list(range(run[0], run[0] + RUN_FRAMES)) and (run[0] - 8) % RUN_FRAMES == 0
    assert frames[head + runs * RUN_FRAMES :] == list(range(8 + runs * RUN_FRAMES, 3 + length))
    if runs >= 3:
        assert frames != sorted(frames)


def test_orders_look_uniform_across_seeds() -> None:
    # Deterministic seeds, loose bounds: catches a biased or stuck permutation, never flaky.
    def first_frame(seed: int) -> int:  # the first run of five whole runs
        stream = consumer_stream(seed, 0, Topology())
        pieces = [Piece(0, 0, 40), Piece(1, 0, 1)]
        return int(Emission(pieces, pool_size=1, shuffle=True, stream=stream).arrays()[1][0]) // 8

    def first_piece(seed: int) -> int:
        pieces = [Piece(i, 0, 3) for i in range(4)]
        stream = consumer_stream(seed, 0, Topology())
        return int(Emission(pieces, pool_size=4, shuffle=True, stream=stream).arrays()[0][0])

    frames = Counter(first_frame(seed) for seed in range(400))
    pieces = Counter(first_piece(seed) for seed in range(400))
    assert sorted(frames) == list(range(5)) and all(50 <= c <= 110 for c in frames.values()), frames
    assert sorted(pieces) == list(range(4)) and all(65 <= c <= 135 for c in pieces.values()), pieces


SKIP_CASES = {
    "mixed-k1": (LENGTHS["mixed"], 1, True),
    "mixed-k4": (LENGTHS["mixed"], 4, True),
    "ones-k4": (LENGTHS["ones"], 4, True),
    "long-k16": (LENGTHS["long"], 16, True),
    "long-k4-sequential": (LENGTHS["long"], 4, False),
}


@pytest.mark.integration
@pytest.mark.parametrize(("lengths", "pool_size", "shuffle"), SKIP_CASES.values(), ids=SKIP_CASES.keys())
def test_skip_replays_the_uninterrupted_sequence(lengths: list[int], pool_size: int, shuffle: bool) -> None:
    for seed in SEEDS[:2]:
        schedule = Schedule(
            lengths, seed=seed, shuffle=shuffle, world_size=2, num_workers=2, pool_size=pool_size
        )
        emission = schedule.emission(1, 1, 0)
        full = list(emission.steps())
        pools = simulate_pool(emission)
        for n in range(len(full) + 1):
            resumed = list(emission.steps(n))
            assert [s[:4] for s in resumed] == [s[:4] for s in full[n:]], f"skip({n})"
            assert [s.admitted for s in resumed[1:]] == [s.admitted for s in full[n + 1 :]]
            if n < len(full):
                assert resumed[0].admitted == emission.pool_at(n) == pools[n]
            pieces, frames = emission.arrays(n, min(n + 7, len(full)))
            assert list(zip(pieces.tolist(), frames.tolist(), strict=True)) == [
                s[1:3] for s in full[n : n + 7]
            ]


def test_skip_across_blocks_of_a_large_consumer() -> None:
    lengths = np.random.default_rng(1).integers(1, 400, 120).tolist()
    emission = Schedule(lengths, seed=3, pool_size=16).emission(2, 0, 0)
    pieces, frames = emission.arrays()
    assert emission.total > 3 * 4096
    for n in [1, 4095, 4096, 4097, 8191, 8192, 10_001, emission.total - 1, emission.total]:
        resumed_pieces, resumed_frames = emission.arrays(n)
        assert resumed_pieces.tolist() == pieces[n:].tolist(), f"skip({n})"
        assert resumed_frames.tolist() == frames[n:].tolist(), f"skip({n})"
        tail = list(itertools.islice(emission.steps(n), 50))
        assert [s.piece for s in tail] == pieces[n : n + 50].tolist()


def test_admission_order_and_steps() -> None:
    emission = Schedule(LENGTHS["mixed"], seed=0, pool_size=3).emission(0, 0, 0)
    admissions = emission.admission_order()
    assert [a.piece for a in admissions] == list(emission.pieces)
    assert [a.index for a in admissions] == list(range(len(emission.pieces)))
    steps = [a.step for a in admissions]
    assert steps[:3] == [0, 0, 0] and steps == sorted(steps)
    from_events = {i: s.step for s in emission.steps() for i in s.admitted}
    assert steps == [from_events[i] for i in range(len(steps))]
    first_emit = {}
    for s in emission.steps():
        first_emit.setdefault(s.piece, s.step)
    assert all(steps[i] <= first_emit[i] for i in first_emit)
    last_emit = {s.piece: s.step for s in emission.steps()}
    assert emission.departure_steps.tolist() == [last_emit[i] for i in range(len(steps))]


def test_sequential_admission_keeps_k_pieces_ahead() -> None:
    emission = Emission([Piece(0, 0, 3), Piece(1, 0, 1), Piece(2, 0, 4)], pool_size=2, shuffle=False,
                        stream=consumer_stream(0, 0, Topology()))  # fmt: skip
    got = [(s.piece, s.frame, s.last, s.admitted) for s in emission.steps()]
    assert got == [(0, 0, False, (0, 1)), (0, 1, False, ()), (0, 2, True, ()), (1, 0, True, (2,)),
                   (2, 0, False, ()), (2, 1, False, ()), (2, 2, False, ()), (2, 3, True, ())]  # fmt: skip


@pytest.mark.parametrize(("pool_size", "batch_size", "low", "high"), [
    (16, 16, 0.9, 1.0), (16, 8, 0.95, 1.0), (32, 16, 0.95, 1.0), (1, 8, 0.0, 0.3),
], ids=["k16-b16", "k16-b8", "k32-b16", "k1-b8"])  # fmt: skip
def test_distinct_episodes_per_batch(pool_size: int, batch_size: int, low: float, high: float) -> None:
    lengths = np.random.default_rng(2).integers(20, 80, 300).tolist()
    ratios = []
    for worker in range(2):
        emission = Schedule(lengths, seed=4, num_workers=2, pool_size=pool_size).emission(0, 0, worker)
        episodes = [ep for ep, _ in emitted(emission)]
        batches = [episodes[i : i + batch_size] for i in range(0, len(episodes), batch_size)]
        ratios += [len(set(b)) / len(b) for b in batches]
    ratio = float(np.mean(ratios))
    print(f"distinct episodes per batch / batch size, K={pool_size}, B={batch_size}: {ratio:.4f}")
    assert low <= ratio <= high


# ---------------------------------------------------------------------------------------------------------
# DataLoader resume arithmetic.


def round_robin(streams: Sequence[Sequence[object]], batch_size: int) -> list[list[object]]:
    """Batches in the order torch's DataLoader returns them: each worker batches its own stream; tasks
    cycle over workers from worker 0; a worker that ends is skipped from then on."""
    chunks = [iter([list(s[i : i + batch_size]) for i in range(0, len(s), batch_size)]) for s in streams]
    active = [True] * len(streams)
    batches = []
    for worker in itertools.cycle(range(len(streams))):
        if not any(active):
            return batches
        if not active[worker]:
            continue
        batch = next(chunks[worker], None)
        if batch is None:
            active[worker] = False
        else:
            batches.append(batch)
    return batches


def resumed_streams(streams: Sequence[Sequence[object]], resume: LoaderResume) -> list[list[object]]:
    physical = []
    for j in range(len(streams)):
        logical = resume.logical_worker(j)
        physical.append([] if logical is None else list(streams[logical][resume.samples_consumed[logical] :]))
    return physical


COUNTS = {
    "even": [6, 6, 6],
    "uneven": [0, 7, 3, 12],
    "one-more": [5, 4, 4],
    "single": [9],
    "empty": [0, 0],
}


@pytest.mark.parametrize("counts", COUNTS.values(), ids=COUNTS.keys())
@pytest.mark.parametrize("batch_size", [1, 2, 3, 4, 5], ids=lambda b: f"batch{b}")
def test_loader_resume_on_synthetic_counts(counts: list[int], batch_size: int) -> None:
    streams = [[(w, i) for i in range(n)] for w, n in enumerate(counts)]
    full = round_robin(streams, batch_size)
    total = batches_per_epoch(counts, batch_size)
    assert total == len(full)
    for k in range(total + 3):
        resume = loader_resume(counts, batch_size, k)
        resumed = round_robin(resumed_streams(streams, resume), batch_size)
        assert full == full[: min(k, total)] + resumed, f"k={k}"
        assert resume.overflow_batches == max(0, k - total)
        assert sum(resume.samples_consumed) == sum(len(b) for b in full[:k])


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3], ids=lambda w: f"workers{w}")
@pytest.mark.parametrize("batch_size", [1, 2, 3, 4, 5], ids=lambda b: f"batch{b}")
def test_loader_resume_on_the_schedule(num_workers: int, batch_size: int) -> None:
    schedule = Schedule(
        LENGTHS["mixed"] + [2, 11], seed=1, world_size=2, num_workers=num_workers, pool_size=4
    )
    emissions = [schedule.emission(3, 1, w) for w in range(max(1, num_workers))]
    streams = [emitted(e) for e in emissions]
    full = round_robin(streams, batch_size)
    total = batches_per_epoch(schedule.worker_samples(), batch_size)
    assert total == len(full)
    for k in sorted(k for k in {0, 1, total // 3, total // 2, total - 2, total - 1, total} if k >= 0):
        resume = loader_resume(schedule.worker_samples(), batch_size, k)
        physical = []
        for j in range(len(emissions)):
            logical = resume.logical_worker(j)
            start = None if logical is None else resume.samples_consumed[logical]
            physical.append([] if logical is None else emitted(emissions[logical], start))
        assert full == full[:k] + round_robin(physical, batch_size), f"k={k}"


def test_loader_resume_pinned() -> None:
    # Batches [0, 4, 2, 6]; order w1 w2 w3 | w1 w2 . ; 5 consumed -> next is w3, then w1 (w2 is done).
    assert loader_resume([0, 7, 3, 12], 2, 5) == LoaderResume((0, 4, 3, 2), (3, 1), 0)
    assert loader_resume([5], 2, 9) == LoaderResume((5,), (), 6)
    assert batches_per_worker([0, 7, 3, 12], 2) == (0, 4, 2, 6)
    assert loader_resume([13, 12], 4, 6).logical_worker(1) is None


class ScheduleInts(IterableDataset):
    """A tiny stream over a schedule: one int per sample (episode * 1000 + frame), resumable."""

    def __init__(self, schedule: Schedule, resume: LoaderResume | None = None) -> None:
        self.schedule = schedule
        self.resume = resume

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        physical = 0 if info is None else info.id
        logical = physical if self.resume is None else self.resume.logical_worker(physical)
        if logical is None:
            return
        start = 0 if self.resume is None else self.resume.samples_consumed[logical]
        emission = self.schedule.emission(0, 0, logical)
        for step in emission.steps(start):
            yield emission.piece(step.piece).episode * 1000 + step.frame


def test_real_dataloader_matches_the_model() -> None:
    schedule = Schedule([7, 3, 9, 6], seed=2, num_workers=2, pool_size=2)
    assert schedule.worker_samples() == (16, 9)  # batches of 4: (4, 3), so worker 0 outlives worker 1

    def run(resume: LoaderResume | None) -> list[list[int]]:
        loader = DataLoader(ScheduleInts(schedule, resume), batch_size=4, num_workers=2)
        return [batch.tolist() for batch in loader]

    full = run(None)
    streams = [[e * 1000 + f for e, f in emitted(schedule.emission(0, 0, w))] for w in range(2)]
    assert full == round_robin(streams, 4)
    for k in [0, 3, 6]:
        resume = loader_resume(schedule.worker_samples(), 4, k)
        assert full == full[:k] + run(resume), f"k={k}"
    assert torch.utils.data.get_worker_info() is None


INVALID = {
    "rank": (
        lambda: Topology(world_size=2, rank=2),
        r"Invalid rank \(2\)\. Expected an integer in \[0, 2\)\.",
    ),
    "worker": (
        lambda: Topology(num_workers=2, worker=2),
        r"Invalid worker \(2\)\. Expected an integer in \[0, 2\)\.",
    ),
    "length": (
        lambda: Schedule([3, -1], seed=0),
        r"Invalid length \(-1\) of episode at position 1\. Expected >= 0\.",
    ),
    "seed": (
        lambda: Schedule([3], seed=-1),
        r"Invalid seed \(-1\)\. Expected an integer in \[0, 18446744073709551616\)",
    ),
    "pool-size": (
        lambda: Schedule([3], seed=0, pool_size=0),
        r"Invalid pool_size \(0\)\. Expected an integer >= 1\.",
    ),
    "epoch": (lambda: epoch_order(3, seed=0, epoch=2**32, shuffle=True), r"Invalid epoch \(4294967296\)"),
    "empty-piece": (lambda: Piece(1, 4, 4), r"Invalid piece of episode 1 \(frames 4\.\.4\)\. Expected ints"),
    "float-piece": (lambda: Piece(1, 0, 2.0), r"Invalid piece of episode 1 \(frames 0\.\.2\.0\)"),
    "piece-rows": (
        lambda: Emission(
            np.array([[0, 0, 2], [1, 3, 1]]),
            pool_size=1,
            shuffle=True,
            stream=consumer_stream(0, 0, Topology()),
        ),
        r"Invalid piece 1 \(\[1, 3, 1\]\)\. Expected 0 <= start < stop\.",
    ),
    "start": (
        lambda: next(Schedule([3], seed=0).emission(0, 0, 0).steps(4)),
        r"Invalid start step of a consumer with 3 samples \(4\)\. Expected an integer in \[0, 4\)\.",
    ),
    "no-workers": (
        lambda: loader_resume([], 2, 0),
        r"Invalid per_worker_samples \(\[\]\)\. Expected one count per worker",
    ),
    "batch-size": (
        lambda: loader_resume([3], 0, 0),
        r"Invalid batch_size \(0\)\. Expected an integer >= 1\.",
    ),
    "batches": (
        lambda: loader_resume([3], 2, -1),
        r"Invalid batches_consumed \(-1\)\. Expected an integer >= 0\.",
    ),
}


@pytest.mark.parametrize(("call", "message"), INVALID.values(), ids=INVALID.keys())
def test_invalid_input_is_named(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_a_full_pool_repeats_a_piece_only_after_a_whole_round(seed: int) -> None:
    # Equal lengths: the pool stays full, so the cyclic order puts every piece exactly K samples apart.
    emission = Emission([Piece(i, 0, 24) for i in range(8)], pool_size=8, shuffle=True,
                        stream=consumer_stream(seed, 0, Topology()))  # fmt: skip
    pieces = emission.arrays()[0].tolist()
    assert all(pieces[i] == pieces[i + 8] for i in range(len(pieces) - 8))
    assert all(len(set(pieces[i : i + 8])) == 8 for i in range(len(pieces) - 7))
    # Mixed lengths: pieces come and go, and still no piece repeats within half a pool.
    lengths = np.random.default_rng(seed % 2**32).integers(20, 80, 60).tolist()
    pieces = Schedule(lengths, seed=seed, pool_size=16).emission(0, 0, 0).arrays()[0].tolist()
    last: dict[int, int] = {}
    gaps = []
    for step, piece in enumerate(pieces[: len(pieces) - 200]):  # the tail drains the pool
        if piece in last:
            gaps.append(step - last[piece])
        last[piece] = step
    assert min(gaps) >= 8 and np.median(gaps) == 16


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_the_last_rounds_emit_what_is_left_at_random(seed: int) -> None:
    # Once the last piece has joined, the pool only shrinks: frames left then come in a random order,
    # so a small pool does not put neighbouring frames of one episode into one batch.
    lengths = [64] * 6
    emission = Emission([Piece(i, 0, n) for i, n in enumerate(lengths)], pool_size=4, shuffle=True,
                        stream=consumer_stream(seed, 0, Topology()))  # fmt: skip
    pieces, frames = emission.arrays()
    last = [f for p, f in zip(pieces.tolist(), frames.tolist(), strict=True) if p == 5]
    assert sorted(last) == list(range(64))
    steps = sum(1 for a, b in zip(last, last[1:], strict=False) if b == a + 1)
    assert steps < 16, last  # read forward it would be 56 of 63
    first = [f for p, f in zip(pieces.tolist(), frames.tolist(), strict=True) if p == 0]
    assert sum(1 for a, b in zip(first, first[1:], strict=False) if b == a + 1) >= 56  # 8 runs of 8
