"""Malformed sources: `lrs reshard` fails with a message naming the file and episode, exit 3, nothing left.

Each case mutates a copy of the generated sample. The run must not leave anything in --out, nor its
work directory (a fresh run that fails on bad input cleans up after itself).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.demo.sample import write_sample
from reshard.job.run import default_work_dir
from tests.reshard.defects import faststart

DATA1 = "data/chunk-000/file-001.parquet"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
CAM1_FILE1 = "videos/observation.images.cam1/chunk-000/file-001.mp4"


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def edit_rows(root: Path, rel: str, fn: Callable[[pa.Table], pa.Table]) -> None:
    path = root / rel
    table = pq.read_table(path)
    pq.write_table(fn(table).replace_schema_metadata(table.schema.metadata), path)


def set_value(table: pa.Table, column: str, row: int, value: object) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    return table.set_column(
        table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)
    )


def edit_info(root: Path, **changes: object) -> None:
    path = root / "meta/info.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def longer_last_episode(root: Path) -> None:
    """Episode 7 claims one frame more than its rows (length, dataset_to_index and total_frames agree)."""
    table = pq.read_table(root / EPISODES)
    last = table.num_rows - 1
    table = set_value(table, "length", last, table.column("length")[last].as_py() + 1)
    table = set_value(table, "dataset_to_index", last, table.column("dataset_to_index")[last].as_py() + 1)
    pq.write_table(table, root / EPISODES)
    edit_info(root, total_frames=json.loads((root / "meta/info.json").read_text())["total_frames"] + 1)


def extra_column(root: Path) -> None:
    edit_rows(root, DATA1, lambda t: t.append_column("extra", pa.array([0] * t.num_rows, pa.int32())))


# name -> (mutation of a dataset root, pattern the message must match)
CORRUPT: dict[str, tuple[Callable[[Path], None], str]] = {
    "total-frames-a-string": (
        lambda r: edit_info(r, total_frames="244"),
        r"meta/info\.json, field 'total_frames': Invalid total_frames \('244'\)\. Expected an integer >= 0",
    ),
    "chunks-size-zero": (
        lambda r: edit_info(r, chunks_size=0),
        r"meta/info\.json, field 'chunks_size': Invalid chunks_size \(0\)\. Expected an integer >= 1",
    ),
    "feature-without-dtype": (
        lambda r: edit_info(
            r,
            features={**json.loads((r / "meta/info.json").read_text())["features"], "action": {"shape": [6]}},
        ),
        r"meta/info\.json, field 'features/action': Invalid feature .*Expected an object with a dtype string",
    ),
    "truncated-parquet": (
        lambda r: truncate(r / DATA1),
        rf"{DATA1}, episode 3: not a readable parquet file",
    ),
    "missing-video": (
        lambda r: (r / CAM1_FILE1).unlink(),
        rf"{CAM1_FILE1}, episode 3, field 'videos/observation.images.cam1/file_index': missing file",
    ),
    "truncated-video": (
        lambda r: truncate(r / CAM1_FILE1),
        rf"{CAM1_FILE1}, episode 3: not a readable video",
    ),
    "duplicated-frame-index": (
        lambda r: edit_rows(r, DATA1, lambda t: set_value(t, "frame_index", 2, 1)),
        rf"{DATA1}, episode 3, field 'frame_index': Invalid frame_index \(1 duplicated",
    ),
    "missing-frame-rows": (
        lambda r: edit_rows(r, DATA1, lambda t: t.filter(pc.not_equal(t.column("frame_index"), 4))),
        rf"{DATA1}, episode 3, field 'index': Invalid rows",
    ),
    "length-disagrees-with-rows": (
        longer_last_episode,
        r"data/chunk-000/file-002\.parquet, episode 7, field 'index': Invalid rows \(\d+ rows .*\)\. Expected \d+",
    ),
    "wrong-codebase-version": (
        lambda r: edit_info(r, codebase_version="v2.1"),
        r"meta/info\.json, field 'codebase_version': Invalid codebase_version \('v2\.1'\)\. Expected 'v3\.0'\. "
        r"Convert it first",
    ),
    "escaping-data-template": (
        lambda r: edit_info(r, data_path="../../{chunk_index}/{file_index}.parquet"),
        r"meta/info\.json, field 'data_path': Invalid template .*Expected a relative path inside the dataset root",
    ),
    "other-schema": (
        extra_column,
        rf"{DATA1}, episode 3: Invalid schema \(.*extra: int32\)\. Expected the schema",
    ),
    "nan-timestamp": (
        lambda r: edit_rows(r, DATA1, lambda t: set_value(t, "timestamp", 2, float("nan"))),
        rf"{DATA1}, episode 3, field 'timestamp': Invalid timestamp \(nan\) at frame 2\. Expected a finite",
    ),
    "timestamp-going-back": (
        lambda r: edit_rows(r, DATA1, lambda t: set_value(t, "timestamp", 3, 0.0)),
        rf"{DATA1}, episode 3, field 'timestamp': Invalid timestamp \(0\.0\) at frame 3, not after frame 2's "
        r".*Expected strictly increasing",
    ),
    "timestamp-off-its-frame": (
        lambda r: edit_rows(r, DATA1, lambda t: set_value(t, "timestamp", 3, 3 / 30 + 0.01)),
        rf"{DATA1}, episode 3, field 'timestamp': Invalid timestamp \(0\.110000\) at frame 3\. Expected "
        r"frame_index / fps = 0\.100000 within 0\.0001 s",
    ),
    "stats-not-json": (
        lambda r: (r / "meta/stats.json").write_text("{nope"),
        r"meta/stats\.json: not valid JSON",
    ),
    "stats-not-numbers": (
        lambda r: (r / "meta/stats.json").write_text(json.dumps({"action": {"mean": "abc"}})),
        r"meta/stats\.json, field 'action/mean': Invalid stats \('abc'\)\. Expected a number or a list of numbers",
    ),
    "unknown-task-index": (
        lambda r: edit_rows(r, DATA1, lambda t: set_value(t, "task_index", 1, 99)),
        rf"{DATA1}, episode 3, field 'task_index': Invalid task_index \(99\) at row 1 of the episode\. "
        r"Expected < 3",
    ),
}


@pytest.fixture
def bad_source(request: pytest.FixtureRequest, sample_ds: Path, copy_ds: Callable[[Path], Path]) -> Path:
    root = copy_ds(sample_ds, "src")
    CORRUPT[request.param][0](root)
    return root


@pytest.mark.parametrize(
    ("bad_source", "name"), [(n, n) for n in CORRUPT], ids=list(CORRUPT), indirect=["bad_source"]
)
def test_bad_source_fails_cleanly(bad_source: Path, name: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["reshard", str(bad_source), "--out", str(out), "--quiet"])
    assert result.exit_code == 3, result.output
    assert result.output.startswith("Error: "), result.output
    assert len(result.output.strip().splitlines()) == 1  # one line, no traceback
    assert re.search(CORRUPT[name][1], result.output), result.output
    assert not out.exists()
    assert not default_work_dir(out).exists()


def test_empty_dataset(tmp_path: Path) -> None:
    src = write_sample(tmp_path / "empty", episodes=0)
    result = CliRunner().invoke(cli, ["reshard", str(src), "--out", str(tmp_path / "out")])
    assert result.exit_code == 3
    assert "meta/episodes: no episodes" in result.output
    assert not (tmp_path / "out").exists()


def test_not_a_dataset(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["reshard", str(tmp_path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 3
    assert "meta/info.json: missing: not a LeRobot v3 dataset root" in result.output


def test_bad_input_in_a_resumed_job_keeps_its_finished_work(
    sample_ds: Path, copy_ds: Callable[[Path], Path], tmp_path: Path
) -> None:
    """A failing part of a shared job must not delete what other parts finished."""
    src = copy_ds(sample_ds, "src")
    out = tmp_path / "out"
    assert (
        CliRunner()
        .invoke(cli, ["reshard", str(src), "--out", str(out), "--part", "1/2", "--quiet"])
        .exit_code
        == 0
    )
    records = sorted((default_work_dir(out) / "done").rglob("*.json"))
    truncate(src / DATA1)
    result = CliRunner().invoke(cli, ["reshard", str(src), "--out", str(out), "--part", "0/2", "--quiet"])
    assert result.exit_code == 3 and "not a readable parquet file" in result.output
    assert sorted((default_work_dir(out) / "done").rglob("*.json")) == records and records
    assert not out.exists()


def _faststart_truncated(root: Path) -> Path:
    """The first camera file remuxed with its index first (faststart), then cut at 60%: it opens, its
    header promises every frame, and its packets end in the middle of an episode."""
    path = root / "videos/observation.images.cam0/chunk-000/file-000.mp4"
    faststart(path)
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6)])
    return root


@pytest.mark.integration
@pytest.mark.parametrize("cut", ["at-open", "mid-stream"])
def test_a_truncated_video_is_exit_3_every_time(
    cut: str, sample_ds: Path, copy_ds: Callable[[Path], Path], tmp_path: Path
) -> None:
    """No native abort at exit (issue: 1 run in 27 ended with SIGABRT after its error): 6 runs each,
    copy and hevc, two worker processes, in new processes."""
    import subprocess
    import sys

    root = copy_ds(sample_ds, "src")
    if cut == "at-open":
        truncate(root / CAM1_FILE1)
    else:
        _faststart_truncated(root)
    for run in range(6):
        out = tmp_path / f"out{run}"
        video = "hevc" if run % 2 else "copy"
        args = ["reshard", str(root), "--out", str(out), "-q", "--workers", "2", "--video", video]
        done = subprocess.run(
            [sys.executable, "-c", "from reshard.cli import main; main()", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 3, (run, done.returncode, done.stderr[-2000:])
        assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1
        assert "terminate called" not in done.stderr and not out.exists()
        expected = ["not a readable video"] if cut == "at-open" else ["Invalid video (truncated: "]
        assert any(e in done.stderr for e in expected), done.stderr
