"""`lrs train` without lerobot: the one-line error, lerobot's dataset settings as stream arguments, and
the resume arithmetic from a lerobot checkpoint (`reshard.train.options`, `reshard.train.resume`).
The run itself is `scripts/lerobot_train_check.py`, in lerobot's environment (`tests/test_lerobot_train.py`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.train.options import (
    DatasetSettings,
    StreamOptions,
    TrainConfigError,
    imagenet_stats,
    settings_of,
    source_of,
    stream_kwargs,
)
from reshard.train.resume import (
    STATE_FILE,
    SavedStream,
    TrainTopology,
    read_saved,
    resume_state,
    state_at_step,
    write_saved,
)

ONE = TrainTopology(batch_size=8, num_workers=2, world_size=1)


@pytest.mark.skipif(importlib.util.find_spec("lerobot") is not None, reason="lerobot is installed here")
def test_without_lerobot_it_is_one_line_naming_the_install_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["train", "--policy.type=act", f"--dataset.repo_id={tmp_path}"])
    assert result.exit_code == 3
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: lrs train needs lerobot's trainer (No module named 'lerobot')")
    assert lines[0].endswith("pip install 'lerobot[training]==0.6.1' (Python 3.12).")


def test_lrs_options_are_checked_before_lerobot_is_looked_for(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["train", "--episode-pool-size", "0", "--policy.type=act"])
    assert result.exit_code == 2
    assert "Invalid value for '--episode-pool-size'" in result.output


@pytest.mark.parametrize(
    ("settings", "source"),
    [
        (DatasetSettings(repo_id="/data/set-lrs"), "/data/set-lrs"),
        (DatasetSettings(repo_id="me/set", root="/data/set"), "/data/set"),
        (DatasetSettings(repo_id="me/set", repo_type="bucket"), "hf://buckets/me/set"),
        (DatasetSettings(repo_id="hf://buckets/me/set", repo_type="bucket"), "hf://buckets/me/set"),
        (DatasetSettings(repo_id="s3://bucket/set"), "s3://bucket/set"),
        (DatasetSettings(repo_id="lerobot/pusht"), "lerobot/pusht"),
    ],
    ids=["path", "root-wins", "bucket-id", "bucket-url", "s3", "hub-id"],
)
def test_the_source_is_where_lerobot_would_read(settings: DatasetSettings, source: str) -> None:
    assert source_of(settings) == source


def test_a_revision_goes_in_the_url() -> None:
    with pytest.raises(TrainConfigError, match=r"^Invalid --dataset.revision \(v1\). Expected .*@v1\.$"):
        source_of(DatasetSettings(repo_id="me/set", revision="v1"))


def test_stream_arguments_are_lerobot_trains_transport_and_order() -> None:
    settings = DatasetSettings(
        repo_id="/d", episodes=(3, 1), seed=None, batch_size=16, tolerance_s=0.01, depth_output_unit="m"
    )
    assert stream_kwargs(settings, StreamOptions()) == {
        "source": "/d",
        "episodes": [3, 1],
        "batch_size": 16,
        "seed": 0,
        "tolerance_s": 0.01,
        "depth_output_unit": "m",
        "return_uint8": True,
    }
    options = StreamOptions(cache_dir="/c", cache_max_bytes=10, episode_pool_size=4, decode_threads=0)
    kwargs = stream_kwargs(DatasetSettings(repo_id="/d", seed=7), options)
    assert {k: kwargs[k] for k in ("seed", "cache_dir", "cache_max_bytes", "episode_pool_size")} == {
        "seed": 7,
        "cache_dir": "/c",
        "cache_max_bytes": 10,
        "episode_pool_size": 4,
    }
    assert kwargs["decode_threads"] == 0 and "prefetch_episodes" not in kwargs


def test_settings_come_off_lerobots_dataset_config_and_its_train_config() -> None:
    dataset = SimpleNamespace(
        repo_id="me/set", root="/data/set", repo_type="bucket", revision="v1", episodes=[2, 3],
        depth_output_unit="m", eval_split=0.1, seed=99, batch_size=99,  # not lerobot's: on cfg instead
    )  # fmt: skip
    train = SimpleNamespace(seed=5, batch_size=16, tolerance_s=0.01, repo_id="not read")
    assert settings_of(dataset, train) == DatasetSettings(
        repo_id="me/set", root="/data/set", repo_type="bucket", revision="v1", episodes=[2, 3],
        depth_output_unit="m", eval_split=0.1, seed=5, batch_size=16, tolerance_s=0.01,
    )  # fmt: skip


def test_an_eval_split_is_refused_not_ignored() -> None:
    with pytest.raises(TrainConfigError, match=r"^Invalid --dataset.eval_split \(0.1\). Expected 0"):
        stream_kwargs(DatasetSettings(repo_id="/d", eval_split=0.1), StreamOptions())


def test_imagenet_stats_replace_rgb_cameras_only() -> None:
    stats = {
        "cam": {"mean": np.zeros(3), "std": np.ones(3), "count": np.array([5])},
        "depth": {"mean": np.zeros(1)},
        "state": {"mean": np.zeros(2)},
    }
    imagenet = {"mean": np.full(3, 0.5), "std": np.full(3, 0.25)}
    imagenet_stats(stats, ["cam", "depth"], ["depth"], imagenet)
    assert stats["cam"]["mean"] is imagenet["mean"] and stats["cam"]["std"] is imagenet["std"]
    assert stats["cam"]["count"].tolist() == [5]
    assert stats["depth"]["mean"].tolist() == [0.0] and stats["state"]["mean"].tolist() == [0.0, 0.0]
    imagenet_stats(None, ["cam"], [], imagenet)  # a dataset without stats: nothing to replace


@pytest.mark.parametrize("per_epoch", [1, 3, 7])
def test_a_step_maps_to_its_epoch_and_batch(per_epoch: int) -> None:
    seen = []
    for step in range(4 * per_epoch):
        state = state_at_step(step, per_epoch, ONE)
        assert state["epoch"] * per_epoch + state["batches_consumed"] == step
        assert 0 <= state["batches_consumed"] < per_epoch
        assert (state["batch_size"], state["num_workers"], state["world_size"]) == (8, 2, 1)
        seen.append((state["epoch"], state["batches_consumed"]))
    assert seen == sorted(set(seen))  # one position per step, in order
    with pytest.raises(ValueError, match="Invalid step"):
        state_at_step(-1, per_epoch, ONE)


def test_the_saved_stream_state_wins_when_it_is_for_the_step() -> None:
    saved = SavedStream(step=5, state={"epoch": 0, "batches_consumed": 5, "before": []})
    two = TrainTopology(batch_size=4, num_workers=1, world_size=2)
    got = resume_state(5, saved, saved_topology=ONE, topology=two, batches_per_epoch=3, file="f")
    assert got == dict(saved.state)  # elastic: the stream maps it to the new topology
    with pytest.raises(
        TrainConfigError, match=r"^Invalid stream state in f \(step 5\). Expected the checkpoint's step 6\.$"
    ):
        resume_state(6, saved, saved_topology=ONE, topology=ONE, batches_per_epoch=3, file="f")


def test_without_a_saved_state_the_step_needs_the_same_topology() -> None:
    assert resume_state(0, None, saved_topology=ONE, topology=ONE, batches_per_epoch=3, file="f") is None
    got = resume_state(7, None, saved_topology=ONE, topology=ONE, batches_per_epoch=3, file="f")
    assert (got["epoch"], got["batches_consumed"]) == (2, 1)
    other = TrainTopology(batch_size=8, num_workers=2, world_size=2)
    with pytest.raises(TrainConfigError, match=r"^Invalid resume without f"):
        resume_state(7, None, saved_topology=ONE, topology=other, batches_per_epoch=3, file="f")


def test_the_saved_state_file_round_trips_and_refuses_garbage(tmp_path: Path) -> None:
    assert read_saved(tmp_path) is None
    saved = SavedStream(step=12, state={"epoch": 1, "batches_consumed": 2, "batch_size": 8})
    path = write_saved(tmp_path, saved)
    assert path.name == STATE_FILE and read_saved(tmp_path) == saved
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]  # no temp file left
    for text in ("{", json.dumps({"step": -1, "stream": {}}), json.dumps({"step": 1}), "[]"):
        path.write_text(text)
        with pytest.raises(TrainConfigError, match=rf"^Invalid stream state in {path} "):
            read_saved(tmp_path)
