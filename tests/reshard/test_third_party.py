"""v3 datasets written the way third-party writers do (`reshard.demo.sample.THIRD_PARTY`): full-range
H.264, odd frame sizes in yuv444p, an audio track. Each reshards and verifies, or is refused in one line
before any work; and verify fails a re-encode whose colours moved even where PSNR lets it pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import av
import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.job.execute import ReshardOptions
from reshard.job.run import default_work_dir, reshard
from reshard.verify import verify
from reshard.video import write as videos
from reshard.video.encode import Colour

CAM0 = "observation.images.cam0"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def video_info(out: Path) -> dict:
    return json.loads((out / "meta/info.json").read_text())["features"][CAM0]["info"]


def test_full_range_hevc_keeps_colours_and_verifies(
    third_party: Callable[[str], Path], tmp_path: Path
) -> None:
    src, out = third_party("full-range-h264"), tmp_path / "out"
    assert run("reshard", str(src), "--out", str(out), "--video", "hevc", "-q")[0] == 0
    report = verify(str(out), against=str(src))
    assert report.ok, report.describe()
    for video in report.videos:
        assert abs(video.gain - 1) < 0.03 and abs(video.offset) < 0.01, video
    assert "re-encoded colours: gain " in report.describe()
    assert video_info(out)["video.pix_fmt"] == "yuvj420p"  # what a decoder reports for full-range 4:2:0


def test_verify_fails_a_reencode_whose_colours_moved(
    third_party: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A bug once shipped: full-range codes re-encoded as they are but tagged limited range, so every
    decoded value became about 1.15 x source - 0.07. PSNR alone passed such a dataset at 33.6 dB."""
    src, out = third_party("full-range-h264"), tmp_path / "out"
    monkeypatch.setattr(videos.Colour, "of", classmethod(lambda cls, stream: Colour()))
    reshard(str(src), out, options=ReshardOptions(video="hevc"), quiet=True)
    report = verify(str(out), against=str(src), min_psnr=20)  # PSNR lets it pass; the colours do not
    assert not report.ok and report.failed_check == "source-videos"
    (violation,) = report.violations
    assert violation.message.startswith(f"Invalid colours of {CAM0} (decoded output = 1.1"), violation
    assert all(v.gain > 1.1 and v.offset < -0.05 for v in report.videos)


def test_odd_size_reencodes_to_hevc_444(third_party: Callable[[str], Path], tmp_path: Path) -> None:
    src, out = third_party("odd-size-yuv444p"), tmp_path / "out"
    code, output = run("reshard", str(src), "--out", str(out), "--video", "hevc", "-q")
    assert code == 0, output
    info = video_info(out)
    assert (info["video.pix_fmt"], info["video.width"], info["video.height"]) == ("yuv444p", 101, 75)
    report = verify(str(out), against=str(src))
    assert report.ok, report.describe()


def test_odd_size_h264_is_refused_before_any_work(third_party: Callable[[str], Path], tmp_path: Path) -> None:
    src, out = third_party("odd-size-yuv444p"), tmp_path / "out"
    code, output = run("reshard", str(src), "--out", str(out), "--video", "h264", "-q")
    assert code == 3, output
    assert output.startswith("Error: ") and len(output.strip().splitlines()) == 1, output
    assert f"camera '{CAM0}': Invalid frame size (101x75) for --video h264" in output
    assert "file-000.mp4" in output
    assert not out.exists() and not default_work_dir(out).exists()


@pytest.mark.parametrize("mode", ["copy", "hevc"])
def test_audio_track_is_left_out_and_the_video_verifies(
    third_party: Callable[[str], Path], mode: str, tmp_path: Path
) -> None:
    src, out = third_party("audio-track"), tmp_path / "out"
    assert run("reshard", str(src), "--out", str(out), "--video", mode, "-q")[0] == 0
    report = verify(str(out), against=str(src))
    assert report.ok, report.describe()
    assert video_info(src)["has_audio"] is True and video_info(out)["has_audio"] is False
    for video in out.rglob("*.mp4"):
        with av.open(str(video)) as container:
            assert [s.type for s in container.streams] == ["video"]
