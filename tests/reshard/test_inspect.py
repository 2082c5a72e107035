"""`lrs inspect`: the layout report of plain, converted, unaligned and lrs/1 datasets, local and over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.source.inspect import inspect_dataset, render
from tests.servers import RangeServer

CAM0 = "observation.images.cam0"


def test_lerobot_layout(sample_ds: Path) -> None:
    report = inspect_dataset(str(sample_ds))
    assert (report["episodes"], report["tasks"], report["lrs"]["is_lrs"]) == (8, 3, False)
    data = report["data"]
    assert (data["files"], data["row_groups"], data["page_index"]) == (3, 8, "no")
    assert data["one_episode_per_row_group"] and data["episodes_per_row_group"] == {
        "min": 1,
        "median": 1,
        "max": 1,
    }
    assert data["columns"]["action"] == "FLOAT[]" and data["columns"]["index"] == "BIGINT"
    video = report["videos"][CAM0]
    assert (video["codec"], video["gop"], video["files"], video["probed_files"]) == ("av1", 2, 3, 2)
    assert video["episode_starts_on_keyframe"] == {"aligned": 6, "probed": 6}


def test_converted_row_groups_span_episodes(sample_converted_ds: Path) -> None:
    data = inspect_dataset(str(sample_converted_ds), probe_videos=0)["data"]
    assert not data["one_episode_per_row_group"]
    assert data["episodes_per_row_group"]["max"] > 1 and data["episodes_split_across_row_groups"] > 0
    assert data["row_groups"] < 8


def test_unaligned_episode_starts_are_counted(sample_unaligned_ds: Path) -> None:
    video = inspect_dataset(str(sample_unaligned_ds), probe_videos=3)["videos"][CAM0]
    starts = video["episode_starts_on_keyframe"]
    assert starts["probed"] == 8 and 0 < starts["aligned"] < 8
    assert video["probed_gop"] == 4


def test_lrs_layout(sample_resharded_ds: Path) -> None:
    report = inspect_dataset(str(sample_resharded_ds))
    assert report["lrs"]["is_lrs"] and report["lrs"]["params"]["video"] == "copy"
    assert report["data"]["page_index"] == "yes" and report["data"]["one_episode_per_row_group"]
    assert report["videos"][CAM0]["episodes_per_file"] == {"min": 1, "median": 1, "max": 1}
    text = render(report)
    assert "lrs/1     yes" in text and "page index: yes" in text and "one episode per row group: yes" in text


def test_http_reads_only_footers(sample_ds: Path) -> None:
    with RangeServer(sample_ds) as server:
        report = inspect_dataset(server.url, probe_videos=1)
        data_gets = [r for r in server.requests if r.path.startswith("data/") and r.method == "GET"]
    assert report["data"]["row_groups"] == 8 and report["data"]["one_episode_per_row_group"]
    # One ranged read per data file (its last 64 KiB, the footer), never a whole file, once where the
    # source locates each episode's rows (`reader.format.locate`) and once to inspect; a 404 is the
    # source's probe for a data file after the last one named (`candidate_files`).
    data_gets = [r for r in data_gets if r.status != 404]
    assert data_gets and all(r.byte_range is not None for r in data_gets)
    assert len(data_gets) == 2 * report["data"]["files"]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_cli(as_json: bool, sample_ds: Path) -> None:
    args = ["inspect", str(sample_ds), "--probe-videos", "1"] + (["--json"] if as_json else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    if as_json:
        assert json.loads(result.output)["episodes"] == 8
    else:
        assert "lrs/1     no (no meta/lrs/layout.json)" in result.output
        assert f"video     {CAM0}: av1 yuv420p g=2, 3 files" in result.output


def test_cli_on_a_non_dataset(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path)])
    assert result.exit_code == 3 and "meta/info.json: missing" in result.output


def test_describe_and_inspect_print_readable_text(sample_ds: Path, sample_resharded_ds: Path) -> None:
    """No Python reprs, plurals that agree, and `describe --full` says what it checked."""
    runner = CliRunner()
    plain = runner.invoke(cli, ["describe", str(sample_ds)])
    full = runner.invoke(cli, ["describe", str(sample_ds), "--full"])
    report = runner.invoke(cli, ["inspect", str(sample_resharded_ds)])
    for result in (plain, full, report):
        assert result.exit_code == 0, result.output
        assert "{" not in result.output and "['" not in result.output and "None" not in result.output
    lines = plain.output.splitlines()
    assert lines[0] == f"dataset   {sample_ds} (LeRobot v3.0, 30 fps)"
    assert lines[1].startswith("episodes  8, ") and f"cameras   {CAM0}  av1" in lines
    assert "files     3 data files, 6 video files" in lines
    assert full.output.splitlines()[:-1] == lines
    assert full.output.splitlines()[-1].startswith("checked   every data file")
    assert "video=copy, gop=-" in report.output and "1 files" not in report.output
    as_json = json.loads(runner.invoke(cli, ["describe", str(sample_ds), "--json", "--full"]).output)
    assert as_json["episodes"] == 8 and as_json["checked"] == {"data_files": 3, "video_files": 6}
