"""Mixtures: several datasets in one stream, concatenated or weighted.

Two sources that differ as real ones do: another fps (30 and 10), another number of cameras, v3 and
lrs/1. Every sample is compared with the reference reader of its own source (lerobot's values), less
the keys not common to both, plus `dataset_index` (lerobot's `MultiLeRobotDataset` rules).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from reader import EpisodeStream
from reader.errors import DatasetError, StateError
from reader.metadata import DatasetMeta
from reader.schedule import Schedule, mixture_entries, source_quotas
from tests.reader.loader_job import job
from tests.reader.reference import ReferenceDataset, assert_items_equal, sample_pair
from tests.servers import RangeServer

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

# Windows in seconds: 3 frames at 30 fps, 1 frame at 10 fps.
WINDOWS = {"action": [-0.1, 0.0, 0.1], "observation.images.cam0": [-0.1, 0.0]}
SLOW = {"episodes": 5, "min_length": 3, "max_length": 20, "cameras": 1, "fps": 10, "seed": 9}
CAM1 = "observation.images.cam1"


@pytest.fixture(scope="session")
def slow(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return sample_pair(tmp_path_factory.getbasetemp() / "reader-data", "slow", **SLOW)


def frames_of(root: Path) -> int:
    return json.loads((root / "meta/info.json").read_text())["total_frames"]


def expected(reference: ReferenceDataset, item: dict[str, Any], drop: set[str]) -> dict[str, Any]:
    want = reference.get(int(item["episode_index"]), int(item["frame_index"]))
    want = {k: v for k, v in want.items() if k not in drop}
    want["dataset_index"] = item["dataset_index"]
    return want


def test_a_mixture_reads_every_frame_of_every_source_once_with_their_values(
    small: tuple[Path, Path], slow: tuple[Path, Path]
) -> None:
    sources = [small[0], slow[1]]  # plain v3 at 30 fps with 2 cameras, lrs/1 at 10 fps with 1
    stream = EpisodeStream(sources, delta_timestamps=WINDOWS, episode_pool_size=3, seed=7)
    references = [ReferenceDataset(root, delta_timestamps=WINDOWS) for root in sources]
    seen: Counter[tuple[int, int, int]] = Counter()
    for item in stream:
        source = int(item["dataset_index"])
        assert item["dataset_index"].dtype == torch.int64
        assert CAM1 not in item
        key = (source, int(item["episode_index"]), int(item["frame_index"]))
        assert_items_equal(item, expected(references[source], item, {CAM1}), context=str(key))
        seen[key] += 1
    assert len(seen) == frames_of(small[0]) + frames_of(slow[1]) and set(seen.values()) == {1}
    assert {s for s, _, _ in seen} == {0, 1}
    assert len(stream) == len(seen)


def test_a_mixture_mixes_sources_within_batches(small: tuple[Path, Path], slow: tuple[Path, Path]) -> None:
    stream = EpisodeStream([small[1], slow[1]], episode_pool_size=8, seed=3, return_uint8=True)
    batches = list(DataLoader(stream, batch_size=8))
    mixed = sum(len(set(b["dataset_index"].tolist())) > 1 for b in batches)
    assert mixed >= len(batches) // 2, f"only {mixed} of {len(batches)} batches hold both sources"


def test_weights_give_each_source_its_share_and_another_part_each_epoch(
    small: tuple[Path, Path], slow: tuple[Path, Path]
) -> None:
    a, b = frames_of(small[1]), frames_of(slow[1])  # 69 and 50 frames
    samples = 120
    stream = EpisodeStream(
        [small[1], slow[1]], weights=[1, 3], samples_per_epoch=samples, seed=2, return_uint8=True
    )
    references = [ReferenceDataset(root, return_uint8=True) for root in (small[1], slow[1])]
    quotas = source_quotas([1, 3], samples)
    assert quotas == [30, 90] and len(stream) == samples
    parts = []
    for epoch in (0, 1):
        stream.set_epoch(epoch)
        counts: Counter[tuple[int, int, int]] = Counter()
        for item in stream:
            source = int(item["dataset_index"])
            key = (source, int(item["episode_index"]), int(item["frame_index"]))
            if epoch == 0:
                assert_items_equal(item, expected(references[source], item, {CAM1}), context=str(key))
            counts[key] += 1
        per_source = Counter(s for s, _, _ in counts.elements())
        assert [per_source[0], per_source[1]] == quotas
        assert set(counts[k] for k in counts if k[0] == 0) == {1}  # 30 of 69: no repeat
        # 90 of 50 frames: every frame once, 40 of them twice.
        repeats = Counter(counts[k] for k in counts if k[0] == 1)
        assert sorted(repeats.items()) == [(1, 2 * b - 90), (2, 90 - b)]
        parts.append({k for k in counts if k[0] == 0})
    assert parts[0] != parts[1]
    assert a > quotas[0]


def test_weighted_epochs_cover_each_source_evenly_over_cycles() -> None:
    lengths = [5, 9, 10, 7, 11, 4, 6]  # source 0: 24 frames, source 1: 28 frames
    sources = [0, 0, 0, 1, 1, 1, 1]
    for shuffle in (True, False):
        covered: Counter[tuple[int, int]] = Counter()
        for epoch in range(8):  # quotas 6 and 54: 8 epochs x 6 frames of source 0 = 2 cycles of 24
            entries = mixture_entries(lengths, sources, [1, 9], 60, seed=11, epoch=epoch, shuffle=shuffle)
            this: Counter[tuple[int, int]] = Counter()
            for p, start, stop in zip(*(e.tolist() for e in entries), strict=True):
                assert 0 <= start < stop <= lengths[p]
                this.update((p, f) for f in range(start, stop))
            second = Counter(v for (p, _), v in this.items() if sources[p] == 1)
            assert second == {1: 2, 2: 26}, "source 1: every frame once or twice in each epoch"
            covered.update(this)
        first = Counter(v for (p, _), v in covered.items() if sources[p] == 0)
        assert first == {2: 24}, "every frame of source 0 exactly twice over two cycles"


def test_a_weighted_schedule_splits_ranks_and_workers_exactly() -> None:
    lengths, sources = [5, 9, 3, 7, 11, 4, 6], [0, 0, 0, 1, 1, 1, 1]
    schedule = Schedule(
        lengths, seed=3, world_size=2, num_workers=2, pool_size=3, sources=sources, weights=[2, 1], samples=61
    )
    for epoch in (0, 1):
        entries = schedule.entries(epoch)
        emitted: Counter[tuple[int, int]] = Counter()
        for rank in (0, 1):
            got = 0
            for worker in (0, 1):
                emission = schedule.emission(epoch, rank, worker)
                pieces, frames = emission.arrays()
                for p, f in zip(pieces.tolist(), frames.tolist(), strict=True):
                    entry = emission.piece(p).episode
                    assert entries.starts[entry] <= f < entries.stops[entry]
                    emitted[(int(entries.positions[entry]), f)] += 1
                got += len(pieces)
            assert got == schedule.samples_per_rank == 30
        assert sum(emitted.values()) == 60


@pytest.mark.integration
def test_weighted_mixture_resumes_exactly_in_new_processes(
    small: tuple[Path, Path], slow: tuple[Path, Path], tmp_path: Path
) -> None:
    roots = [str(small[1]), str(slow[0])]
    spec = {"root": roots, "weights": [2, 1], "num_workers": 2, "method": "spawn", "batch_size": 4, "seed": 4}
    whole = job(spec, tmp_path, "whole")["batches"]
    assert {p[0] for b in whole for p in b} == {0, 1}
    first = job({**spec, "stop_after": 5}, tmp_path, "first")
    assert first["batches"] == whole[:5]
    rest = job({**spec, "state": first["state"], "method": "forkserver"}, tmp_path, "rest")
    assert first["batches"] + rest["batches"] == whole


def test_a_state_of_another_mixture_is_refused(small: tuple[Path, Path], slow: tuple[Path, Path]) -> None:
    stream = EpisodeStream([small[1], slow[1]], weights=[2, 1])
    state = stream.state_dict(batches_consumed=1, batch_size=4, num_workers=0)
    with pytest.raises(StateError, match="another dataset"):
        EpisodeStream([small[1], slow[1]], weights=[1, 1]).load_state_dict(state)
    with pytest.raises(StateError, match="another dataset"):
        EpisodeStream([slow[1], small[1]], weights=[2, 1]).load_state_dict(state)
    with pytest.raises(StateError, match="another dataset"):
        EpisodeStream(small[1]).load_state_dict(state)


def test_remote_sources_share_one_cache_each_under_its_own_dataset(
    small: tuple[Path, Path], slow: tuple[Path, Path], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with RangeServer(small[1]) as one, RangeServer(slow[1]) as two:
        stream = EpisodeStream([one.url, two.url], cache_dir=cache, seed=1, return_uint8=True)
        references = [ReferenceDataset(root, return_uint8=True) for root in (small[1], slow[1])]
        count = 0
        for item in stream:
            source = int(item["dataset_index"])
            assert_items_equal(item, expected(references[source], item, {CAM1}))
            count += 1
        for source in stream.sources:
            source.cache.close()  # its download threads, which later tests expect gone
    assert count == frames_of(small[1]) + frames_of(slow[1])
    fingerprints = {s.catalog.fingerprint for s in stream.sources}
    assert len(fingerprints) == 2 and fingerprints <= set(os.listdir(cache))
    videos = [{v.path for e in s.catalog.episodes for v in e.videos} for s in stream.sources]
    shared = videos[0] & videos[1]
    assert shared, "both datasets name a video the same: the cache must keep them apart"
    for source, paths in zip(stream.sources, videos, strict=True):
        for rel in shared & paths:
            assert (cache / source.catalog.fingerprint / rel).exists()
    assert stream.stats().samples == count


def test_meta_of_a_mixture_aggregates_as_lerobot(small: tuple[Path, Path], slow: tuple[Path, Path]) -> None:
    stream = EpisodeStream([small[1], slow[1]])
    meta = stream.meta
    one, two = (DatasetMeta.open(str(r)) for r in (small[1], slow[1]))
    assert CAM1 not in meta.features and CAM1 in one.features
    assert list(meta.features) == [k for k in one.features if k in two.features]
    assert meta.camera_keys == ["observation.images.cam0"]
    assert meta.total_episodes == one.total_episodes + two.total_episodes
    assert meta.total_frames == one.total_frames + two.total_frames
    assert meta.task_names == tuple(dict.fromkeys(one.task_names + two.task_names))
    assert [m.repo_id for m in meta.sources] == [one.repo_id, two.repo_id]
    assert meta.stats is not None and one.stats is not None and two.stats is not None
    for key in ("action", "observation.state"):
        a, b = one.stats[key], two.stats[key]
        n = a["count"] + b["count"]
        mean = (a["mean"] * a["count"] + b["mean"] * b["count"]) / n
        var = (
            (a["std"] ** 2 + (a["mean"] - mean) ** 2) * a["count"]
            + (b["std"] ** 2 + (b["mean"] - mean) ** 2) * b["count"]
        ) / n
        got = meta.stats[key]
        np.testing.assert_allclose(got["mean"], mean)
        np.testing.assert_allclose(got["std"], np.sqrt(var))
        np.testing.assert_array_equal(got["min"], np.minimum(a["min"], b["min"]))
        np.testing.assert_array_equal(got["max"], np.maximum(a["max"], b["max"]))
        np.testing.assert_array_equal(got["count"], n)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"weights": [1, -1]}, ValueError, "Invalid weight of source 1"),
        ({"weights": [0, 0]}, ValueError, "sum to 0"),
        ({"weights": [1]}, ValueError, "Expected one per source"),
        ({"weights": [1, float("nan")]}, ValueError, "Invalid weight of source 1"),
        ({"samples_per_epoch": 10}, ValueError, "without weights"),
        ({"episodes": [[0, 1]]}, ValueError, "one list of episode indices"),
        ({"episodes": [[0], [99]]}, ValueError, "Invalid episode index"),
        ({"delta_timestamps": {CAM1: [0.0]}}, ValueError, "every source of the mixture"),
    ],
)
def test_bad_mixtures_are_refused(
    small: tuple[Path, Path], slow: tuple[Path, Path], kwargs: dict, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        EpisodeStream([small[1], slow[1]], **kwargs)


def test_a_source_that_fails_to_open_is_named(small: tuple[Path, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    with pytest.raises(DatasetError, match=f"source 1 of the mixture \\({missing}\\)"):
        EpisodeStream([small[1], missing])
    with pytest.raises(ValueError, match="Invalid weights for one source"):
        EpisodeStream(small[1], weights=[1])
    with pytest.raises(ValueError, match="non-empty list"):
        EpisodeStream([])


def test_features_that_cannot_be_merged_are_refused(small: tuple[Path, Path], copy_ds: Any) -> None:
    other = copy_ds(small[0])
    info = json.loads((other / "meta/info.json").read_text())
    info["features"]["action"]["shape"] = [7]
    (other / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match="feature 'action' has shape"):
        EpisodeStream([small[0], other])


def test_a_single_source_list_is_a_mixture_of_one(small: tuple[Path, Path]) -> None:
    alone = EpisodeStream(small[1], seed=5, return_uint8=True)
    listed = EpisodeStream([small[1]], seed=5, return_uint8=True)
    a, b = list(alone), list(listed)
    assert [int(x["index"]) for x in a] == [int(x["index"]) for x in b]
    assert "dataset_index" not in a[0] and int(b[0]["dataset_index"]) == 0
    with pytest.raises(AttributeError, match="one catalog per source"):
        _ = listed.catalog


def test_cameras_of_other_sizes_mix_at_one_resize(tmp_path: Path) -> None:
    """Two datasets whose camera is 64x96 and 48x64: refused as they are, with the fix named; with
    `resize=(H, W)` every frame comes at that size and the stream's meta says so."""
    from reshard.demo.sample import write_sample

    a = write_sample(tmp_path / "a", episodes=2, cameras=1)
    b = write_sample(tmp_path / "b", episodes=2, cameras=1, seed=3, height=48, width=64)
    with pytest.raises(DatasetError, match=r"has shape \[64, 96, 3\] in source 0 .* or resize=\(H, W\)"):
        EpisodeStream([str(a), str(b)], weights=[1, 1])
    stream = EpisodeStream([str(a), str(b)], weights=[1, 1], resize=(32, 40))
    items = list(stream)
    assert {tuple(item["observation.images.cam0"].shape) for item in items} == {(3, 32, 40)}
    assert {int(item["dataset_index"]) for item in items} == {0, 1}
    assert list(stream.meta.features["observation.images.cam0"]["shape"]) == [32, 40, 3]
