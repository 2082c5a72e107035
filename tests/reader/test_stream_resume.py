"""Exact resume: uninterrupted == consumed prefix + resumed, in order, through real DataLoaders (and
torchdata's StatefulDataLoader); skipping reads and decodes nothing; foreign states are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from reader import EpisodeStream, ResumableLoader
from reader.errors import StateError
from tests.servers import RangeServer

Pair = tuple[int, int]
Batches = list[list[Pair]]
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
B = 3


def pairs(batch: dict[str, Any]) -> list[Pair]:
    return [(int(e), int(f)) for e, f in zip(batch["episode_index"], batch["frame_index"], strict=True)]


def stream(root: Path, **kwargs: Any) -> EpisodeStream:
    return EpisodeStream(root, return_uint8=True, **{"seed": 5, "episode_pool_size": 4, **kwargs})


def run(
    root: Path, *, num_workers: int, epochs: list[int], state: dict | None = None, **kwargs: Any
) -> Batches:
    """A fresh stream and DataLoader per call, as a restarted trainer has; set_epoch before each epoch."""
    ds = stream(root, **kwargs)
    if state is not None:
        ds.load_state_dict(json.loads(json.dumps(state)))
    out: Batches = []
    for epoch in epochs:
        ds.set_epoch(epoch)
        out += [pairs(b) for b in DataLoader(ds, batch_size=B, num_workers=num_workers)]
    return out


@pytest.mark.integration
@pytest.mark.parametrize("pool", [1, 4], ids=lambda k: f"pool{k}")
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3], ids=lambda w: f"workers{w}")
def test_resume_continues_exactly_where_the_trainer_stopped(
    small_lrs: Path, num_workers: int, pool: int
) -> None:
    # The uninterrupted run, two epochs, recording what ResumableLoader says after every batch.
    ds = stream(small_lrs, episode_pool_size=pool)
    loader = ResumableLoader(DataLoader(ds, batch_size=B, num_workers=num_workers))
    uninterrupted: Batches = []
    states: list[dict] = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        states.append(loader.state_dict())
        for batch in loader:
            uninterrupted.append(pairs(batch))
            states.append(loader.state_dict())
    per_epoch = len(uninterrupted) // 2
    assert len(loader) == per_epoch
    assert uninterrupted[:per_epoch] != uninterrupted[per_epoch:]
    # states[i] was taken after i batches of epoch 0 (i <= per_epoch), then after the start of epoch 1.
    cuts = {0, 1, per_epoch // 2, per_epoch - 1, per_epoch}
    for k in sorted(cuts):
        state = states[k]
        assert {k: state[k] for k in ("epoch", "batches_consumed", "batch_size", "num_workers")} == {
            "epoch": 0, "batches_consumed": k, "batch_size": B, "num_workers": num_workers,
        }  # fmt: skip
        resumed = run(small_lrs, num_workers=num_workers, epochs=[0, 1], state=state, episode_pool_size=pool)
        assert uninterrupted[:k] + resumed == uninterrupted, f"cut at batch {k} of epoch 0"
    k = per_epoch // 3
    state = states[per_epoch + 1 + k]
    assert (state["epoch"], state["batches_consumed"]) == (1, k)
    resumed = run(small_lrs, num_workers=num_workers, epochs=[1], state=state, episode_pool_size=pool)
    assert uninterrupted[: per_epoch + k] + resumed == uninterrupted, f"cut at batch {k} of epoch 1"


def test_a_hand_written_trainer_state_resumes_too(small_lrs: Path) -> None:
    whole = run(small_lrs, num_workers=2, epochs=[3])
    state = {"batches_consumed": 5, "batch_size": B, "num_workers": 2, "epoch": 3}
    assert run(small_lrs, num_workers=2, epochs=[3], state=state) == whole[5:]


def test_resumable_loader_counts_from_a_loaded_state(small_lrs: Path) -> None:
    ds = stream(small_lrs)
    loader = ResumableLoader(DataLoader(ds, batch_size=B, num_workers=0))
    loader.load_state_dict({"batches_consumed": 4, "batch_size": B, "num_workers": 0})
    assert loader.batches == 4
    iterator = iter(loader)
    next(iterator)
    assert loader.state_dict()["batches_consumed"] == 5
    iterator.close()


def test_the_state_is_small_json_and_names_the_run(small_lrs: Path) -> None:
    ds = stream(small_lrs, world_size=2, rank=1)
    state = ds.state_dict(batches_consumed=2, batch_size=B, num_workers=1)
    assert json.loads(json.dumps(state)) == state
    assert state == {
        "version": 2,
        "fingerprint": ds.catalog.fingerprint,
        "episodes": state["episodes"],
        "episode_pool_size": 4,
        "world_size": 2,
        "shuffle": True,
        "seed": 5,
        "epoch": 0,
        "batches_consumed": 2,
        "batch_size": B,
        "num_workers": 1,
    }


def test_skipping_reads_fetches_and_decodes_nothing(small_lrs: Path, tmp_path: Path) -> None:
    skipped = 10 * B
    with RangeServer(small_lrs) as server:
        ds = EpisodeStream(
            server.url,
            cache_dir=tmp_path / "cache",
            episode_pool_size=2,
            prefetch_episodes=1,
            seed=5,
            decode_threads=0,  # nothing built ahead: the admissions are exactly the resumed pool's
        )
        ds.load_state_dict({"batches_consumed": 10, "batch_size": B, "num_workers": 0})
        emission = ds.schedule(0).emission(0, 0, 0)
        gone = {p for p, d in enumerate(emission.departure_steps.tolist()) if d < skipped}
        iterator = iter(DataLoader(ds, batch_size=B))
        assert pairs(next(iterator)) == run(small_lrs, num_workers=0, epochs=[0], episode_pool_size=2)[10]
        stats = ds.stats()
        del iterator
        requested = {r.path for r in server.requests if r.path.startswith("videos/")}
    assert gone, "the cut must leave some pieces behind"
    episodes = ds.catalog.episodes
    assert not requested & {v.path for p in gone for v in episodes[emission.pieces[p].episode].videos}
    assert stats.skipped == skipped and stats.samples == B
    assert stats.frames_decoded == B * 2
    assert stats.episodes_admitted == len(emission.pool_at(skipped))


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("num_workers", [0, 2], ids=lambda w: f"workers{w}")
def test_stateful_dataloader_protocol(small_lrs: Path, num_workers: int) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    ds = stream(small_lrs)
    whole = [pairs(b) for b in StatefulDataLoader(ds, batch_size=B, num_workers=num_workers)]
    for k in (0, 4, len(whole) - 2):
        loader = StatefulDataLoader(stream(small_lrs), batch_size=B, num_workers=num_workers)
        iterator = iter(loader)
        head = [pairs(next(iterator)) for _ in range(k)]
        saved = json.loads(json.dumps(loader.state_dict()))
        del iterator
        fresh = StatefulDataLoader(stream(small_lrs), batch_size=B, num_workers=num_workers)
        fresh.load_state_dict(saved)
        assert head + [pairs(b) for b in fresh] == whole, f"cut at batch {k}"


def test_state_dict_inside_an_iteration_is_its_position(small_lrs: Path) -> None:
    ds = stream(small_lrs)
    iterator = iter(ds)
    for _ in range(7):
        next(iterator)
    state = ds.state_dict()
    assert (state["worker"], state["num_workers"], state["samples"]) == (0, 0, 7)
    rest = [(int(i["episode_index"]), int(i["frame_index"])) for i in iterator]
    fresh = stream(small_lrs)
    fresh.load_state_dict(state)
    assert [(int(i["episode_index"]), int(i["frame_index"])) for i in fresh] == rest


def test_state_dict_without_an_iteration_needs_the_batch_count(small_lrs: Path) -> None:
    ds = stream(small_lrs)
    with pytest.raises(StateError, match=r"Invalid state_dict\(\) call: no iteration runs in this process"):
        ds.state_dict()
    with pytest.raises(ValueError, match=r"Expected batches_consumed, batch_size and num_workers together"):
        ds.state_dict(batches_consumed=3)


@pytest.mark.parametrize(
    ("saved_with", "loaded_with", "message"),
    [
        ({"shuffle": False}, {}, r"Invalid state shuffle \(False\)\. Expected True: "),
        (
            {"episodes": [0, 1, 2]},
            {},
            r"Invalid state episodes \('\w+'\)\. Expected '\w+': .*another selection",
        ),
    ],
    ids=["shuffle", "selection"],
)
def test_a_state_from_another_run_is_refused(
    small_lrs: Path, saved_with: dict, loaded_with: dict, message: str
) -> None:
    state = stream(small_lrs, **saved_with).state_dict(batches_consumed=1, batch_size=B, num_workers=0)
    with pytest.raises(StateError, match=message):
        stream(small_lrs, **loaded_with).load_state_dict(state)


def test_a_state_from_another_dataset_is_refused(small: tuple[Path, Path]) -> None:
    other, small_lrs = small  # its v3 source, and itself
    state = stream(other).state_dict(batches_consumed=1, batch_size=B, num_workers=0)
    with pytest.raises(
        StateError, match=r"Invalid state fingerprint \('v3-\w+'\)\. Expected 'lrs1-\w+': .*another dataset"
    ):
        stream(small_lrs).load_state_dict(state)


def test_a_worker_position_from_another_topology_is_refused(small_lrs: Path) -> None:
    # A worker's own position (StatefulDataLoader's) is one rank's, in one pool: it cannot move.
    state = {"worker": 0, "num_workers": 1, "samples": 3, "world_size": 2, "episode_pool_size": 4}
    with pytest.raises(
        StateError, match=r"Invalid state world_size \(2\)\. Expected 1: .*trainer's batch count"
    ):
        stream(small_lrs).load_state_dict(state)
    ds = stream(small_lrs)
    ds.load_state_dict({**state, "world_size": 1})
    # Iterated in the main process: a worker raising would cost torch's 5 s worker shutdown timeout.
    with pytest.raises(StateError, match=r"Invalid num_workers \(0\) for this resume state\. Expected 1"):
        list(DataLoader(ds, batch_size=B, num_workers=0))


def test_more_batches_than_the_epoch_has_are_refused(small_lrs: Path) -> None:
    with pytest.raises(
        StateError,
        match=r"Invalid batches_consumed \(24\)\. Expected at most 23, the batches of the epoch on each rank "
        r"with world_size=1, num_workers=0 and batch_size=3\. \(resume state of epoch 0\)",
    ):
        stream(small_lrs).load_state_dict({"batches_consumed": 24, "batch_size": B, "num_workers": 0})


def test_moving_to_another_epoch_drops_a_pending_state(small_lrs: Path) -> None:
    ds = stream(small_lrs)
    ds.load_state_dict({"batches_consumed": 22, "batch_size": B, "num_workers": 0, "epoch": 2})
    ds.set_epoch(2)
    assert sum(1 for _ in ds) == 69 - 22 * B
    ds.set_epoch(3)
    assert ds.pending_batches() == 0 and sum(1 for _ in ds) == 69


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ([1, 2], r"Invalid state \(list\)\. Expected a dict\."),
        (
            {"batches_consumed": 1},
            r"Invalid state \(keys \['batches_consumed'\]\)\. Expected \['batches_consumed', 'batch_size', 'num_workers'\]",
        ),
        (
            {"batches_consumed": -1, "batch_size": 2, "num_workers": 0},
            r"Invalid state batches_consumed \(-1\)\. Expected an integer >= 0\.",
        ),
        (
            {"batches_consumed": 1, "batch_size": 0, "num_workers": 0},
            r"Invalid state batch_size \(0\)\. Expected an integer >= 1\.",
        ),
        (
            {"batches_consumed": True, "batch_size": 2, "num_workers": 0},
            r"Invalid state batches_consumed \(True\)",
        ),
        (
            {"version": 1, "batches_consumed": 1, "batch_size": 2, "num_workers": 0},
            r"Invalid state version \(1\)\. Expected 2: the state was saved by another version of lrs",
        ),
        (
            {"worker": 2, "num_workers": 2, "samples": 0},
            r"Invalid state worker \(2\)\. Expected < max\(1, num_workers=2\)\.",
        ),
        (
            {"seed": -3, "batches_consumed": 1, "batch_size": 2, "num_workers": 0},
            r"Invalid state seed \(-3\)",
        ),
    ],
    ids=["not-a-dict", "missing-keys", "negative", "zero-batch", "bool", "version", "worker", "seed"],
)
def test_malformed_states_are_refused(small_lrs: Path, state: Any, message: str) -> None:
    with pytest.raises(StateError, match=message):
        stream(small_lrs).load_state_dict(state)


def test_loading_a_state_adopts_its_seed_and_epoch(small_lrs: Path) -> None:
    ds = stream(small_lrs, seed=5)
    ds.load_state_dict({"batches_consumed": 0, "batch_size": B, "num_workers": 0, "seed": 8, "epoch": 4})
    assert (ds.seed, ds.epoch) == (8, 4)
    assert run(small_lrs, num_workers=0, epochs=[4], seed=8) == [
        pairs(b) for b in DataLoader(ds, batch_size=B)
    ]
