"""Elastic resume: a state saved on one topology continues its epoch on another.

The claim, checked by the schedule's arithmetic over seeds, topologies and cut points, then end to end
with real DataLoaders: the samples consumed before the stop plus those after are every frame of the
epoch exactly once, less fewer than the new world size; every new rank yields as many samples as the
others; the next epoch is the new topology's normal order; a second stop inside the rest resumes too.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

from reader import EpisodeStream, ResumableLoader, loader_state_of
from reader.errors import StateError
from reader.plan.resume.loader_math import batches_per_epoch, loader_resume
from reader.schedule import Schedule
from reader.schedule.rest import RestSchedule, RunSegment, rest_after, segment_consumed
from tests.reader.loader_job import job, torchrun

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
REPO = Path(__file__).resolve().parents[2]
TOTAL = 69  # frames of SMALL
NEW_TOPOLOGIES = [(1, 3, 5), (3, 1, 2), (4, 2, 7)]  # (world_size, num_workers, batch_size)


def _frames(
    schedule: Any, epoch: int, rank: int, worker: int, count: int | None = None
) -> list[tuple[int, int]]:
    emission = schedule.emission(epoch, rank, worker)
    piece, frame = emission.arrays(0, count)
    entries = schedule.entries(epoch)
    episodes = entries.positions[emission.entry_of(piece)]
    return list(zip(episodes.tolist(), frame.tolist(), strict=True))


def _run(schedule: Any, epoch: int, batch_size: int, batches: int | None) -> list[list[tuple[int, int]]]:
    """What each rank consumes in `batches` batches (all of its epoch when None)."""
    per_rank = []
    samples = schedule.worker_samples()
    counts = samples if batches is None else loader_resume(samples, batch_size, batches).samples_consumed
    for rank in range(schedule.world_size):
        per_rank.append([p for w, n in enumerate(counts) for p in _frames(schedule, epoch, rank, w, n)])
    return per_rank


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted-mixture"])
@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "sequential"])
def test_the_rest_on_any_topology_is_every_frame_once(weighted: bool, shuffle: bool) -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        lengths = tuple(int(n) for n in rng.integers(1, 50, size=17))
        mixture = {"sources": (0,) * 9 + (1,) * 8, "weights": (0.7, 0.3), "samples": 500} if weighted else {}
        base = Schedule(
            lengths, seed=seed, shuffle=shuffle, world_size=2, num_workers=2, pool_size=4, **mixture
        )
        universe = Counter(_frames_of_epoch(base, 1))
        last = batches_per_epoch(base.worker_samples(), 4)
        for cut in (0, 5, last - 1, last):
            old = RunSegment(2, 2, 4, cut, 4)
            before = [p for rank in _run(base, 1, 4, cut) for p in rank]
            for world, workers, batch in NEW_TOPOLOGIES:
                rest = RestSchedule(base.with_topology(world, workers, 8), 1, rest_after(base, 1, [old]))
                after = _run(rest, 1, batch, None)
                assert len({len(r) for r in after}) == 1  # every rank as many samples
                seen = Counter(before) + Counter(p for r in after for p in r)
                assert not seen - universe, "a frame consumed more often than the epoch has it"
                assert sum((universe - seen).values()) == rest.rest.total % world < world


def _frames_of_epoch(schedule: Schedule, epoch: int) -> list[tuple[int, int]]:
    """Every frame of the epoch's entries (a weighted mixture's repeats included)."""
    entries = schedule.entries(epoch)
    return [
        (int(p), f)
        for p, a, b in zip(entries.positions, entries.starts, entries.stops, strict=True)
        for f in range(int(a), int(b))
    ]


def test_a_second_stop_inside_the_rest_resumes_again() -> None:
    lengths = tuple(range(3, 40, 2))
    base = Schedule(lengths, seed=9, world_size=2, num_workers=2, pool_size=4)
    first = RunSegment(2, 2, 4, 11, 4)
    rest = RestSchedule(base.with_topology(3, 1, 5), 0, rest_after(base, 0, [first]))
    second = RunSegment(3, 1, 2, 9, 5)
    final = RestSchedule(base.with_topology(1, 2, 6), 0, rest_after(base, 0, [first, second]))
    seen = Counter(p for r in _run(base, 0, 4, 11) for p in r)
    seen += Counter(p for r in _run(rest, 0, 2, 9) for p in r)
    seen += Counter(p for r in _run(final, 0, 3, None) for p in r)
    assert max(seen.values()) == 1 and sum(lengths) - sum(seen.values()) < 3
    consumed, _ = segment_consumed(rest, 0, second)
    assert consumed.size == 3 * 9 * 2  # 3 ranks, 9 batches of 2


def test_a_segment_past_its_epoch_is_refused() -> None:
    base = Schedule((10, 10), seed=0, world_size=2, num_workers=1, pool_size=2)
    with pytest.raises(ValueError, match=r"Invalid batches_consumed \(6\)\. Expected at most 5"):
        rest_after(base, 0, [RunSegment(2, 1, 2, 6, 2)])


# --- end to end --------------------------------------------------------------------------------------


def _stream(root: Path, **kwargs: Any) -> EpisodeStream:
    return EpisodeStream(root, **{"seed": 4, "return_uint8": True, "batch_size": 4, **kwargs})


def _consume(
    root: Path, world: int, workers: int, batch: int, *, state: dict | None = None, stop: int | None = None
) -> tuple[list[tuple[int, int]], list[dict]]:
    """Each rank of a job (one DataLoader per rank, fork workers): the samples it consumed and its state."""
    samples, states = [], []
    for rank in range(world):
        stream = _stream(root, rank=rank, world_size=world, batch_size=batch)
        loader = ResumableLoader(DataLoader(stream, batch_size=batch, num_workers=workers))
        if state is not None:
            loader.load_state_dict(state)
        for k, batch_items in enumerate(loader):
            samples += [
                (int(e), int(f))
                for e, f in zip(batch_items["episode_index"], batch_items["frame_index"], strict=True)
            ]
            if stop is not None and k + 1 == stop:
                break
        states.append(loader.state_dict())
    return samples, states


@pytest.mark.parametrize("cut", [0, 3, 9], ids=["nothing", "mid-round", "last-batch"])
def test_a_job_resumes_on_other_topologies(small_lrs: Path, cut: int) -> None:
    if cut:
        before, states = _consume(small_lrs, 2, 2, 4, stop=cut)
    else:
        before = []
        states = [
            _stream(small_lrs, world_size=2, rank=r).state_dict(
                batches_consumed=0, batch_size=4, num_workers=2
            )
            for r in range(2)
        ]
    assert states[0] == states[1]  # every rank consumed as many batches: one state for all
    for world, workers, batch in NEW_TOPOLOGIES:
        after, _ = _consume(small_lrs, world, workers, batch, state=states[0])
        seen = Counter(before) + Counter(after)
        assert max(seen.values()) == 1
        assert TOTAL - len(seen) < world
        assert len(after) % world == 0


def test_the_state_of_a_resumed_run_carries_its_history(small_lrs: Path) -> None:
    _, states = _consume(small_lrs, 2, 2, 4, stop=3)
    resumed, again = _consume(small_lrs, 3, 1, 2, state=states[0], stop=2)
    assert again[0]["before"] == [
        {"world_size": 2, "num_workers": 2, "batch_size": 4, "batches_consumed": 3, "episode_pool_size": 16}
    ]
    first, _ = _consume(small_lrs, 2, 2, 4, stop=3)
    final, _ = _consume(small_lrs, 1, 0, 5, state=again[0])
    seen = Counter(first) + Counter(resumed) + Counter(final)
    assert max(seen.values()) == 1 and TOTAL - len(seen) < 3
    # The next epoch is the new topology's own order.
    stream = _stream(small_lrs, rank=0, world_size=1, batch_size=5)
    stream.load_state_dict(again[0])
    stream.set_epoch(1)
    fresh = _stream(small_lrs, rank=0, world_size=1, batch_size=5)
    fresh.set_epoch(1)
    pairs = lambda s: [(int(b["episode_index"]), int(b["frame_index"])) for b in s]  # noqa: E731
    assert pairs(stream) == pairs(fresh)


def test_a_trainer_dict_resumes_elastically(small_lrs: Path) -> None:
    before, _ = _consume(small_lrs, 2, 2, 4, stop=4)
    state = {"batches_consumed": 4, "batch_size": 4, "num_workers": 2, "world_size": 2, "epoch": 0, "seed": 4}
    after, _ = _consume(small_lrs, 3, 1, 3, state=state)
    seen = Counter(before) + Counter(after)
    assert max(seen.values()) == 1 and TOTAL - len(seen) < 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batches_consumed": 99}, r"Invalid batches_consumed \(99\)\. Expected at most"),
        ({"before": [{"world_size": 2}]}, r"Invalid state before\[0\] \(\['world_size'\]\)"),
        ({"before": "x"}, r"Invalid state before \(str\)"),
        (
            {
                "before": [
                    {
                        "world_size": 2,
                        "num_workers": 2,
                        "batch_size": 4,
                        "batches_consumed": 80,
                        "episode_pool_size": 16,
                    }
                ]
            },
            r"Invalid batches_consumed \(80\)",
        ),
        ({"world_size": 0}, r"Invalid state world_size \(0\)"),
        ({"shuffle": False}, r"Invalid state shuffle \(False\)"),
    ],
    ids=[
        "past-the-epoch",
        "truncated-history",
        "history-not-a-list",
        "history-past-the-epoch",
        "world-0",
        "shuffle",
    ],
)
def test_a_bad_state_is_refused_clearly(small_lrs: Path, change: dict, message: str) -> None:
    state = _stream(small_lrs, world_size=2, rank=0).state_dict(
        batches_consumed=2, batch_size=4, num_workers=2
    )
    with pytest.raises(StateError, match=message):
        _stream(small_lrs, world_size=3, rank=0).load_state_dict({**state, **change})


@pytest.mark.integration
def test_each_rank_of_a_new_world_resumes_in_its_own_process(small_lrs: Path, tmp_path: Path) -> None:
    before, states = _consume(small_lrs, 2, 2, 4, stop=4)
    spec = {
        "root": str(small_lrs),
        "num_workers": 1,
        "method": "spawn",
        "batch_size": 2,
        "seed": 4,
        "pool": 16,
    }
    after = []
    for rank in range(3):
        result = job(
            {**spec, "state": states[0]}, tmp_path, f"rank{rank}", {"RANK": str(rank), "WORLD_SIZE": "3"}
        )
        assert (result["rank"], result["world"]) == (rank, 3)
        after.append([tuple(p) for b in result["batches"] for p in b])
    assert len({len(a) for a in after}) == 1
    seen = Counter(before) + Counter(p for rank in after for p in rank)
    assert max(seen.values()) == 1 and TOTAL - len(seen) < 3


@pytest.mark.integration
def test_a_job_stopped_on_one_process_resumes_under_torchrun(small_lrs: Path, tmp_path: Path) -> None:
    before, states = _consume(small_lrs, 1, 2, 4, stop=5)
    spec = {"root": str(small_lrs), "num_workers": 2, "method": "spawn", "batch_size": 3, "seed": 4, "pool": 16,
            "state": states[0]}  # fmt: skip
    per_rank = torchrun(spec, tmp_path)
    after = [[tuple(p) for b in r["batches"] for p in b] for r in per_rank]
    assert len(after[0]) == len(after[1])
    seen = Counter(before) + Counter(p for rank in after for p in rank)
    assert max(seen.values()) == 1 and TOTAL - len(seen) < 2


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize(("old_workers", "new_workers"), [(2, 3), (0, 2)], ids=["2-to-3", "0-to-2"])
def test_a_stateful_dataloader_job_resumes_on_other_workers(
    small_lrs: Path, old_workers: int, new_workers: int
) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(_stream(small_lrs), batch_size=4, num_workers=old_workers)
    iterator = iter(loader)
    pairs = lambda b: [(int(e), int(f)) for e, f in zip(b["episode_index"], b["frame_index"], strict=True)]  # noqa: E731
    before = [p for _ in range(6) for p in pairs(next(iterator))]
    saved = json.loads(json.dumps(loader.state_dict()))
    del iterator
    stream = _stream(small_lrs)
    stream.load_state_dict(loader_state_of(saved, batch_size=4))
    fresh = StatefulDataLoader(stream, batch_size=5, num_workers=new_workers)
    after = [p for b in fresh for p in pairs(b)]
    seen = Counter(before) + Counter(after)
    assert max(seen.values()) == 1 and len(seen) == TOTAL
    with pytest.raises(StateError, match=r"Invalid StatefulDataLoader state \(no "):
        loader_state_of({"model": 1}, batch_size=4)
