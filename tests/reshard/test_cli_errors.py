"""The command line as a newcomer meets it: bad input gets one line and the documented exit code (2 usage,
3 data or I/O, 1 a failed check), checked before any work, leaving nothing behind."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.errors import ReshardError
from reshard.job.run import reshard, slurm_part


def lrs(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output.strip().splitlines()[-1] if result.output.strip() else ""


def test_sample_refuses_a_directory_that_holds_files(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "keep.txt").write_text("mine")
    code, line = lrs("sample", str(tmp_path / "ds"), "--quiet")
    assert (code, line) == (
        2,
        f"Error: Invalid DIRECTORY ({tmp_path / 'ds'}). Expected a new or empty directory.",
    )
    assert os.listdir(tmp_path / "ds") == ["keep.txt"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--height", "49"], "Error: Invalid height (49). Expected even (odd only in yuv444p) and >= 48."),
        (
            ["--min-length", "50", "--max-length", "10"],
            "Error: Invalid min_length/max_length (50/10). Expected 1 <= min <= max.",
        ),
    ],
    ids=["odd-height", "min-over-max"],
)
def test_sample_options_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    assert lrs("sample", str(tmp_path / "ds"), "--quiet", *args) == (2, message)
    assert not (tmp_path / "ds").exists()


def test_verify_of_no_dataset_is_an_input_error_not_a_failed_check(tmp_path: Path) -> None:
    code, line = lrs("verify", str(tmp_path / "nothing"))
    assert (code, line) == (
        3,
        f"Error: {tmp_path / 'nothing'}/meta/info.json: missing: not a LeRobot dataset root",
    )


def test_a_bad_preset_is_refused_before_any_work(sample_ds: Path, tmp_path: Path) -> None:
    code, line = lrs(
        "reshard", str(sample_ds), "--out", str(tmp_path / "out"), "--video", "hevc", "--preset", "bogus"
    )
    assert code == 2 and line.startswith(
        "Error: Invalid preset ('bogus') for --video hevc. Expected one of ["
    )
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--tune", "fastdecode"],
            "Error: Invalid tune ('fastdecode') for --video copy. Expected --video hevc or h264: a copy keeps "
            "the source's encoding.",
        ),
        (
            ["--video", "hevc", "--tune", "stillimage"],
            "Error: Invalid tune ('stillimage') for --video hevc. Expected one of ['psnr', 'ssim', 'grain', "
            "'zerolatency', 'fastdecode', 'animation'].",
        ),
        (
            ["--resize", "224x224"],
            "Error: Invalid resize ('224x224') for --video copy. Expected --video hevc or h264: a copy keeps "
            "the source's frames.",
        ),
        (
            ["--video", "h264", "--resize", "224"],
            "Error: Invalid resize ('224'). Expected WIDTHxHEIGHT in pixels, e.g. 224x224.",
        ),
        (
            ["--video", "h264", "--resize", "225x224"],
            "Error: Invalid resize width (225). Expected an even number of pixels in 2..8192 (4:2:0 holds even "
            "sizes).",
        ),
        (
            ["--video", "hevc", "--resize-filter", "bicubic"],
            "Error: Invalid resize_filter ('bicubic') without a resize. Expected --resize WxH.",
        ),
    ],
    ids=["tune-copy", "tune-not-x265s", "resize-copy", "resize-not-wxh", "resize-odd", "filter-no-resize"],
)
def test_reencode_options_are_refused_before_any_work(
    sample_ds: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    assert lrs("reshard", str(sample_ds), "--out", str(tmp_path / "out"), *args) == (2, message)
    assert os.listdir(tmp_path) == []


def test_a_work_dir_on_another_filesystem_is_refused_before_any_work(sample_ds: Path, tmp_path: Path) -> None:
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem here")
    work = other / f"lrs-test-{os.getpid()}"
    code, line = lrs("reshard", str(sample_ds), "--out", str(tmp_path / "out"), "--work-dir", str(work))
    assert code == 3 and line.startswith(f"Error: Invalid work directory ({work}): on another filesystem")
    assert os.listdir(tmp_path) == [] and not work.exists()


def test_slurm_arrays_with_a_step_map_to_parts() -> None:
    env = {"SLURM_ARRAY_TASK_COUNT": "32", "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_MIN": "0"}
    assert [slurm_part({**env, "SLURM_ARRAY_TASK_ID": str(t)}) for t in (0, 2, 62)] == [
        (0, 32),
        (1, 32),
        (31, 32),
    ]
    assert slurm_part({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "8"}) == (7, 8)
    for task in ("61", "64", "x"):
        with pytest.raises(ReshardError, match=r"Invalid SLURM array (task|variables)"):
            slurm_part({**env, "SLURM_ARRAY_TASK_ID": task})


def test_inspect_names_a_data_file_that_is_not_parquet(sample_ds: Path, copy_ds: Any) -> None:
    root = copy_ds(sample_ds)
    (root / "data/chunk-000/file-000.parquet").write_bytes(b"garbage")
    code, line = lrs("inspect", str(root))
    assert code == 3
    assert line.startswith(f"Error: {root}/data/chunk-000/file-000.parquet: Invalid parquet file (")


def test_an_out_inside_or_around_the_source_is_refused(sample_ds: Path, tmp_path: Path) -> None:
    import shutil

    src = tmp_path / "src"
    shutil.copytree(sample_ds, src)
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    for out, word in ((src / "out", "inside"), (src, "overlapping"), (tmp_path, "overlapping")):
        code, line = lrs("reshard", str(src), "--out", str(out), "-q")
        assert code == 3 and line.startswith(f"Error: Invalid --out ({out}): {word} the source dataset"), line
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


@pytest.mark.parametrize(
    ("args", "name", "url"),
    [
        (["reshard", "SRC", "--out", "s3://my-bucket/direct"], "--out", "s3://my-bucket/direct"),
        (["reshard", "SRC", "--out", "hf://buckets/me/x"], "--out", "hf://buckets/me/x"),
        (["reshard", "SRC", "--out", "o", "--work-dir", "gs://b/work"], "--work-dir", "gs://b/work"),
        (["prewarm", "SRC", "--cache-dir", "s3://x/cache"], "--cache-dir", "s3://x/cache"),
        (["sample", "s3://x/ds", "-q"], "DIRECTORY", "s3://x/ds"),
        (["demo", "--workdir", "hf://buckets/me/demo"], "--workdir", "hf://buckets/me/demo"),
        (["push", "s3://x/ds", "file:///nowhere/bucket"], "DATASET", "s3://x/ds"),
        (["reshard", "SRC", "--out", "s3://key:secret@b/x"], "--out", "s3://<redacted>@b/x"),
    ],
    ids=["reshard-s3", "reshard-hf", "work-dir-gs", "prewarm-cache", "sample", "demo", "push-dir", "secret"],
)
def test_a_url_where_a_local_directory_goes_is_refused_and_makes_no_folder(
    args: list[str], name: str, url: str, sample_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, line = lrs(*[str(sample_ds) if a == "SRC" else a for a in args])
    assert code == 2
    assert f"Invalid {name} ({url}): a URL. Expected a local directory; " in line, line
    assert "Invalid value for" not in line, line  # click's prefix before our own, said once
    assert os.listdir(tmp_path) == []


def test_a_file_url_is_the_local_directory_it_names(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "my out"
    code, line = lrs("reshard", str(sample_ds), "--out", out.as_uri(), "-q")
    assert code == 0 and line.startswith(f"resharded 8 episodes into {out} in ")
    assert (out / "meta/lrs/layout.json").exists()
    with pytest.raises(
        ReshardError, match=r"Invalid --out \(s3://b/x\): a URL\. Expected a local directory; "
    ):
        reshard(str(sample_ds), "s3://b/x", quiet=True)


@pytest.fixture
def immutable(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A folder no one can create anything in, root included (`chattr +i`)."""
    import subprocess

    locked = tmp_path / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a filesystem that has it)")
    yield locked
    subprocess.run(["chattr", "-i", str(locked)], check=True)


