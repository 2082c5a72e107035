"""The reshard plan is a pure function of metadata: bounded files, every episode once, parts that tile."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reader.format.v3 import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH, EpisodeInfo, Info, VideoSegment
from reshard.job.plan import DataTask, VideoTask, chunk_file, make_plan

MB = 1024 * 1024
FPS = 10


def _info(cameras: int, chunks_size: int) -> Info:
    features = {f"cam{i}": {"dtype": "video", "shape": [8, 8, 3]} for i in range(cameras)}
    features["index"] = {"dtype": "int64", "shape": [1]}
    raw = {
        "codebase_version": "v3.0",
        "fps": FPS,
        "features": features,
        "data_path": DEFAULT_DATA_PATH,
        "video_path": DEFAULT_VIDEO_PATH,
        "chunks_size": chunks_size,
    }
    return Info.parse(json.dumps(raw))


def _episodes(lengths: list[int], per_data_file: int, per_video_file: int, cameras: int) -> list[EpisodeInfo]:
    episodes, start = [], 0
    video_start: dict[int, float] = {}
    for e, n in enumerate(lengths):
        vfile = e // per_video_file
        t0 = 0.0 if e % per_video_file == 0 else video_start[vfile]
        video_start[vfile] = t0 + n / FPS
        videos = tuple(VideoSegment(f"cam{c}", 0, vfile, t0, t0 + n / FPS) for c in range(cameras))
        episodes.append(EpisodeInfo(e, n, start, start + n, 0, e // per_data_file, ("t",), videos))
        start += n
    return episodes


def _sizes(info: Info, episodes: list[EpisodeInfo], bytes_per_row: int) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for e in episodes:
        path = info.data_file(e.data_chunk_index, e.data_file_index)
        sizes[path] = sizes.get(path, 0) + e.length * bytes_per_row
    return sizes


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed{s}")
def test_data_files_are_bounded_and_cover_every_episode_once_in_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 400, size=int(rng.integers(1, 60)))]
    info = _info(cameras=0, chunks_size=int(rng.integers(1, 5)))
    episodes = _episodes(lengths, per_data_file=int(rng.integers(1, 7)), per_video_file=1, cameras=0)
    bound_mb = float(rng.uniform(0.01, 0.2))
    plan = make_plan(info, episodes, _sizes(info, episodes, 100), data_file_mb=bound_mb)
    flat = [e for task in plan.data for e in task.episodes]
    assert flat == list(range(len(lengths)))
    for task in plan.data:
        # A file outgrows the bound only when it holds a single (big) episode.
        assert task.est_bytes <= bound_mb * MB or len(task.episodes) == 1
    for number, task in enumerate(plan.data):
        assert (task.chunk_index, task.file_index) == chunk_file(number, info.raw["chunks_size"])
        assert task.path == info.data_file(task.chunk_index, task.file_index)
    # Greedy packing: no two neighbours could have been one file.
    for a, b in zip(plan.data, plan.data[1:], strict=False):
        assert a.est_bytes + lengths[b.episodes[0]] * 100 > bound_mb * MB


def test_estimate_uses_each_source_files_bytes_per_row() -> None:
    info = _info(cameras=0, chunks_size=1000)
    episodes = _episodes([100, 100, 100, 100], per_data_file=2, per_video_file=1, cameras=0)
    # The second source file is 10x denser per row than the first.
    sizes = {info.data_file(0, 0): 2 * MB, info.data_file(0, 1): 20 * MB}
    plan = make_plan(info, episodes, sizes, data_file_mb=3)
    assert [t.episodes for t in plan.data] == [(0, 1), (2,), (3,)]
    assert [t.est_bytes for t in plan.data] == [2 * MB, 10 * MB, 10 * MB]
    assert plan.data[0].sources == (info.data_file(0, 0),)


def test_videos_one_output_per_episode_grouped_by_source_file() -> None:
    info = _info(cameras=2, chunks_size=3)
    episodes = _episodes([5, 6, 7, 8, 9], per_data_file=5, per_video_file=2, cameras=2)
    plan = make_plan(info, episodes, _sizes(info, episodes, 10), data_file_mb=100)
    assert [(t.key, t.source) for t in plan.videos] == [
        (f"cam{c}", info.video_file(f"cam{c}", 0, f)) for c in range(2) for f in range(3)
    ]
    outputs = [v for t in plan.videos for v in t.videos]
    assert sorted((v.key, v.episode) for v in outputs) == [(f"cam{c}", e) for c in range(2) for e in range(5)]
    third = next(v for v in outputs if v.key == "cam1" and v.episode == 3)
    assert (third.chunk_index, third.file_index) == (1, 0)
    assert third.path == "videos/cam1/chunk-001/file-000.mp4"
    assert third.from_timestamp == pytest.approx(0.7) and third.length == 8
    assert len(set(plan.outputs())) == len(plan.outputs()) == 1 + 10


@pytest.mark.parametrize("count", [1, 2, 3, 7, 50], ids=lambda n: f"parts{n}")
def test_parts_are_disjoint_and_cover_the_plan(count: int) -> None:
    info = _info(cameras=2, chunks_size=4)
    episodes = _episodes(list(range(3, 23)), per_data_file=3, per_video_file=4, cameras=2)
    plan = make_plan(info, episodes, _sizes(info, episodes, 50), data_file_mb=0.001)
    parts = [plan.part(i, count) for i in range(count)]
    seen = [task for part in parts for task in part]
    assert sorted(map(repr, seen)) == sorted(map(repr, plan.tasks()))
    assert len(seen) == len(plan.tasks())
    assert all(isinstance(t, (DataTask, VideoTask)) for t in seen)


def test_same_metadata_same_plan() -> None:
    info = _info(cameras=1, chunks_size=2)
    episodes = _episodes([4, 9, 2, 7, 5], per_data_file=2, per_video_file=3, cameras=1)
    sizes = _sizes(info, episodes, 1000)
    assert make_plan(info, episodes, sizes, data_file_mb=0.01) == make_plan(
        info, episodes, dict(sizes), data_file_mb=0.01
    )


@pytest.mark.parametrize(
    ("index", "count"), [(-1, 2), (2, 2), (0, 0)], ids=["negative", "past-end", "no-parts"]
)
def test_invalid_part(index: int, count: int) -> None:
    info = _info(cameras=0, chunks_size=10)
    episodes = _episodes([3], per_data_file=1, per_video_file=1, cameras=0)
    plan = make_plan(info, episodes, _sizes(info, episodes, 1), data_file_mb=1)
    with pytest.raises(ValueError, match=r"Invalid part \(.*\)\. Expected 0 <= index < count"):
        plan.part(index, count)


def test_invalid_bound_and_missing_size() -> None:
    info = _info(cameras=0, chunks_size=10)
    episodes = _episodes([3, 4], per_data_file=1, per_video_file=1, cameras=0)
    with pytest.raises(ValueError, match=r"Invalid data_file_mb \(0\)\. Expected > 0"):
        make_plan(info, episodes, _sizes(info, episodes, 1), data_file_mb=0)
    with pytest.raises(ValueError, match=r"no size for 'data/chunk-000/file-001.parquet'"):
        make_plan(info, episodes, {info.data_file(0, 0): 10}, data_file_mb=1)


@pytest.mark.parametrize(
    ("episodes", "cap", "files"),
    [(10, 3, [3, 3, 3, 1]), (9, 3, [3, 3, 3]), (4, 1, [1, 1, 1, 1]), (4, 10, [4]), (4, None, [4])],
    ids=["10-by-3", "9-by-3", "4-by-1", "under-the-cap", "no-cap"],
)
def test_episode_cap_splits_data_files(episodes: int, cap: int | None, files: list[int]) -> None:
    info = _info(cameras=1, chunks_size=2)
    records = _episodes([5] * episodes, per_data_file=episodes, per_video_file=episodes, cameras=1)
    plan = make_plan(info, records, _sizes(info, records, 10), data_file_mb=100, episodes_per_file=cap)
    assert [len(task.episodes) for task in plan.data] == files
    assert [e for task in plan.data for e in task.episodes] == list(range(episodes))
    assert [(t.chunk_index, t.file_index) for t in plan.data] == [chunk_file(n, 2) for n in range(len(files))]


@pytest.mark.parametrize("seed", range(4), ids=lambda s: f"seed{s}")
def test_episode_cap_and_byte_bound_hold_together(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 400, size=60)]
    info = _info(cameras=0, chunks_size=3)
    episodes = _episodes(lengths, per_data_file=7, per_video_file=1, cameras=0)
    cap, bound_mb = int(rng.integers(1, 8)), float(rng.uniform(0.02, 0.2))
    plan = make_plan(
        info, episodes, _sizes(info, episodes, 100), data_file_mb=bound_mb, episodes_per_file=cap
    )
    assert [e for task in plan.data for e in task.episodes] == list(range(len(lengths)))
    assert all(len(task.episodes) <= cap for task in plan.data)
    assert all(len(t.episodes) == 1 or t.est_bytes <= bound_mb * MB for t in plan.data)
    # A file closes only on a bound: the next episode would break one of them.
    estimates = {e.episode_index: e.length * 100 for e in episodes}
    for task, after in zip(plan.data, plan.data[1:], strict=False):
        assert len(task.episodes) == cap or task.est_bytes + estimates[after.episodes[0]] > bound_mb * MB


def test_invalid_episode_cap() -> None:
    info = _info(cameras=0, chunks_size=10)
    episodes = _episodes([3], per_data_file=1, per_video_file=1, cameras=0)
    with pytest.raises(ValueError, match=r"Invalid episodes_per_file \(0\)\. Expected >= 1"):
        make_plan(info, episodes, _sizes(info, episodes, 1), data_file_mb=1, episodes_per_file=0)
