"""The prewarm planner: each consumer's files in exactly the order its EpisodeStream asks the cache for
them (recorded from real runs), the merge across consumers, limits, and argument errors."""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import reader.runtime.pool
import reader.stream
from cache import NodeCache
from cache.ordered_fetch import FileRequest
from reader.format.catalog import EpisodeRef, VideoRef
from reader.plan.fetch import consumer_needs, node_needs, plan_needs, plan_prewarm
from reader.plan.resume.state import parse_state
from reader.schedule import Schedule
from reader.stream import EpisodeStream

# --- recorded runs ----------------------------------------------------------------------------------


class SyncExecutor:
    """Runs each task when it is submitted, so a piece's rows are read before its videos are asked for
    (the pool's row threads would otherwise race its video prefetches for the cache)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


@dataclass
class Recorder:
    """Every path a stream asks its NodeCache for, in order, and the DataLoader worker it pretends to be."""

    asked: list[str] = field(default_factory=list)
    worker: SimpleNamespace | None = None

    def run(self, stream: EpisodeStream, *, num_workers: int, worker: int) -> list[str]:
        """Iterate `stream` as worker `worker` of `num_workers`; the files it asked for, each once."""
        self.asked.clear()
        self.worker = SimpleNamespace(num_workers=num_workers, id=worker) if num_workers else None
        for _ in stream:
            pass
        return list(dict.fromkeys(self.asked))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    for name in ("fetch", "prefetch", "read_range", "hold"):
        original = getattr(NodeCache, name)

        def wrapper(self: NodeCache, rel: str, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            rec.asked.append(rel)
            return _original(self, rel, *args, **kwargs)

        monkeypatch.setattr(NodeCache, name, wrapper)
    monkeypatch.setattr(reader.runtime.pool, "ThreadPoolExecutor", SyncExecutor)
    monkeypatch.setattr(reader.stream, "get_worker_info", lambda: rec.worker)
    return rec


@pytest.mark.parametrize("num_workers", [1, 2], ids=lambda w: f"workers{w}")
@pytest.mark.parametrize("world_size", [1, 2], ids=lambda w: f"world{w}")
@pytest.mark.parametrize("layout", ["lrs", "v3"])
def test_each_consumer_asks_for_its_files_in_planned_order(
    recorder: Recorder,
    sample_ds: Path,
    sample_resharded_ds: Path,
    layout: str,
    world_size: int,
    num_workers: int,
) -> None:
    root = sample_resharded_ds if layout == "lrs" else sample_ds
    options = {"episode_pool_size": 2, "seed": 7, "world_size": world_size, "prefetch_episodes": 1}
    plan_stream = EpisodeStream(root, rank=0, **options)
    plan_stream.set_epoch(1)
    needs = plan_needs(plan_stream.plan, seed=7, epoch=1, num_workers=num_workers)
    refs = [plan_stream.catalog.episodes[e] for e in plan_stream.episodes]
    seen: set[str] = set()
    for rank in range(world_size):
        for worker in range(num_workers):
            # A fresh stream per consumer: each DataLoader worker is a process of its own (parquet
            # footers and row groups a process has read are not asked for again).
            stream = EpisodeStream(root, rank=rank, **options)
            stream.set_epoch(1)
            asked = recorder.run(stream, num_workers=num_workers, worker=worker)
            emission = plan_stream.schedule(num_workers).emission(1, rank, worker)
            planned = [n.path for n in consumer_needs(emission, refs, rank=rank, worker=worker)]
            assert asked == planned, f"rank {rank} worker {worker}"
            # In the merged plan, the files first needed by this consumer keep its order.
            mine = [n.path for n in needs.files if (n.rank, n.worker) == (rank, worker)]
            assert mine == [p for p in asked if p in set(mine)]
            seen.update(asked)
    assert [n.path for n in needs.files] and {n.path for n in needs.files} == seen
    assert len(needs.files) == len(seen)


# --- the merge, on synthetic episodes -----------------------------------------------------------------


def make_refs(lengths: list[int], *, data: Callable[[int], str], cameras: int = 1) -> list[EpisodeRef]:
    return [
        EpisodeRef(
            episode_index=e,
            length=n,
            dataset_from_index=sum(lengths[:e]),
            data_path=data(e),
            first_row=-1,
            videos=tuple(VideoRef(f"cam{c}", f"videos/cam{c}/ep{e}.mp4", 0.0) for c in range(cameras)),
        )
        for e, n in enumerate(lengths)
    ]


def own_file(e: int) -> str:
    return f"data/ep{e}.parquet"


def shared_file(e: int) -> str:
    return "data/all.parquet"


def paths(needs: Any) -> list[str]:
    return [n.path for n in needs.files]


def test_merge_pinned_by_step_then_rank() -> None:
    # Unshuffled, pool 1, two ranks of 2 episodes of 2 frames: each rank admits its 2nd episode at step 2.
    schedule = Schedule([2, 2, 2, 2], seed=0, shuffle=False, world_size=2, pool_size=1)
    refs = make_refs([2, 2, 2, 2], data=own_file)
    needs = node_needs(schedule, refs, epoch=0, ranks=[0, 1])
    assert paths(needs) == [
        "data/ep0.parquet", "videos/cam0/ep0.mp4",
        "data/ep2.parquet", "videos/cam0/ep2.mp4",
        "data/ep1.parquet", "videos/cam0/ep1.mp4",
        "data/ep3.parquet", "videos/cam0/ep3.mp4",
    ]  # fmt: skip
    assert [(n.step, n.rank, n.piece) for n in needs.files[::2]] == [
        (0, 0, 0),
        (0, 1, 0),
        (2, 0, 1),
        (2, 1, 1),
    ]
    shared = node_needs(schedule, make_refs([2, 2, 2, 2], data=shared_file), epoch=0, ranks=[1, 0])
    assert paths(shared) == [
        "data/all.parquet", "videos/cam0/ep0.mp4", "videos/cam0/ep2.mp4",
        "videos/cam0/ep1.mp4", "videos/cam0/ep3.mp4",
    ]  # fmt: skip
    assert needs.consumers == ((0, 0), (1, 0))


def test_only_this_nodes_ranks_are_planned() -> None:
    schedule = Schedule([2, 2, 2, 2], seed=0, shuffle=False, world_size=2, num_workers=2, pool_size=1)
    needs = node_needs(schedule, make_refs([2, 2, 2, 2], data=own_file), epoch=0, ranks=[1])
    assert paths(needs) == [
        "data/ep2.parquet",
        "videos/cam0/ep2.mp4",
        "data/ep3.parquet",
        "videos/cam0/ep3.mp4",
    ]
    assert needs.consumers == ((1, 0), (1, 1))


def random_case(seed: int) -> tuple[Schedule, list[EpisodeRef]]:
    rng = random.Random(seed)
    lengths = [rng.randint(1, 12) for _ in range(rng.randint(1, 14))]
    per_file = rng.randint(1, 4)
    refs = make_refs(lengths, data=lambda e: f"data/f{e // per_file}.parquet", cameras=rng.randint(0, 2))
    schedule = Schedule(
        lengths,
        seed=seed,
        shuffle=rng.random() < 0.8,
        world_size=rng.randint(1, 3),
        num_workers=rng.randint(0, 3),
        pool_size=rng.randint(1, 4),
    )
    return schedule, refs


@pytest.mark.parametrize("seed", range(30), ids=lambda s: f"seed{s}")
def test_merge_invariants(seed: int) -> None:
    schedule, refs = random_case(seed)
    ranks = list(range(schedule.world_size))
    needs = node_needs(schedule, refs, epoch=seed % 3, ranks=ranks)
    per_consumer = {
        (r, w): consumer_needs(schedule.emission(seed % 3, r, w), refs, rank=r, worker=w)
        for r, w in needs.consumers
    }
    everything = [n for found in per_consumer.values() for n in found]
    # Each needed file once, at the earliest (step, rank, worker, piece) any consumer needs it.
    assert len(paths(needs)) == len(set(paths(needs))) == len({n.path for n in everything})
    for need in needs.files:
        assert need.order == min(n.order for n in everything if n.path == need.path)
    assert [n.order for n in needs.files] == sorted(n.order for n in needs.files)
    # A consumer's own first needs keep its reader's order; a piece's data file comes before its videos.
    for (rank, worker), found in per_consumer.items():
        mine = [n.path for n in needs.files if (n.rank, n.worker) == (rank, worker)]
        assert mine == [n.path for n in found if n.path in set(mine)]
    for n in needs.files:
        if n.kind == "video":
            data = refs[n.episode_index].data_path
            assert paths(needs).index(data) < paths(needs).index(n.path)


@pytest.mark.parametrize("seed", range(10), ids=lambda s: f"seed{s}")
def test_whole_epoch_covers_every_selected_file(seed: int) -> None:
    schedule, refs = random_case(seed)
    needs = node_needs(schedule, refs, epoch=0, ranks=range(schedule.world_size))
    if schedule.samples_per_rank * schedule.world_size == schedule.total_frames:  # nothing dropped
        assert set(paths(needs)) == {p for r in refs for p in (r.data_path, *(v.path for v in r.videos))}
    assert len(needs.pieces) == sum(
        len(schedule.pieces(0, r, w))
        for r in range(schedule.world_size)
        for w in range(max(1, schedule.num_workers))
    )


# --- limits -------------------------------------------------------------------------------------------


def sized(needs: Any, size: Callable[[str], int]) -> dict[str, FileRequest]:
    return {n.path: FileRequest(n.path, size(n.path), None) for n in needs.files}


@pytest.fixture
def four() -> tuple[Schedule, list[EpisodeRef]]:
    """Two ranks, unshuffled, pool 1, four 2-frame episodes with one camera each."""
    return Schedule([2, 2, 2, 2], seed=0, shuffle=False, world_size=2, pool_size=1), make_refs(
        [2, 2, 2, 2], data=own_file
    )


def test_episodes_per_consumer_keeps_the_first_admissions(four: tuple[Schedule, list[EpisodeRef]]) -> None:
    schedule, refs = four
    needs = node_needs(schedule, refs, epoch=0, ranks=[0, 1], episodes_per_consumer=1)
    assert paths(needs) == [
        "data/ep0.parquet",
        "videos/cam0/ep0.mp4",
        "data/ep2.parquet",
        "videos/cam0/ep2.mp4",
    ]
    plan = plan_prewarm(needs, sized(needs, lambda p: 10))
    assert (plan.pieces, plan.episodes, plan.bytes, plan.limited_by) == (2, 2, 40, None)


@pytest.mark.parametrize(
    ("limits", "kept", "limited_by"),
    [
        ({}, 8, None),
        ({"max_bytes": 80}, 8, None),
        ({"max_bytes": 79}, 7, "max_bytes"),
        ({"max_bytes": 35}, 3, "max_bytes"),
        ({"cache_max_bytes": 50}, 5, "cache_max_bytes"),
        ({"max_bytes": 50, "cache_max_bytes": 35}, 3, "cache_max_bytes"),
        ({"max_bytes": 35, "cache_max_bytes": 50}, 3, "max_bytes"),
        ({"max_bytes": 5}, 0, "max_bytes"),
    ],
    ids=["none", "exact", "one-short", "max-bytes", "cache", "cache-smaller", "max-smaller", "nothing-fits"],
)
def test_byte_limits_cut_a_prefix(
    four: tuple[Schedule, list[EpisodeRef]], limits: dict[str, int], kept: int, limited_by: str | None
) -> None:
    schedule, refs = four
    needs = node_needs(schedule, refs, epoch=0, ranks=[0, 1])
    plan = plan_prewarm(needs, sized(needs, lambda p: 10), **limits)
    assert [f.need.path for f in plan.files] == paths(needs)[:kept]
    assert plan.bytes == 10 * kept and plan.limited_by == limited_by
    assert (plan.needed_files, plan.needed_bytes) == (8, 80)
    assert plan.pieces == kept // 2 and plan.requests() == [f.request for f in plan.files]


def test_a_limit_stops_at_the_first_file_that_does_not_fit(four: tuple[Schedule, list[EpisodeRef]]) -> None:
    schedule, refs = four
    needs = node_needs(schedule, refs, epoch=0, ranks=[0, 1])
    # The first data file is big: nothing after it is planned even though the small videos would fit.
    plan = plan_prewarm(needs, sized(needs, lambda p: 100 if p == "data/ep2.parquet" else 10), max_bytes=60)
    assert [f.need.path for f in plan.files] == ["data/ep0.parquet", "videos/cam0/ep0.mp4"]


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda s, r: node_needs(s, r, epoch=0, ranks=[]),
            r"Invalid ranks \(\[\]\)\. Expected distinct ranks in \[0, 2\)",
        ),
        (lambda s, r: node_needs(s, r, epoch=0, ranks=[0, 0]), r"Invalid ranks \(\[0, 0\]\)"),
        (lambda s, r: node_needs(s, r, epoch=0, ranks=[2]), r"Invalid ranks \(\[2\]\)"),
        (
            lambda s, r: node_needs(s, r, epoch=0, ranks=[0], episodes_per_consumer=0),
            r"Invalid episodes_per_consumer \(0\)\. Expected an integer >= 1\.",
        ),
        (lambda s, r: node_needs(s, r[:3], epoch=0, ranks=[0]), r"Invalid episode refs \(3 episodes\)"),
        (lambda s, r: node_needs(s, r, epoch=-1, ranks=[0]), r"Invalid epoch \(-1\)"),
        (
            lambda s, r: plan_prewarm(node_needs(s, r, epoch=0, ranks=[0]), {}),
            r"Invalid file requests: no size for data/ep0\.parquet\.",
        ),
        (
            lambda s, r: plan_prewarm(node_needs(s, r, epoch=0, ranks=[0]), {}, max_bytes=0),
            r"Invalid max_bytes \(0\)\. Expected an integer >= 1\.",
        ),
    ],
    ids=["no-ranks", "repeated-rank", "rank-outside", "limit", "refs", "epoch", "no-size", "max-bytes"],
)
def test_invalid_arguments_raise(
    four: tuple[Schedule, list[EpisodeRef]], call: Callable[..., Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        call(*four)


@pytest.mark.parametrize(
    ("world_size", "num_workers"), [(2, 2), (1, 1)], ids=["new-topology", "same-topology"]
)
def test_a_resumed_run_asks_for_the_files_prewarm_plans(
    recorder: Recorder, sample_resharded_ds: Path, world_size: int, num_workers: int
) -> None:
    options = {"episode_pool_size": 2, "seed": 7, "prefetch_episodes": 1}
    saved = EpisodeStream(sample_resharded_ds, rank=0, world_size=1, **options).state_dict(
        batches_consumed=20, batch_size=4, num_workers=1
    )
    plan_stream = EpisodeStream(sample_resharded_ds, rank=0, world_size=world_size, **options)
    resume, _ = parse_state(saved, plan_stream.identity, epoch=0)
    needs = plan_needs(plan_stream.plan, seed=7, epoch=0, num_workers=num_workers, resume=resume)
    whole = plan_needs(plan_stream.plan, seed=7, epoch=0, num_workers=num_workers)
    assert len(needs.pieces) < len(whole.pieces)  # what the stopped run read is not planned again
    seen: set[str] = set()
    for rank in range(world_size):
        for worker in range(num_workers):
            stream = EpisodeStream(sample_resharded_ds, rank=rank, world_size=world_size, **options)
            stream.load_state_dict(saved)
            asked = recorder.run(stream, num_workers=num_workers, worker=worker)
            mine = [n.path for n in needs.files if (n.rank, n.worker) == (rank, worker)]
            assert mine == [p for p in asked if p in set(mine)], f"rank {rank} worker {worker}"
            seen.update(asked)
    assert {n.path for n in needs.files} == seen
