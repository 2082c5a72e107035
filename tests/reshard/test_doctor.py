"""`lrs doctor`: every defect of a v3 dataset in one report, each naming the file, episode and field.

One fixture holds one of each defect public datasets ship (a zero-byte video inside a file of whole
episodes, a video short a tail of frames, orphan parquet and video files, a data file short a row, a
missing video); the report must list them all, with and without `--decode`, and exit 1. The clean
sample exits 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.source.checks import read_video_extent
from reshard.source.model import open_source
from tests.reshard.defects import CAM0, CAM1, shorten, video


def _doctor(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["doctor", *args, "--json", "-q"])
    return result.exit_code, json.loads(result.output)


def _found(report: dict) -> set[tuple[str, str, int | None]]:
    return {(d["check"], Path(d["file"]).name if d["file"] else "", d["episode"]) for d in report["defects"]}


@pytest.mark.parametrize("decode", [False, True], ids=["headers", "decode"])
def test_doctor_lists_every_defect(defective: Path, decode: bool) -> None:
    code, report = _doctor(str(defective), *(["--decode"] if decode else []))
    assert code == 1 and not report["clean"] and report["decoded"] == decode
    found = _found(report)
    expected = {
        *(("videos", "file-001.mp4", e) for e in (3, 4, 5)),  # zero bytes
        ("videos", "file-002.mp4", 7),  # short a tail
        ("orphans", "file-009.parquet", None),
        ("orphans", "file-009.mp4", None),
        ("rows", "file-002.parquet", 7),
        ("rows", "file-002.parquet", None),  # the row count no longer adds up
        *(("files", "file-000.mp4", e) for e in (0, 1, 2)),  # missing
    }
    assert expected <= found, sorted(expected - found)
    assert found - expected == set(), sorted(found - expected)
    assert report["defective_episodes"] == [0, 1, 2, 3, 4, 5, 7]
    for defect in report["defects"]:
        assert defect["problem"] and (defect["file"] or defect["check"] == "metadata")


def test_the_table_names_each_defect_and_a_clean_dataset_passes(defective: Path, sample_ds: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", str(defective), "-q"])
    assert result.exit_code == 1
    assert "[videos] " in result.output and "empty video file (0 bytes)" in result.output
    assert "episode 7, field 'index'" in result.output and "in 7 episodes." in result.output
    clean = CliRunner().invoke(cli, ["doctor", str(sample_ds), "-q"])
    assert clean.exit_code == 0 and clean.output.strip().endswith("no defect found.")


def test_metadata_that_does_not_load_is_one_defect(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text("{not json")  # a dataset whose metadata is broken
    code, report = _doctor(str(tmp_path))
    assert code == 1 and report["checks"] == ["metadata"]
    assert [d["check"] for d in report["defects"]] == ["metadata"]
    assert "meta/info.json" in report["defects"][0]["file"]


def test_reshard_refuses_naming_every_defective_episode(sample_ds: Path, tmp_path: Path) -> None:
    root = tmp_path / "v3"
    shutil.copytree(sample_ds, root)
    video(root, CAM1, 0).write_bytes(b"")  # episodes 0-2
    shorten(video(root, CAM0, 2), drop=5)  # episode 7
    result = CliRunner().invoke(cli, ["reshard", str(root), "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 3, result.output
    assert "4 defects in all, in episodes 0-2,7" in result.output, result.output
    assert f"`lrs doctor {root}` lists each" in result.output
    assert not (tmp_path / "out").exists()  # nothing written where reshard refuses


@pytest.mark.parametrize("decode", [False, True], ids=["packets", "decode"])
def test_a_video_cut_short_makes_exactly_its_missing_episodes_defective(
    truncated: Path, decode: bool
) -> None:
    # The file opens and its header promises every frame: only its packets show the cut, inside episode 1.
    code, report = _doctor(str(truncated), *(["--decode"] if decode else []))
    assert code == 1, report
    assert _found(report) == {("videos", "file-000.mp4", 1), ("videos", "file-000.mp4", 2)}
    assert {d["field"] for d in report["defects"]} == {f"videos/{CAM0}"}
    problem = report["defects"][0]["problem"]
    assert ("frames decoded in" if decode else "Invalid video (truncated: ") in problem, problem


@pytest.mark.parametrize("decode", [False, True], ids=["packets", "decode"])
def test_a_video_cut_before_its_index_makes_all_its_episodes_defective(
    sample_ds: Path, tmp_path: Path, decode: bool
) -> None:
    root = tmp_path / "v3"
    shutil.copytree(sample_ds, root)
    path = video(root, CAM0, 1)  # episodes 3, 4, 5; the sample writes the index at the end
    path.write_bytes(path.read_bytes()[:3000])
    code, report = _doctor(str(root), *(["--decode"] if decode else []))
    assert code == 1 and _found(report) == {("videos", "file-001.mp4", e) for e in (3, 4, 5)}, report
    assert all("not a " in d["problem"] for d in report["defects"])


def test_whole_videos_read_whole_from_their_last_gop(sample_ds: Path, sample_unaligned_ds: Path) -> None:
    # One seek to the last keyframe proves a file whole; no file of the samples is mistaken for cut short.
    for root in (sample_ds, sample_unaligned_ds):
        source = open_source(str(root))
        for rel in source.video_files():
            extent = read_video_extent(source, rel)
            assert not extent.truncated and extent.end_s > 0 and extent.frames > 0, (rel, extent)


@pytest.mark.integration
def test_doctor_exits_cleanly_every_time(truncated: Path) -> None:
    # Exit 134 ("terminate called without an active exception") was a race at interpreter exit: run the
    # command as users do, in its own process, a few times.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    command = [sys.executable, "-c", "from reshard.cli import main; main()", "-q", "doctor", str(truncated)]
    for _ in range(4):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 1, (done.returncode, done.stderr)
        assert "terminate called" not in done.stderr
