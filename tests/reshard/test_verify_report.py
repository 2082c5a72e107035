"""`lrs verify --against SOURCE --report FILE.html`: the page a person looks at.

Fast: what `report_frames` keeps (the worst frames, one per episode, the same however the work is split)
and what the page holds (self-contained: every image a `data:` URI, the chart inline SVG, nothing
fetched), from made-up comparisons; the usage error. Integration: a sample resharded to HEVC, verified
with `--report`, opened in Debian's chromium (headless, driven by Selenium; `scripts/browser.sh` installs
both): every image loads, a chart per camera, nothing logged to the console, nothing requested.
`LRS_REPORT_SCREENSHOT=$PWD/docs/img/verify-report.png pytest --basetemp=/tmp/lrs -k browser` also saves
the screenshot the docs show.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import math
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from reshard.cli import cli
from reshard.verify import VerifyReport, VideoQuality, Violation
from reshard.verify.report_frames import AMPLIFY, CameraLook, ReportLook, VideoLook, WorstFrame, WorstFrames
from reshard.verify.report_page import psnr_chart, report_page, write_report_page
from reshard.video.compare import ColourFit

ROOT = Path(__file__).resolve().parents[2]
CAM = "observation.images.cam0"


def _pair(seed: int, size: tuple[int, int] = (48, 64), noise: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    source = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    output = np.clip(source.astype(np.int16) + rng.integers(-noise, noise + 1, source.shape), 0, 255)
    return source, output.astype(np.uint8)


def _look(episode: int, errors: dict[int, float], key: str = CAM) -> VideoLook:
    """A `VideoLook` that saw frames with these mean squared errors."""
    look = VideoLook(episode, key)
    for frame, mse in errors.items():
        look(frame, *_pair(episode * 100 + frame), mse)
    return look


def _ranks(frames: tuple[WorstFrame, ...]) -> list[tuple[int, int, float]]:
    return [(f.episode, f.frame, f.mse) for f in frames]


def test_a_video_keeps_its_worst_pair_and_a_camera_its_worst_episodes() -> None:
    worst = WorstFrames(2)
    for episode, errors in enumerate([{0: 1.0, 5: 9.0}, {3: 2.0}, {1: 30.0, 2: 4.0}, {7: 9.0}]):
        worst.offer(_look(episode, errors))
    worst.offer(VideoLook(9, CAM))  # identical frames: nothing to show
    # One frame per episode, worst first; equal errors by episode.
    assert _ranks(worst.frames()) == [(2, 1, 30.0), (0, 5, 9.0)]


def test_the_frames_kept_do_not_depend_on_the_split() -> None:
    looks = [_look(e, {f: float((e * 7 + f * 3) % 11) for f in range(4)}) for e in range(9)]
    whole = WorstFrames(3)
    for look in looks:
        whole.offer(look)
    merged = WorstFrames(3)
    for part in (looks[:2], looks[2:5], looks[5:]):
        kept = WorstFrames(3)
        for look in part:
            kept.offer(look)
        merged.add(kept.frames())
    assert _ranks(merged.frames()) == _ranks(whole.frames())
    assert len(whole.frames()) == 3


def test_a_worst_frame_is_three_pngs_and_the_difference_is_amplified() -> None:
    source, output = _pair(1, noise=3)
    frame = WorstFrame.of(4, CAM, 7, source, output, 5.0)
    images = [
        Image.open(io.BytesIO(png)) for png in (frame.source_png, frame.output_png, frame.difference_png)
    ]
    assert (
        [(i.format, i.size) for i in images]
        == [("PNG", (64, 48))] * 3
        == [("PNG", (frame.width, frame.height))] * 3
    )
    assert np.array_equal(np.asarray(images[0]), source) and np.array_equal(np.asarray(images[1]), output)
    expected = np.abs(output.astype(int) - source.astype(int)) * AMPLIFY
    assert np.array_equal(np.asarray(images[2]), expected)
    assert frame.psnr_db == pytest.approx(10 * math.log10(255**2 / 5.0))


def test_a_large_frame_is_kept_small() -> None:
    frame = WorstFrame.of(0, CAM, 0, *_pair(2, size=(320, 1000)), 3.0)
    assert (frame.width, frame.height) == (640, 205)
    assert Image.open(io.BytesIO(frame.output_png)).size == (640, 205)


def _report(*, key: str = CAM) -> VerifyReport:
    videos = (
        VideoQuality(0, key, True, False, 36.5, 40.1, 1.001, 0.0002),
        VideoQuality(1, key, True, False, 33.0, 38.0, 0.999, -0.0004),
        VideoQuality(2, key, False, True, math.inf, math.inf),
    )
    worst = WorstFrames(2)
    worst.offer(_look(1, {3: 32.5}, key))
    worst.offer(_look(0, {9: 14.5}, key))
    camera = CameraLook(
        key=key,
        videos=3,
        frames=90,
        bytes=45_000,
        decode_s=0.045,
        source_bytes=30_000,
        source_frames=100,
        source_decode_s=0.09,
        colour=ColourFit.of(*_pair(3)),
        worst=worst.frames(),
    )
    return VerifyReport(
        "out",
        "v3",
        ("layout", "files", "tables", "pointers", "videos", "source-tables", "source-videos"),
        videos=videos,
        look=ReportLook(30.0, (camera,)),
    )


def _sources(page: str) -> list[str]:
    return re.findall(r'\b(?:src|href)="([^"]*)"', page)


def test_the_page_holds_everything_it_shows() -> None:
    page = report_page(_report())
    # Nothing to fetch: every image inline, no script, no stylesheet link, no URL but the SVG namespace.
    sources = _sources(page)
    assert len(sources) == 6 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "<script" not in page and "<link" not in page
    assert re.findall(r"https?://[^\s\"']+", page) == ["http://www.w3.org/2000/svg"]
    for uri in sources:
        assert Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).format == "PNG"
    # The camera's figures, worst frame first.
    text = re.sub(r"<[^>]+>", " ", page)
    assert text.index("episode 1, frame 3: PSNR 33.01 dB") < text.index("episode 0, frame 9: PSNR 36.52 dB")
    for line in (
        "bytes per frame",
        "500 (source 300, 1.67x)",
        "0.500 ms (source 1.000 ms, 0.50x)",
        "colour fit",
    ):
        assert line in text, line
    assert "worst frame PSNR" in text and "33.00 dB (floor 30 dB)" in text
    assert page.count("<svg") == 1 and page.count("<circle") == 4  # two series, two finite episodes
    assert page.count("identical</title>") == 2  # episode 2 on the top edge, in both series


def test_a_name_from_the_dataset_is_text_on_the_page() -> None:
    page = report_page(_report(key='cam<script>alert("x")</script>'))
    assert "<script" not in page and "cam&lt;script&gt;" in page


def test_a_report_without_comparisons_says_so() -> None:
    page = report_page(VerifyReport("out", "v3", ("layout",)))
    assert "No episode video was compared" in page and "<img" not in page


def test_a_camera_read_but_not_judged_shows_its_frames() -> None:
    # `source-tables` failed: the videos were read (class 5) but `source-videos` never judged them.
    report = _report()
    page = report_page(dataclasses.replace(report, videos=(), violations=(Violation("source-tables", "x"),)))
    assert "failed: source-tables" in page and page.count("<img") == 6 and "worst frame PSNR" not in page
    assert "<details open>" in page  # verify's lines unfolded where a check failed


def test_the_chart_scales_to_its_values() -> None:
    videos = [VideoQuality(e, CAM, True, False, 20.0 + e, 25.0 + e) for e in range(300)]
    chart = psnr_chart(videos, 30.0)
    assert chart.count("<polyline") == 2 and "<circle" not in chart  # too many episodes for dots
    assert re.findall(r">(\d+)</text>", chart) == ["100", "200", "300"]


def test_the_page_is_written_atomically(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old")
    write_report_page(_report(), target)
    assert target.read_text().startswith("<!doctype html>")
    assert os.listdir(tmp_path) == ["report.html"]


def test_report_without_a_source_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["verify", str(tmp_path), "--report", str(tmp_path / "r.html")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: Invalid --report without --against. Expected --against SOURCE: the page shows each frame "
        "beside the source's."
    )
    assert not (tmp_path / "r.html").exists()


# --- in a real browser --------------------------------------------------------------------------------


def _unavailable(why: str) -> None:
    """Skip on a developer's machine; on CI the browser check must run."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (on CI the browser check must run)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's headless chromium through Selenium, offline: the driver's path is given, so Selenium
    Manager looks nothing up."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("no selenium: `make setup` installs the dev extras")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "browser.sh")], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        _unavailable(
            f"no chromium: {(done.stderr.strip().splitlines() or ['scripts/browser.sh failed'])[-1]}"
        )
    chromium, chromedriver = done.stdout.split()[-2:]
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1000,1500")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ.setdefault("SE_OFFLINE", "true")
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def hevc_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.support.datasets import resharded, v3_sample

    root = tmp_path_factory.mktemp("report")
    source = v3_sample(root / "v3", episodes=3, min_length=12, max_length=20, height=96, width=128)
    return source, resharded(source, root / "out", video="hevc")


