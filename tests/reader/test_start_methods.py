"""Any process model: the stream pickles, opens nothing before it iterates, and gives the same samples,
exactly once, and the same resume under fork, spawn and forkserver workers, in new processes and under
torchrun with two ranks."""

from __future__ import annotations

import pickle
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from reader import EpisodeStream
from tests.reader.loader_job import flip, job, torchrun
from tests.servers import RangeServer

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
REPO = Path(__file__).resolve().parents[2]
TOTAL = 69  # frames of SMALL
DELTAS = {"observation.images.cam0": [-1 / 30, 0.0], "action": [0.0, 1 / 30]}


def stream(root: Any, **kwargs: Any) -> EpisodeStream:
    options = {"seed": 4, "episode_pool_size": 4, "return_uint8": True, "image_transforms": flip}
    return EpisodeStream(root, **{**options, **kwargs})


def pairs_of(loader: DataLoader) -> list[list[tuple[int, int]]]:
    return [
        [(int(e), int(f)) for e, f in zip(b["episode_index"], b["frame_index"], strict=True)] for b in loader
    ]


def planned_batches(ds: EpisodeStream, *, batch_size: int, num_workers: int) -> list[list[tuple[int, int]]]:
    """The batches the schedule plans (a pure function): each worker batches its own samples, and the
    DataLoader takes a batch from each worker in turn, skipping those that have run out."""
    schedule = ds.schedule(num_workers)
    chunks = []
    for worker in range(max(1, num_workers)):
        emission = schedule.emission(0, ds.rank, worker)
        pieces, frames = emission.arrays()
        episodes = [ds.episodes[emission.piece(p).episode] for p in pieces.tolist()]
        pairs = list(zip(episodes, frames.tolist(), strict=True))
        chunks.append([pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size)])
    return [c[k] for k in range(max(len(c) for c in chunks)) for c in chunks if k < len(c)]


def test_a_stream_pickles_and_opens_nothing_until_it_iterates(small_lrs: Path) -> None:
    def threads() -> set[threading.Thread]:  # earlier tests' streams may hold theirs: only new ones count
        return {t for t in threading.enumerate() if t.name.startswith("lrs-")}

    with RangeServer(small_lrs) as server:
        for source in (small_lrs, server.url):
            before = threads()
            ds = stream(source, delta_timestamps=DELTAS)
            assert ds._process.peek() is None
            assert not threads() - before
            copy = pickle.loads(pickle.dumps(ds))
            assert copy._process.peek() is None and copy.options == ds.options
            assert [int(i["index"]) for i in copy] == [int(i["index"]) for i in ds]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("method", "num_workers"),
    [("fork", 1), ("fork", 3), ("spawn", 1), ("spawn", 3), ("forkserver", 1), ("forkserver", 3)],
    ids=lambda v: str(v),
)
def test_every_start_method_gives_the_same_samples_exactly_once(
    small_lrs: Path, method: str, num_workers: int
) -> None:
    ds = stream(small_lrs, delta_timestamps=DELTAS)
    got = pairs_of(DataLoader(ds, batch_size=4, num_workers=num_workers, multiprocessing_context=method))
    assert got == planned_batches(ds, batch_size=4, num_workers=num_workers)
    seen = Counter(p for batch in got for p in batch)
    assert len(seen) == TOTAL and max(seen.values()) == 1


@pytest.mark.integration
def test_resume_in_a_new_process_with_spawn_workers(small_lrs: Path, tmp_path: Path) -> None:
    spec = {"root": str(small_lrs), "num_workers": 3, "method": "spawn", "batch_size": 4, "seed": 4}
    whole = pairs_of(DataLoader(stream(small_lrs), batch_size=4, num_workers=3))
    first = job({**spec, "stop_after": 7}, tmp_path, "first")
    assert first["state"]["batches_consumed"] == 7
    rest = job({**spec, "state": first["state"], "method": "forkserver"}, tmp_path, "rest")
    assert [[tuple(p) for p in b] for b in first["batches"] + rest["batches"]] == whole


@pytest.mark.integration
def test_torchrun_two_ranks_with_spawn_workers(small_lrs: Path, tmp_path: Path) -> None:
    spec = {"root": str(small_lrs), "num_workers": 2, "method": "spawn", "batch_size": 4}
    per_rank = torchrun(spec, tmp_path)
    assert [(r["rank"], r["world"]) for r in per_rank] == [(0, 2), (1, 2)]
    samples = [[tuple(p) for b in r["batches"] for p in b] for r in per_rank]
    assert len(samples[0]) == len(samples[1]) == TOTAL // 2
    seen = Counter(p for s in samples for p in s)
    assert max(seen.values()) == 1 and len(seen) == TOTAL - TOTAL % 2
    for rank in range(2):  # the same order a single process computes for that rank
        ds = stream(small_lrs, rank=rank, world_size=2, seed=0, image_transforms=None)
        assert per_rank[rank]["batches"] == [
            [list(p) for p in b] for b in pairs_of(DataLoader(ds, batch_size=4, num_workers=2))
        ]