@pytest.mark.parametrize(
    ("args", "made"),
    [
        (["reshard", "{src}", "--out", "{locked}/out", "--quiet"], ".out.lrs-work"),
        (["prewarm", "file://{src}", "--cache-dir", "{locked}/c", "--quiet"], "c"),
        (["sample", "{locked}/s", "--quiet"], ".sample-"),
        (["demo", "--workdir", "{locked}/d"], "d"),
    ],
    ids=["reshard", "prewarm", "sample", "demo"],
)
def test_an_unwritable_folder_is_one_line(
    sample_ds: Path, immutable: Path, args: list[str], made: str
) -> None:
    code, line = lrs(*[a.format(src=sample_ds, locked=immutable) for a in args])
    assert code == 3
    assert re.fullmatch(
        rf"Error: Invalid path \({re.escape(str(immutable))}/{re.escape(made)}[^)]*\): Operation not permitted\. "
        r"Expected a folder you can write \(its permissions, a read-only mount, chattr \+i\)\.",
        line,
    ), line


def test_a_stream_over_an_unwritable_cache_folder_is_a_path_error(
    sample_resharded_ds: Path, immutable: Path
) -> None:
    from cache import PathError
    from reader import EpisodeStream

    with pytest.raises(PathError, match=rf"Invalid path \({immutable}/c\): Operation not permitted"):
        next(iter(EpisodeStream(f"file://{sample_resharded_ds}", cache_dir=str(immutable / "c"))))


