"""`make bench` runs every benchmark (`scripts/bench/*.py` but its `_` helpers) with `--out bench/<name>.json`
and nothing else: each one must take that option and need no other argument (a benchmark that did not
made `make bench` exit 2)."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(REPO.glob("scripts/bench/[!_]*.py"))


def test_make_bench_passes_only_out() -> None:
    loop = re.search(r"^bench:.*?(?=^\S)", (REPO / "Makefile").read_text(), flags=re.S | re.M)
    assert loop and "for script in scripts/bench/[!_]*.py" in loop[0] and "--out bench/$$name.json" in loop[0]


@pytest.mark.integration
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_benchmark_takes_out_and_no_required_argument(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--out" in done.stdout, done.stdout[:300]
    # argparse's usage paragraph: every positional or option outside [brackets] is required.
    usage = " ".join(done.stdout.split("\n\n")[0].split()).removeprefix("usage: ")
    required = re.sub(r"\[[^\]]*\]", "", usage).split()[1:]
    assert required == [], f"{script.name} requires {required}"


@pytest.mark.integration
def test_decode_cost_reports_every_layout_by_order(tmp_path: Path) -> None:
    """decode_cost.py at a tiny size: every layout (the source, the built-in reshards and a named one from
    the command line) has positive CPU ms per frame in both orders and bytes per frame, every reshard a
    comparison with the source (the copy identical, the re-encodes a finite PSNR), every round its load."""
    out = tmp_path / "decode-cost.json"
    sample = ["--episodes", "3", "--min-length", "6", "--max-length", "9", "--cameras", "1"]
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/bench/decode_cost.py"), *sample, "--height", "64", "--width", "96",
         "--rounds", "2", "--layout", "hevc-g4=--video hevc --gop 4", "--layout",
         "small=--video h264 --resize 48x32 --resize-filter bilinear", "--workdir", str(tmp_path / "work"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    layouts = report["layouts"]
    assert list(layouts) == ["source", "copy", "hevc", "h264", "hevc-g4", "small"]
    assert report["episodes"] == 3 and report["camera_frames"] == report["samples"] > 0
    for name, row in layouts.items():
        assert set(row["cpu_ms_per_frame"]) == {"stream order", "file order"}, name
        assert all(ms > 0 for ms in row["cpu_ms_per_frame"].values()), (name, row)
        assert row["bytes_per_frame"] > 0 and row["decoded_frames_per_order"] == report["camera_frames"]
    assert layouts["source"]["codecs"] == layouts["copy"]["codecs"] == ["av1"]
    assert layouts["hevc-g4"]["options"] == ["--video", "hevc", "--gop", "4"]
    assert layouts["copy"]["psnr_vs_source"]["psnr_min_db"] is None  # lossless: every frame identical
    for name in ("hevc", "h264", "hevc-g4", "small"):  # small: against the source scaled the same way
        quality = layouts[name]["psnr_vs_source"]
        assert quality["problems"] == [] and quality["psnr_min_db"] > 30, (name, quality)
    assert len(report["rounds"]) == 2
    for round_ in report["rounds"]:
        assert len(round_["load_average"]["before"]) == 3
        assert set(round_["cpu_ms_per_frame"]) == set(layouts)
    forward, backward = (round_["cases_in_order"] for round_ in report["rounds"])
    assert forward == backward[::-1] and len(forward) == 2 * len(layouts)  # interleaved


@pytest.mark.integration
def test_checkouts_compares_two_checkouts_round_by_round(tmp_path: Path) -> None:
    """An A/A run at a tiny size: every round measures both sides, in alternating order, and the ratios
    are the measured ones (not a constant)."""
    out = tmp_path / "checkouts.json"
    argv = [sys.executable, str(REPO / "scripts/bench/checkouts.py"), "--out", str(out), "--workdir",
            str(tmp_path / "work"), "--episodes", "2", "--min-length", "8", "--max-length", "12", "--cameras",
            "1", "--height", "48", "--width", "64", "--rounds", "2", "--batches", "2", "--batch-size", "2"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["order"] for r in report["rounds"]] == [["this", "baseline"], ["baseline", "this"]]
    for r in report["rounds"]:
        assert r["this"]["samples"] == r["baseline"]["samples"] > 0
        assert r["ratio_this_over_baseline"] == r["this"]["samples_per_s"] / r["baseline"]["samples_per_s"]
        assert r["cpu_ratio_this_over_baseline"] == r["this"]["cpu_s"] / r["baseline"]["cpu_s"]
    assert report["ratio_range"][0] <= report["median_ratio_this_over_baseline"] <= report["ratio_range"][1]


@pytest.mark.integration
def test_bench_reader_measures_a_named_layout(tmp_path: Path) -> None:
    """`bench_reader.py --layout`: BatchLoader and the decode floor over that reshard, run and reported."""
    out = tmp_path / "reader.json"
    names = "lrs1-small-uint8-batchloader2-channels-last,decode-only-1consumer-small"
    argv = [sys.executable, str(REPO / "scripts/bench/bench_reader.py"), "--out", str(out), "--workdir",
            str(tmp_path / "work"), "--episodes", "3", "--min-length", "20", "--max-length", "30", "--cameras",
            "1", "--height", "64", "--width", "96", "--batch-size", "4", "--repeat", "1", "--no-lerobot",
            "--layout", "small=--video h264 --resize 48x32", "--only", names]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert list(report["cases"]) == names.split(",")
    for case in report["cases"].values():
        assert case["samples"] > 0 and case["samples_per_s"] > 0, case
    layout = tmp_path / "work/layout-small"
    assert json.loads((layout / "meta/info.json").read_text())["features"]
    # the bench's tag sits beside the reshard, not in it (`lrs verify` would call it a stale index)
    assert (layout.parent / ".layout-small.bench-spec.json").is_file()
    assert sorted(p.name for p in layout.iterdir()) == ["data", "meta", "videos"]


def test_peer_resizing_matches_the_reshard_filters() -> None:
    """The lerobot case's transform: every camera frame (or window of frames) to WxH with the named filter,
    uint8 kept; area averages exactly (a 2x2 block of values averages to their mean)."""
    sys.path.insert(0, str(REPO / "scripts/bench"))
    try:
        from _peer_case import resizing
    finally:
        sys.path.remove(str(REPO / "scripts/bench"))
    import torch

    frame = torch.arange(4 * 6, dtype=torch.uint8).reshape(1, 4, 6).expand(3, 4, 6).contiguous()
    assert resizing(None) is None
    for name in ("area", "bilinear", "bicubic"):
        resize = resizing([3, 2, name])
        assert resize is not None
        single, window = resize(frame), resize(torch.stack([frame, frame]))
        assert single.shape == (3, 2, 3) and single.dtype == torch.uint8, name
        assert window.shape == (2, 3, 2, 3) and torch.equal(window[1], single), name
        # spawned DataLoader workers unpickle the dataset with its transforms
        assert torch.equal(pickle.loads(pickle.dumps(resize))(frame), single), name
    area = resizing([3, 2, "area"])
    assert area is not None and area(frame)[0, 0, 0] == round((0 + 1 + 6 + 7) / 4)
