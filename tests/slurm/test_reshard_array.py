"""`scripts/slurm/reshard.sbatch` under a real slurmctld: an array of parts and a dependent finalize equal one
local run; a part cancelled mid-run resumes when resubmitted; a finalize with parts missing is refused in
one line naming them and publishes nothing. (A part killed at its time limit: test_walltime_part.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from reshard.job.execute import HOLD_ENV
from reshard.job.run import default_work_dir
from tests.reshard.test_reshard_resume import files_of
from tests.support.slurm_cluster import ROOT, SlurmCluster, poll

pytestmark = pytest.mark.slurm

RESHARD_SBATCH = ROOT / "scripts" / "slurm" / "reshard.sbatch"
PARTS = 4


def submit(slurm: SlurmCluster, tmp_path: Path, src: Path, *options: str, **env: str) -> str:
    """reshard.sbatch submitted as it is, with DATASET, OUT and `env` exported, output in tmp_path."""
    exported = {"DATASET": str(src), "OUT": str(tmp_path / "out"), **env}
    return slurm.sbatch(RESHARD_SBATCH, "--output=%x-%A_%a.out", *options, env=exported, cwd=tmp_path)


def records(out: Path) -> set[str]:
    """The outputs with a completion record in `out`'s work directory."""
    done = default_work_dir(out) / "done"
    return {str(p.relative_to(done)) for p in done.rglob("*.json")} if done.exists() else set()


def output_of(tmp_path: Path, job: str) -> str:
    """What a job that is not an array task printed: one line, or a failure of the test."""
    said = (tmp_path / f"lrs-reshard-{job}_4294967294.out").read_text()
    assert len(said.splitlines()) == 1, said
    return said


def test_an_array_of_parts_and_a_dependent_finalize_equal_one_local_run(
    slurm: SlurmCluster, sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    parts = submit(slurm, tmp_path, sample_ds, f"--array=0-{PARTS - 1}")
    final = submit(slurm, tmp_path, sample_ds, f"--dependency=afterok:{parts}", "--kill-on-invalid-dep=yes")
    assert slurm.wait(parts) == {f"{parts}_{i}": "COMPLETED" for i in range(PARTS)}
    assert slurm.wait(final) == {final: "COMPLETED"}
    assert files_of(tmp_path / "out") == files_of(sample_resharded_ds)
    assert not default_work_dir(tmp_path / "out").exists()


def test_a_cancelled_part_resumes_and_an_early_finalize_is_refused(
    slurm: SlurmCluster, sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    """Every part holds after its first output (the test hook); a finalize then is refused (the parts hold the
    job's lock); part 1 is cancelled (SIGTERM), the others go on (SIGUSR1); a finalize then is refused naming
    part 1; part 1 resubmitted resumes, and the finalize succeeds."""
    out = tmp_path / "out"
    parts = submit(slurm, tmp_path, sample_ds, f"--array=0-{PARTS - 1}", **{HOLD_ENV: "recorded:1"})
    poll(lambda: len(records(out)) == PARTS, "every part holding after its first output")
    held = records(out)
    early = submit(slurm, tmp_path, sample_ds)
    assert slurm.wait(early) == {early: "FAILED"}
    said = output_of(tmp_path, early)
    assert said.startswith(f"Error: Invalid --out ({out}): another lrs reshard is writing it (part "), said
    assert "and 3 more parts" in said and not out.exists()

    slurm.run("scancel", f"{parts}_1")
    assert slurm.wait(f"{parts}_1") == {f"{parts}_1": "CANCELLED"}
    slurm.run("scancel", "--batch", "--signal=USR1", parts)
    assert slurm.wait(parts) == {
        **{f"{parts}_{i}": "COMPLETED" for i in (0, 2, 3)},
        f"{parts}_1": "CANCELLED",
    }
    assert held <= records(out)
    before = {rel: (default_work_dir(out) / "done" / rel).stat().st_mtime_ns for rel in held}
    failed = submit(slurm, tmp_path, sample_ds)
    assert slurm.wait(failed) == {failed: "FAILED"}
    said = output_of(tmp_path, failed)
    assert said.startswith("Error: Invalid finalize (part 1 of 4 not done; "), said
    assert "rerun the missing parts, then --finalize" in said and not out.exists()

    again = submit(slurm, tmp_path, sample_ds, PART=f"1/{PARTS}")
    assert slurm.wait(again) == {again: "COMPLETED"}
    assert {rel: (default_work_dir(out) / "done" / rel).stat().st_mtime_ns for rel in held} == before
    final = submit(slurm, tmp_path, sample_ds)
    assert slurm.wait(final) == {final: "COMPLETED"}
    assert files_of(out) == files_of(sample_resharded_ds)
