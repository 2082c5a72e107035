"""Depth cameras as lerobot 0.6.1 records them (12-bit log-quantized depth, lossless HEVC gray12le):
read as float32 (1, H, W) depth equal to the quantizer's inverse, in mm or m, through windows, workers and
reshards; bad quantizers and pixel formats are errors, never wrong values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch.utils.data import DataLoader

from reader import BatchLoader, EpisodeStream, collate
from reader.decode.depth import DEPTH_QMAX, Quantizer, is_depth
from reader.errors import DatasetError, DecodeError
from reshard.cli import cli
from reshard.demo.frame_marks import depth_frame, read_frame_id
from reshard.demo.sample_spec import SampleSpec
from tests.conftest import DEPTH_SPEC
from tests.reader.reference import assert_items_equal
from tests.reader.test_tail_buffer import epoch_with_tail_buffer

DEPTH, RGB = "observation.images.depth0", "observation.images.cam0"
H, W = 64, 96
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="session")
def depth_ds(sample_depth_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("depth-out")
    v3 = sample_depth_ds
    out = {"v3": v3}
    for mode in ("copy", "hevc"):
        result = CliRunner().invoke(cli, ["reshard", str(v3), "--out", str(base / mode), "--video", mode])
        assert result.exit_code == 0, result.output
        out[mode] = base / mode
    out["hevc-output"] = result.output  # type: ignore[assignment]
    return out


def expected_depth(episode: int, frame: int, unit: str = "mm") -> torch.Tensor:
    """What lerobot returns: the quantizer's inverse of the codes `lrs sample` wrote."""
    codes = Quantizer().quantize(depth_frame(episode, frame, 0, height=H, width=W))
    return Quantizer().dequantize(torch.from_numpy(codes.astype(np.int32))[None, None], unit)[0]


def test_quantizer_reads_lerobots_info_and_defaults() -> None:
    assert Quantizer.from_feature({"info": {}}) == Quantizer()
    feature = {
        "info": {"video.depth_min": 0.1, "video.depth_max": 4.0, "video.shift": 0.0, "video.use_log": False}
    }
    assert Quantizer.from_feature(feature) == Quantizer(0.1, 4.0, 0.0, False)
    assert is_depth({"info": {"is_depth_map": True}}) and is_depth({"info": {"video.is_depth_map": True}})
    assert is_depth({"video_info": {"video.is_depth_map": True}}) and not is_depth({"info": {}})


@pytest.mark.parametrize("use_log", [True, False], ids=["log", "linear"])
def test_dequantize_inverts_quantize_within_half_a_quantum(use_log: bool) -> None:
    q = Quantizer(use_log=use_log)
    depth = np.linspace(0.01, 10.0, 5000, dtype=np.float32)
    codes = q.quantize(depth)
    # One intra-op thread: with 2, torch 2.13 returned, in about 1 run of 5, one element of this 5000-long
    # tensor off its quantum's centre (7.8123 instead of 7.8140 m; still inside the quantum), not explained
    # yet. DataLoader workers run with one thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        back = q.dequantize(torch.from_numpy(codes.astype(np.int32))[None, None], "m")[0, 0].numpy()
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(q.quantize(back), codes)  # each code's depth is inside its own quantum
    # The distances in float64: float32 logs of the test itself were off by more than the 1e-6 allowed.
    back, depth = back.astype(np.float64), depth.astype(np.float64)
    if use_log:  # half a quantum in log(depth + shift)
        step = (math.log(10.0 + 3.5) - math.log(0.01 + 3.5)) / DEPTH_QMAX
        assert np.all(np.abs(np.log(back + 3.5) - np.log(depth + 3.5)) <= step / 2 + 1e-6)
    else:
        assert np.all(np.abs(back - depth) <= (10.0 - 0.01) / DEPTH_QMAX / 2 + 1e-6)


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (
            {"video.depth_max": 0.005},
            r"Invalid video\.depth_max \(0\.005\)\. Expected more than video\.depth_min",
        ),
        (
            {"video.shift": -0.02},
            r"Invalid video\.shift \(-0\.02\)\. Expected video\.depth_min \+ video\.shift > 0",
        ),
        ({"video.depth_min": "near"}, r"Invalid video\.depth_min \('near'\)\. Expected a finite number"),
        ({"video.pix_fmt": "yuv420p"}, r"Invalid video\.pix_fmt \('yuv420p'\) of a depth map"),
    ],
    ids=["max", "shift", "type", "pix-fmt"],
)
def test_invalid_quantizers_are_refused_naming_the_camera(
    depth_ds: dict[str, Path], copy_ds: Any, info: dict, message: str
) -> None:
    root = copy_ds(depth_ds["copy"])
    path = root / "meta/info.json"
    doc = json.loads(path.read_text())
    doc["features"][DEPTH]["info"].update(info)
    path.write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match=rf"meta/info\.json: Invalid depth camera '{DEPTH}': {message}"):
        EpisodeStream(root)