def test_a_new_cache_on_a_full_disk_is_one_line(sample_resharded_ds: Path, tmp_path: Path) -> None:
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True
    ).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        with contextlib.suppress(OSError), open(disk / "fill", "wb") as f:
            f.write(b"\0" * (1 << 20))
        code, line = lrs(
            "prewarm", f"file://{sample_resharded_ds}", "--cache-dir", str(disk / "new"), "--quiet"
        )
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)
    assert code == 3
    assert line.startswith(
        f"Error: Could not write the cache ledger ({disk}/new/.lrs/ledger.sqlite): No space left"
    )


def test_an_unfinalized_recording_is_named_as_such(sample_ds: Path, tmp_path: Path) -> None:
    """lerobot writes meta/episodes at finalize(): a dataset with data and videos but no episode table
    yet is a recording not finalized, and the line says so."""
    import shutil

    src = Path(shutil.copytree(sample_ds, tmp_path / "rec"))
    shutil.rmtree(src / "meta" / "episodes")
    code, line = lrs("reshard", str(src), "--out", str(tmp_path / "out"), "--quiet")
    assert code == 3
    assert line == (
        f"Error: {src}/meta/episodes/chunk-000/file-000.parquet: missing: 0 of total_episodes=8 episodes found "
        "before it; the dataset looks unfinalized (lerobot writes meta/episodes when the recorder calls "
        "finalize()): finish or finalize the recording first"
    )


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_doctor_of_no_dataset_is_bad_input_not_a_defect(tmp_path: Path, json_flag: list[str]) -> None:
    """Exit 1 is a dataset with defects; a folder with no dataset at all is bad input (exit 3)."""
    assert lrs("doctor", str(tmp_path), *json_flag, "--quiet") == (
        3,
        f"Error: {tmp_path}/meta/info.json: missing: not a LeRobot v3 dataset root",
    )


def test_verify_of_an_output_a_reshard_is_writing_names_the_reshard(tmp_path: Path) -> None:
    from reshard.job.lock import job_lock
    from reshard.job.run import default_work_dir

    out = tmp_path / "out"
    with job_lock(default_work_dir(out), out, part=None, what="reshard"):
        code, line = lrs("verify", str(out))
    assert code == 3
    assert re.fullmatch(
        rf"Error: {re.escape(str(out))}/meta/info\.json: missing: not a LeRobot dataset root yet: a reshard is "
        r"writing it \(.*reshard.*\)\. Expected it finished: rerun verify when that reshard has ended",
        line,
    ), line
    assert lrs("verify", str(out))[1].endswith("missing: not a LeRobot dataset root")  # once it has ended