@pytest.mark.integration
def test_the_page_opens_in_a_browser_with_every_image_and_no_error(
    hevc_pair: tuple[Path, Path], browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, out = hevc_pair
    monkeypatch.chdir(out.parent)  # relative names, as a user types them
    page = tmp_path / "report.html"
    args = ["verify", out.name, "--against", source.name, "--report", str(page), "--workers", "2"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"report: {page}" in result.output
    browser.get(page.as_uri())
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
    )
    # 2 cameras x 3 worst frames (one per episode) x source, output, difference.
    assert len(images) == 18 and all(done and w == 128 and h == 96 for done, w, h in images), images
    assert browser.execute_script("return document.querySelectorAll('svg.chart').length") == 2
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert [entry for entry in browser.get_log("browser") if entry["level"] != "INFO"] == []
    shot = os.environ.get("LRS_REPORT_SCREENSHOT")
    if shot:
        # A palette PNG of the top of the page: small enough for the docs.
        image = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
        image.quantize(colors=256).save(shot, optimize=True)


@pytest.mark.integration
def test_the_frames_kept_are_the_same_with_workers(hevc_pair: tuple[Path, Path]) -> None:
    from reshard.source.model import open_source
    from reshard.verify import verify

    source, out = hevc_pair
    one, two = (verify(str(out), against=str(source), worst_frames=3, workers=n) for n in (1, 2))
    assert one.look is not None and two.look is not None
    assert [_ranks(c.worst) for c in one.look.cameras] == [_ranks(c.worst) for c in two.look.cameras]
    assert [(c.key, c.videos, c.frames, c.bytes, c.source_bytes) for c in one.look.cameras] == [
        (c.key, c.videos, c.frames, c.bytes, c.source_bytes) for c in two.look.cameras
    ]
    camera = one.look.cameras[0]
    assert (camera.videos, camera.frames) == (3, open_source(str(source)).total_frames)
    assert camera.decode_s > 0 and camera.source_decode_s > 0 and camera.colour is not None
    assert "look" not in one.to_json()


@pytest.mark.integration
def test_a_failed_check_still_writes_the_page(hevc_pair: tuple[Path, Path], tmp_path: Path) -> None:
    source, out = hevc_pair
    page = tmp_path / "report.html"
    args = ["verify", str(out), "--against", str(source), "--report", str(page), "--min-psnr", "99"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    text = page.read_text()
    assert "failed: source-videos" in text and text.count("<img") == 18