@pytest.mark.parametrize("layout", ["v3", "copy", "hevc"])
@pytest.mark.parametrize("unit", ["mm", "m"])
def test_depth_is_the_quantizers_inverse_in_every_layout(
    depth_ds: dict[str, Path], layout: str, unit: str
) -> None:
    seen = 0
    for item in EpisodeStream(depth_ds[layout], depth_output_unit=unit, seed=1, episode_pool_size=2):
        episode, frame = int(item["episode_index"]), int(item["frame_index"])
        depth = item[DEPTH]
        assert depth.dtype == torch.float32 and depth.shape == (1, H, W)
        assert torch.equal(depth, expected_depth(episode, frame, unit)), (episode, frame)
        assert read_frame_id(item[RGB])[:2] == (episode, frame)  # the RGB camera is untouched
        seen += 1
    assert seen == sum(SampleSpec(**DEPTH_SPEC).lengths())


def test_millimetres_are_rounded_metres(depth_ds: dict[str, Path]) -> None:
    mm = next(iter(EpisodeStream(depth_ds["copy"], shuffle=False)))[DEPTH]
    m = next(iter(EpisodeStream(depth_ds["copy"], shuffle=False, depth_output_unit="m")))[DEPTH]
    assert torch.equal(mm, (m * 1000.0).round())
    assert float(mm.min()) >= 300.0 and float(mm.max()) <= 2500.0
    with pytest.raises(ValueError, match=r"Invalid depth_output_unit \('cm'\)\. Expected 'mm' or 'm'\."):
        EpisodeStream(depth_ds["copy"], depth_output_unit="cm")  # type: ignore[arg-type]


