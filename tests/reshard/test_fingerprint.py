"""A reshard knows its source: a source changed since (episodes appended, metadata edited) is refused by
a rerun, a part and a finalize, and named as another version by `verify --against`, never reported
complete. Growth is simulated by writing a sample with more episodes over the same path."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reader.format.index import LAYOUT_JSON
from reshard.cli import cli
from reshard.demo.sample import write_sample
from reshard.errors import ReshardError
from reshard.job.execute import KILL_ENV
from reshard.job.run import default_work_dir, reshard
from reshard.source.fingerprint import SourceFingerprint, describe_change
from reshard.source.model import open_source
from reshard.verify import verify

SMALL = {"episodes": 3, "cameras": 1, "min_length": 6, "max_length": 10, "episodes_per_data_file": 2}
CHANGED = r"Invalid source \(.*\): changed since"


def grow(src: Path, episodes: int) -> None:
    """The source as lerobot leaves it after `save_episode` + `finalize`: more episodes, same path."""
    shutil.rmtree(src)
    write_sample(src, **{**SMALL, "episodes": episodes})


def lrs(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output.strip().splitlines()[-1] if result.output.strip() else ""


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_sample(tmp_path / "src", **SMALL)


def test_the_fingerprint_hashes_the_metadata_files_and_names_what_changed(src: Path) -> None:
    before = open_source(str(src)).fingerprint
    assert before is not None
    assert sorted(before.files) == [
        "meta/episodes/chunk-000/file-000.parquet", "meta/info.json", "meta/stats.json", "meta/tasks.parquet",
    ]  # fmt: skip
    assert (before.episodes, SourceFingerprint.from_json(before.to_json())) == (3, before)
    assert open_source(str(src)).fingerprint == before  # a pure function of the bytes
    grow(src, 4)
    after = open_source(str(src)).fingerprint
    assert after is not None
    change = describe_change(before, after)
    assert change.startswith(f"episodes: 3 -> 4, frames: {before.frames} -> {after.frames}; ")
    assert "meta/info.json" in change and "meta/episodes/chunk-000/file-000.parquet" in change
    edited = SourceFingerprint({**before.files, "meta/extra.json": "0"}, before.episodes, before.frames)
    assert describe_change(before, edited) == "meta/extra.json added"
    assert SourceFingerprint.from_json({"files": "x"}) is None


def test_a_rerun_after_the_source_grew_is_refused_not_complete(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    reshard(str(src), out, quiet=True)
    layout = json.loads((out / LAYOUT_JSON).read_text())
    assert layout["source"]["fingerprint"]["episodes"] == 3
    grow(src, 4)
    code, line = lrs("reshard", str(src), "--out", str(out), "--quiet")
    assert code == 3
    assert line.startswith(
        f"Error: Invalid source ({src}): changed since {out} was resharded from it (episodes: 3 -> 4"
    )
    assert line.endswith(f"remove {out} (or choose another --out) to reshard the source as it is now.")
    # verify --against names the other version instead of listing its consequences.
    report = verify(str(out), against=str(src))
    assert report.failed_check == "source-tables"
    assert report.violations[0].message.startswith(
        f"{out} was resharded from another version of {src}: episodes: 3 -> 4"
    )
    shutil.rmtree(out)
    assert reshard(str(src), out, quiet=True).episodes == 4  # the way to start over works


def test_an_interrupted_reshard_then_a_grown_source_is_refused_by_rerun_part_and_finalize(
    src: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from reshard.cli import main; main()",
            "reshard",
            str(src),
            "--out",
            str(out),
            "-q",
        ],
        env={**os.environ, KILL_ENV: "recorded:2"},
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    work = default_work_dir(out)
    assert (work / "source.json").exists()
    grow(src, 5)
    for extra in ([], ["--part", "0/2"], ["--finalize"]):
        code, line = lrs("reshard", str(src), "--out", str(out), "--quiet", *extra)
        assert code == 3, (extra, line)
        assert line.startswith(
            f"Error: Invalid source ({src}): changed since the unfinished reshard in {work}"
        )
        assert "(episodes: 3 -> 5" in line and f"remove {work} (and {out}) to start over" in line
    assert not (out / LAYOUT_JSON).exists()


def test_parts_of_one_job_see_the_source_change_between_them(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    reshard(str(src), out, part=(0, 2), quiet=True)
    (src / "meta/tasks.parquet").write_bytes((src / "meta/tasks.parquet").read_bytes())  # same bytes: fine
    reshard(str(src), out, part=(1, 2), quiet=True)
    info = json.loads((src / "meta/info.json").read_text())
    info["robot_type"] = "another"
    (src / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ReshardError, match=CHANGED + r".*\(meta/info\.json differs\)"):
        reshard(str(src), out, finalize_only=True, quiet=True)


def test_an_output_without_a_fingerprint_is_taken_as_it_is(src: Path, tmp_path: Path) -> None:
    """Outputs of an lrs that recorded no fingerprint stay complete (nothing to compare)."""
    out = tmp_path / "out"
    reshard(str(src), out, quiet=True)
    layout = json.loads((out / LAYOUT_JSON).read_text())
    del layout["source"]["fingerprint"]
    (out / LAYOUT_JSON).write_text(json.dumps(layout))
    assert reshard(str(src), out, quiet=True).already_complete
