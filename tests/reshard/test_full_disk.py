"""A disk that fills up under `lrs reshard`: one `Error:` line naming the file, exit 3, no traceback, and
no temp file left (a fresh run leaves nothing; a resumed one keeps its finished outputs).

The full disk is `RLIMIT_FSIZE` in the child (a write past the limit fails with EFBIG, as ENOSPC does on
a full filesystem; Python ignores SIGXFSZ), which needs no root and no mount.
"""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import pytest

from reshard.job.run import default_work_dir
from tests.reshard.test_reshard_resume import reshard_argv


def _reshard_with_file_limit(
    src: Path, out: Path, limit: int, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        reshard_argv(src, out, "-q", *args),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_full_disk_is_one_line_and_leaves_nothing(sample_ds: Path, tmp_path: Path, workers: str) -> None:
    out = tmp_path / "out"
    done = _reshard_with_file_limit(sample_ds, out, 8_000, "--workers", workers)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("Error: Could not write "), done.stderr
    assert "File too large. Expected room for --out and its work directory" in done.stderr
    assert not out.exists() and not default_work_dir(out).exists()


@pytest.mark.integration
def test_a_resumed_run_that_fills_the_disk_keeps_its_finished_outputs(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    work = default_work_dir(out)
    (work / "tmp").mkdir(parents=True)  # a work directory from an earlier, interrupted run
    done = _reshard_with_file_limit(sample_ds, out, 30_000)  # meta/episodes (60 kB) fails
    assert done.returncode == 3 and "File too large" in done.stderr, done.stderr[-2000:]
    assert f"finished outputs are kept in {work}: it resumes" in done.stderr
    assert list((work / "done").rglob("*.json")) and not (work / "tmp").exists()
    rerun = subprocess.run(
        reshard_argv(sample_ds, out, "-q"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stderr
    files = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert files == {
        p.relative_to(sample_resharded_ds): p.read_bytes()
        for p in sample_resharded_ds.rglob("*")
        if p.is_file()
    }
