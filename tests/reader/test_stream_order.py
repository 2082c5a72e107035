"""EpisodeStream order through real DataLoaders: every frame exactly once across ranks and workers,
equal samples per rank, deterministic per seed, reshuffled per epoch, well mixed with a large pool."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from reader import EpisodeStream
from tests.reader.reference import sample_pair

Pair = tuple[int, int]
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="session")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 short single-camera episodes: enough to measure mixing."""
    spec = {"episodes": 32, "min_length": 6, "max_length": 16, "cameras": 1, "seed": 9}
    return sample_pair(tmp_path_factory.getbasetemp() / "reader-data", "many", **spec)[1]


def batches(stream: EpisodeStream, *, batch_size: int, num_workers: int) -> list[list[Pair]]:
    """The (episode_index, frame_index) of every sample, batch by batch, in DataLoader order."""
    loader = DataLoader(stream, batch_size=batch_size, num_workers=num_workers)
    return [
        [(int(e), int(f)) for e, f in zip(b["episode_index"], b["frame_index"], strict=True)] for b in loader
    ]


def flat(groups: list[list[Pair]]) -> list[Pair]:
    return [p for g in groups for p in g]


@pytest.mark.integration
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3], ids=lambda w: f"workers{w}")
@pytest.mark.parametrize("world_size", [1, 2, 3, 4], ids=lambda w: f"world{w}")
def test_every_frame_exactly_once_across_ranks_and_workers(
    small: tuple[Path, Path], world_size: int, num_workers: int
) -> None:
    per_rank = []
    for rank in range(world_size):
        stream = EpisodeStream(
            small[1], rank=rank, world_size=world_size, episode_pool_size=3, seed=11, return_uint8=True
        )
        per_rank.append(flat(batches(stream, batch_size=4, num_workers=num_workers)))
        assert len(per_rank[-1]) == len(stream)
    everything = Counter(p for samples in per_rank for p in samples)
    assert max(everything.values()) == 1
    assert {len(samples) for samples in per_rank} == {69 // world_size}
    dropped = 69 % world_size
    assert len(everything) == 69 - dropped
    lengths = [8, 22, 8, 21, 4, 5, 1]
    assert set(everything) <= {(e, f) for e, n in enumerate(lengths) for f in range(n)}


def test_selected_episodes_are_covered_exactly_once(small: tuple[Path, Path]) -> None:
    chosen = [0, 2, 4, 6]
    per_rank = [
        flat(
            batches(
                EpisodeStream(small[1], episodes=chosen, rank=r, world_size=2, seed=3),
                batch_size=3,
                num_workers=2,
            )
        )
        for r in range(2)
    ]
    seen = Counter(p for samples in per_rank for p in samples)
    assert len(per_rank[0]) == len(per_rank[1]) == (8 + 8 + 4 + 1) // 2
    assert max(seen.values()) == 1 and {e for e, _ in seen} == set(chosen)


@pytest.mark.integration
def test_same_seed_same_order_new_epoch_new_order(small: tuple[Path, Path]) -> None:
    def run(seed: int, epoch: int) -> list[Pair]:
        stream = EpisodeStream(small[1], seed=seed, episode_pool_size=4, return_uint8=True)
        stream.set_epoch(epoch)
        return flat(batches(stream, batch_size=5, num_workers=2))

    first = run(0, 0)
    assert run(0, 0) == first
    for other in (run(0, 1), run(1, 0)):
        assert other != first and sorted(other) == sorted(first)


def test_unshuffled_stream_is_sequential(small: tuple[Path, Path]) -> None:
    samples = flat(batches(EpisodeStream(small[1], shuffle=False), batch_size=7, num_workers=0))
    lengths = [8, 22, 8, 21, 4, 5, 1]
    assert samples == [(e, f) for e, n in enumerate(lengths) for f in range(n)]


def distinct_ratio(groups: list[list[Pair]]) -> float:
    """Mean over full batches of distinct episodes per batch / batch size."""
    full = [g for g in groups if len(g) == len(groups[0])]
    return sum(len({e for e, _ in g}) / len(g) for g in full) / len(full)


@pytest.mark.integration
@pytest.mark.parametrize("num_workers", [0, 2], ids=lambda w: f"workers{w}")
def test_batches_mix_episodes_when_the_pool_holds_a_batch(many: Path, num_workers: int) -> None:
    batch_size = 8
    mixed = distinct_ratio(
        batches(
            EpisodeStream(many, episode_pool_size=16, seed=2), batch_size=batch_size, num_workers=num_workers
        )
    )
    narrow = distinct_ratio(
        batches(
            EpisodeStream(many, episode_pool_size=1, seed=2), batch_size=batch_size, num_workers=num_workers
        )
    )
    print(f"distinct episodes per batch / batch size: pool 16 -> {mixed:.3f}, pool 1 -> {narrow:.3f}")
    assert mixed >= 0.95
    assert narrow <= 0.35
