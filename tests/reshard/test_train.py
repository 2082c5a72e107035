"""`lrs train` without lerobot: the one-line error, lerobot's dataset settings as stream arguments, and
the resume arithmetic from a lerobot checkpoint (`reshard.train.options`, `reshard.train.resume`).
The run itself is `scripts/lerobot/train_check.py`, in lerobot's environment (`tests/test_lerobot_train.py`)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.train.options import (
    DatasetSettings,
    EpisodeSplit,
    StreamOptions,
    TrainConfigError,
    imagenet_stats,
    settings_of,
    source_of,
    split_episodes,
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


@pytest.mark.parametrize("size", ["224", "0x224", "224x99999", "wide"])
def test_a_bad_resize_is_refused_before_lerobot_is_looked_for(size: str) -> None:
    result = CliRunner().invoke(cli, ["train", "--resize", size, "--policy.type=act"])
    assert result.exit_code == 2
    assert "Invalid --resize (" in result.output and "Expected WIDTHxHEIGHT" in result.output


def test_the_resize_limit_is_the_readers() -> None:
    from reader.plan.spec import MAX_FRAME_SIDE
    from reshard.cli.train_command import MAX_SIDE

    assert MAX_SIDE == MAX_FRAME_SIDE


def test_resize_reaches_the_stream_as_height_width(monkeypatch: pytest.MonkeyPatch, sample_ds: Path) -> None:
    """`lrs train --resize WxH`: the stream's `resize=(H, W)`, and `meta`'s shapes (what lerobot's
    `make_policy` builds the policy's inputs from) follow."""
    import reshard.train

    given: list[StreamOptions] = []
    monkeypatch.setattr(reshard.train, "run", lambda args, options, **_: given.append(options))
    result = CliRunner().invoke(cli, ["train", "--resize", "40x30", "--policy.type=act"])
    assert result.exit_code == 0, result.output
    assert given == [StreamOptions(resize=(30, 40))]
    kwargs = stream_kwargs(DatasetSettings(repo_id=str(sample_ds)), given[0])
    assert kwargs["resize"] == (30, 40)
    from reader import EpisodeStream

    stream = EpisodeStream(**kwargs)
    for key in stream.meta.camera_keys:
        assert stream.meta.features[key]["shape"][:2] in ([30, 40], (30, 40)), key
    sample = next(iter(stream))
    assert all(sample[key].shape[-2:] == (30, 40) for key in stream.meta.camera_keys)


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


def test_an_eval_split_leaves_the_stream_arguments_to_the_split() -> None:
    plain = stream_kwargs(DatasetSettings(repo_id="/d", episodes=(3, 1)), StreamOptions())
    assert (
        stream_kwargs(DatasetSettings(repo_id="/d", episodes=(3, 1), eval_split=0.1), StreamOptions())
        == plain
    )


def test_the_split_holds_out_the_last_episodes_of_each_task() -> None:
    tasks = ["a", "b"] * 5  # episode e does task "a" or "b" by parity: 5 episodes each
    split = split_episodes(range(10), tasks, 0.25)  # ceil(5 x 0.25) = 2 held out per task
    assert split == EpisodeSplit(train=(0, 2, 4, 1, 3, 5), held_out=((6, 8), (7, 9)))
    assert split.eval == (6, 8, 7, 9)
    # A selection in its own order; "" (no task) is a task of its own; 3 x 0.5 rounds up to 2.
    tasks = ["a", "", "a", "b", "", "a", "b", "a", ""]
    split = split_episodes([8, 7, 0, 1, 2, 4, 5, 3], tasks, 0.5)
    assert split == EpisodeSplit(train=(8, 7, 0), held_out=((1, 4), (2, 5), (3,)))


@pytest.mark.parametrize(
    ("episodes", "tasks", "fraction", "message"),
    [
        ([0, 1], ["a", "b"], 0.1, r"Invalid --dataset.eval_split \(0.1\). Expected a split that leaves "
         r"training episodes: it holds out all 2 selected episodes\.$"),
        ([0, 1], ["a", "a"], 0.0, r"Invalid --dataset.eval_split \(0.0\). Expected a fraction in \(0, 1\)\.$"),
        ([0, 1], ["a", "a"], 1.0, r"Invalid --dataset.eval_split \(1.0\). Expected a fraction"),
        ([0, 2], ["a", "a"], 0.5, r"Invalid --dataset.episodes entry \(2\). Expected an episode index below 2\.$"),
    ],
    ids=["nothing-left", "zero", "one", "unknown-episode"],
)  # fmt: skip
def test_a_split_that_cannot_be_is_one_line(
    episodes: list[int], tasks: list[str], fraction: float, message: str
) -> None:
    with pytest.raises(TrainConfigError, match=f"^{message}"):
        split_episodes(episodes, tasks, fraction)


def test_max_eval_samples_keeps_each_tasks_leading_whole_episodes() -> None:
    split = EpisodeSplit(train=(0, 1), held_out=((2, 3, 4), (5, 6)))
    lengths = [9, 9, 10, 10, 10, 4, 30]
    assert split.eval_within(0, lengths) == (2, 3, 4, 5, 6)  # 0: all, as lerobot
    assert split.eval_within(40, lengths) == (2, 3, 5, 6)  # 20 frames a task: 10 + 10, and 4 + 30
    assert split.eval_within(20, lengths) == (2, 5, 6)  # 10 a task: 10, and 4 + 30 (whole episodes)
    assert split.eval_within(1, lengths) == (2, 5)  # at least 1 frame a task, as lerobot's max(1, ...)


# lerobot's own `make_train_eval_datasets`, its datasets replaced by recorders: the episodes it gives the
# train and eval datasets, for each case on stdin ({"tasks": [[...] per episode], "episodes", "split"}).
LEROBOT_SPLIT = """
import json, sys
from types import SimpleNamespace
import lerobot.datasets.factory as factory

made = []
factory.resolve_delta_timestamps = lambda *a: None
factory.LeRobotDataset = lambda *a, episodes, **k: made.append(list(episodes))
out = []
for case in json.load(sys.stdin):
    tasks = case["tasks"]
    meta = SimpleNamespace(episodes={"tasks": tasks}, camera_keys=[])
    full = SimpleNamespace(episodes=case["episodes"], num_episodes=len(tasks), meta=meta)
    factory.make_dataset = lambda cfg: full
    dataset = SimpleNamespace(
        eval_split=case["split"], image_transforms=SimpleNamespace(enable=False), use_imagenet_stats=False,
        repo_id="r", root=None, revision=None, video_backend=None,
    )
    cfg = SimpleNamespace(dataset=dataset, trainable_config=None, tolerance_s=1e-4)
    made.clear()
    try:
        factory.make_train_eval_datasets(cfg)
        out.append(made[:2])
    except ValueError:
        out.append(None)
print(json.dumps(out))
"""


@pytest.mark.lerobot
def test_the_split_is_lerobots_own(lerobot_python: str) -> None:
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(200):
        count = int(rng.integers(1, 30))
        names = ["a", "b", "c", "d"][: int(rng.integers(1, 5))]
        tasks = [[] if rng.random() < 0.1 else [str(rng.choice(names)), "second"] for _ in range(count)]
        episodes = None
        if rng.random() < 0.5:
            episodes = rng.permutation(count)[: int(rng.integers(1, count + 1))].tolist()
        cases.append(
            {"tasks": tasks, "episodes": episodes, "split": float(rng.choice([0.1, 0.25, 0.5, 0.9]))}
        )
    done = subprocess.run(
        [lerobot_python, "-c", LEROBOT_SPLIT], input=json.dumps(cases), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    refused = 0
    for case, expected in zip(cases, theirs, strict=True):
        first = [t[0] if t else "" for t in case["tasks"]]
        selected = case["episodes"] if case["episodes"] is not None else range(len(first))
        if expected is None:
            refused += 1
            with pytest.raises(TrainConfigError, match="leaves training episodes"):
                split_episodes(selected, first, case["split"])
            continue
        split = split_episodes(selected, first, case["split"])
        assert [list(split.train), list(split.eval)] == expected, case
    assert 0 < refused < len(cases)  # both outcomes compared


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
