"""`EpisodeStream.meta`: lerobot's `LeRobotDatasetMetadata` names and values, depth stats in the stream's
unit, for a policy built with `make_policy(cfg, ds_meta=stream.meta)` (`scripts/lerobot/parity.py
--reader` compares it with lerobot 0.6.1's own object)."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reader import EpisodeStream
from reader.errors import DatasetError
from reader.format.v3 import Info
from reader.metadata import DatasetMeta, rescale_depth_stats, stats_to_numpy

DEPTH, RGB = "observation.images.depth0", "observation.images.cam0"


@pytest.fixture(scope="module")
def dataset(sample_depth_ds: Path) -> Path:
    """A v3 sample with an RGB camera and a depth camera."""
    return sample_depth_ds


def _stats_json(root: Path) -> dict:
    return json.loads((root / "meta/stats.json").read_text())


def test_meta_gives_lerobots_names(dataset: Path) -> None:
    meta = EpisodeStream(dataset).meta
    info = json.loads((dataset / "meta/info.json").read_text())
    assert meta.fps == info["fps"] and meta.robot_type == info["robot_type"]
    assert (meta.total_episodes, meta.total_frames, meta.total_tasks) == (
        info["total_episodes"],
        info["total_frames"],
        info["total_tasks"],
    )
    assert meta.camera_keys == meta.video_keys == [RGB, DEPTH]
    assert meta.depth_keys == [DEPTH] and meta.image_keys == []
    assert list(meta.features) == list(info["features"])
    assert meta.shapes[DEPTH] == tuple(info["features"][DEPTH]["shape"])
    assert all(isinstance(f["shape"], tuple) for f in meta.features.values())
    assert meta.names["action"] == info["features"]["action"]["names"]
    assert len(meta.task_names) == info["total_tasks"]
    assert meta.get_task_index(meta.task_names[-1]) == len(meta.task_names) - 1
    assert meta.get_task_index("no such task") is None


def test_stats_are_numpy_and_depth_follows_the_unit(dataset: Path) -> None:
    raw = _stats_json(dataset)
    assert (
        json.loads((dataset / "meta/info.json").read_text())["features"][DEPTH]["info"]["depth_unit"] == "mm"
    )
    mm = EpisodeStream(dataset).meta.stats
    m = EpisodeStream(dataset, depth_output_unit="m").meta.stats
    assert mm is not None and m is not None
    for key, stats in raw.items():
        for name, value in stats.items():
            want = np.atleast_1d(np.array(value))
            assert isinstance(mm[key][name], np.ndarray) and mm[key][name].shape == want.shape
            np.testing.assert_array_equal(mm[key][name], want)
            scale = 1e-3 if key == DEPTH and name != "count" else 1.0
            np.testing.assert_array_equal(m[key][name], want * scale if scale != 1.0 else want)
    assert float(m[DEPTH]["mean"].ravel()[0]) == pytest.approx(raw[DEPTH]["mean"][0][0][0] / 1000)
    assert m[DEPTH]["count"].tolist() == raw[DEPTH]["count"]


def test_depth_stats_recorded_in_metres_become_millimetres() -> None:
    features = {"d": {"dtype": "video", "info": {"is_depth_map": True, "depth_unit": "m"}}, "x": {}}
    stats = stats_to_numpy({"d": {"mean": [1.5], "count": [4]}, "x": {"mean": [2.0]}})
    out = rescale_depth_stats(stats, features, "mm")
    assert out["d"]["mean"].tolist() == [1500.0] and out["d"]["count"].tolist() == [4]
    assert out["x"]["mean"].tolist() == [2.0]
    # No recorded unit: kept as it is (lerobot does the same, with a warning).
    features["d"]["info"].pop("depth_unit")
    assert rescale_depth_stats(stats, features, "m")["d"]["mean"].tolist() == [1.5]


def test_missing_stats_give_none_and_malformed_stats_name_the_file(dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    (copy / "meta/stats.json").unlink()
    assert EpisodeStream(copy).meta.stats is None
    (copy / "meta/stats.json").write_text('{"action": {"mean": ["x", [1, 2]]}}')
    with pytest.raises(DatasetError, match=r"stats\.json"):
        _ = EpisodeStream(copy).meta
    (copy / "meta/stats.json").write_text("[1, 2]")
    with pytest.raises(DatasetError, match=r"stats\.json.*per-feature"):
        _ = EpisodeStream(copy).meta


def test_meta_pickles_with_the_stream(dataset: Path) -> None:
    stream = EpisodeStream(dataset)
    before = stream.meta
    again = pickle.loads(pickle.dumps(stream)).meta
    assert again.features == before.features and again.task_names == before.task_names
    np.testing.assert_array_equal(again.stats[DEPTH]["mean"], before.stats[DEPTH]["mean"])
    assert stream.features is stream.meta.features and stream.fps == before.fps


def test_tasks_table_is_lerobots_dataframe_or_says_what_it_needs(dataset: Path) -> None:
    meta = EpisodeStream(dataset).meta
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pandas"):
            _ = meta.tasks
        return
    tasks = meta.tasks
    assert tasks.index.name == "task" and list(tasks.index) == list(meta.task_names)
    assert tasks["task_index"].tolist() == list(range(len(meta.task_names)))


def test_build_checks_the_unit() -> None:
    info = Info.parse(json.dumps({"codebase_version": "v3.0", "fps": 30, "features": {}, "data_path": "d"}))
    with pytest.raises(ValueError, match="depth_output_unit"):
        DatasetMeta.build(info, None, (), depth_output_unit="cm")  # type: ignore[arg-type]


def test_metadata_module_imports_no_torch() -> None:
    code = "import sys, reader.metadata; sys.exit('torch' in sys.modules or 'pandas' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