@pytest.mark.integration
def test_depth_windows_transforms_and_spawn_workers(depth_ds: dict[str, Path]) -> None:
    stream = EpisodeStream(
        depth_ds["copy"],
        delta_timestamps={DEPTH: [-2 / 30, 0.0, 1 / 30]},
        image_transforms=torch.neg,  # applied to RGB only, as lerobot does
        return_uint8=True,
        seed=2,
    )
    loader = DataLoader(stream, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    lengths = {}
    items = [dict(zip(b, vals, strict=True)) for b in loader for vals in zip(*b.values(), strict=True)]
    for item in items:
        lengths[int(item["episode_index"])] = max(
            lengths.get(int(item["episode_index"]), 0), int(item["frame_index"]) + 1
        )
    for item in items:
        episode, frame = int(item["episode_index"]), int(item["frame_index"])
        window = item[DEPTH]
        assert window.shape == (3, 1, H, W) and window.dtype == torch.float32
        for row, delta in enumerate((-2, 0, 1)):
            clamped = min(max(frame + delta, 0), lengths[episode] - 1)
            assert torch.equal(window[row], expected_depth(episode, clamped)), (episode, frame, delta)
        assert item[f"{DEPTH}_is_pad"].tolist() == [frame - 2 < 0, False, frame + 1 >= lengths[episode]]
    assert len(items) == sum(lengths.values())


def test_a_depth_stream_in_another_pixel_format_is_a_decode_error(
    depth_ds: dict[str, Path], copy_ds: Any
) -> None:
    root = copy_ds(depth_ds["v3"])
    path = root / "meta/info.json"
    doc = json.loads(path.read_text())
    doc["features"][DEPTH]["info"]["video.pix_fmt"] = "gray16le"  # the files hold gray12le
    path.write_text(json.dumps(doc))
    with pytest.raises(
        DecodeError,
        match=rf"Invalid video .*videos/{DEPTH}/chunk-000/file-000\.mp4 \(episode 0, camera '{DEPTH}'\): "
        r"pixel format 'gray12le'\. Expected 'gray16le'",
    ):
        list(EpisodeStream(root, episodes=[0]))


def test_reshard_keeps_depth_lossless_and_verify_proves_it(depth_ds: dict[str, Path]) -> None:
    import av

    for mode in ("copy", "hevc"):
        for path in sorted((depth_ds[mode] / "videos" / DEPTH).rglob("*.mp4")):
            with av.open(str(path)) as container:
                context = container.streams.video[0].codec_context
                assert (context.name, context.pix_fmt) == ("hevc", "gray12le"), path
        info = json.loads((depth_ds[mode] / "meta/info.json").read_text())["features"][DEPTH]["info"]
        assert info["is_depth_map"] is True and info["video.pix_fmt"] == "gray12le"
        assert info["video.depth_max"] == 10.0 and info["depth_unit"] == "mm"
        result = CliRunner().invoke(cli, ["verify", str(depth_ds[mode]), "--against", str(depth_ds["v3"])])
        assert result.exit_code == 0, result.output
    assert f"depth cameras {DEPTH} kept as they were (lossless" in str(depth_ds["hevc-output"])


def test_verify_fails_a_depth_stream_degraded_to_8_bits(
    depth_ds: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reshard.job import execute
    from reshard.job.execute import ReshardOptions
    from reshard.job.run import reshard

    # What lrs 0.1 did: --video hevc re-encoded depth streams to 8-bit yuv420p like any camera.
    monkeypatch.setattr(execute, "is_depth", lambda feature: False)
    out = tmp_path / "degraded"
    reshard(str(depth_ds["v3"]), out, options=ReshardOptions(video="hevc"), workers=1, quiet=True)
    result = CliRunner().invoke(cli, ["verify", str(out), "--against", str(depth_ds["v3"])])
    assert result.exit_code == 1
    assert "episode 0: Invalid depth frames (not the source's codes)" in result.output
    with pytest.raises(DatasetError, match=r"Invalid video\.pix_fmt \('yuv420p'\) of a depth map"):
        EpisodeStream(out)  # and the reader refuses it instead of returning wrong depth


@pytest.mark.parametrize("channels_last", [False, True])
def test_batch_loader_at_float32_converts_rgb_in_the_batch_and_leaves_depth_alone(
    depth_ds: dict[str, Path], channels_last: bool
) -> None:
    """BatchLoader decodes RGB as uint8 and writes it into the float32 batch (one pass); depth maps are
    dequantized codes, not /255: batch for batch what the DataLoader gives."""
    options = {"delta_timestamps": {DEPTH: [-1 / 30, 0.0]}, "seed": 4, "episode_pool_size": 2}
    want = list(DataLoader(EpisodeStream(depth_ds["copy"], **options), batch_size=3, collate_fn=collate))
    got = list(BatchLoader(EpisodeStream(depth_ds["copy"], **options), 3, channels_last=channels_last))
    assert len(got) == len(want) > 1
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)
        assert g[RGB].dtype == g[DEPTH].dtype == torch.float32
        for key in (RGB, DEPTH, "index"):
            assert torch.equal(g[key], w[key]), key


def _collect_in_worker(worker_id: int) -> None:
    import gc

    gc.collect()  # what a worker's allocations trigger sooner or later


def test_fork_workers_after_a_depth_stream_in_the_main_process(
    depth_ds: dict[str, Path], small_lrs: Path
) -> None:
    """A depth stream read in the trainer's process leaves PyAV containers for the collector; a fork
    worker inherits them, and freeing one there used to join FFmpeg threads the child does not have
    (a hang). Depth decoders run on one FFmpeg thread, as the torchcodec ones do."""
    import gc

    gc.disable()  # keep the main process's garbage for the fork, as a busy trainer's collector may
    try:
        stream = EpisodeStream(depth_ds["copy"], seed=1)
        assert sum(1 for _ in DataLoader(stream, batch_size=4)) > 0
        del stream
        loader = DataLoader(
            EpisodeStream(small_lrs, seed=1),
            batch_size=8,
            num_workers=1,
            multiprocessing_context="fork",
            worker_init_fn=_collect_in_worker,
            timeout=60,
        )
        assert sum(len(batch["index"]) for batch in loader) > 0
    finally:
        gc.enable()


def test_depth_cursors_decode_their_tail_ahead_with_the_same_values(
    depth_ds: dict[str, Path], held_bytes: list[int]
) -> None:
    options = {"seed": 3, "episode_pool_size": 2, "delta_timestamps": {DEPTH: [-2 / 30, 0.0, 1 / 30]}}
    want = epoch_with_tail_buffer(depth_ds["copy"], 0, **options)
    for budget in (256 * 2**20, 6 * 2 * H * W):
        held_bytes.clear()
        got = epoch_with_tail_buffer(depth_ds["copy"], budget, **options)
        for step, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_items_equal(a, b, context=f"budget {budget} step {step}")
        assert len(got) == len(want) and held_bytes and min(held_bytes) >= 0 and max(held_bytes) <= budget
