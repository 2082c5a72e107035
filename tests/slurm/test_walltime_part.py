"""A `reshard.sbatch` part killed at its time limit under a real slurmctld resumes when resubmitted. The part
is submitted as the session's first slurm test starts (`timed_part` in conftest.py): SLURM's limits are
whole minutes, checked every 30 s, so the wait overlaps the other tests, and this file runs last."""

from __future__ import annotations

from pathlib import Path

import pytest

from reshard.job.run import default_work_dir
from tests.slurm.conftest import TIMED_PART
from tests.slurm.test_reshard_array import records, submit
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm


def test_a_part_killed_at_its_time_limit_resumes(
    slurm: SlurmCluster, timed_part: tuple[Path, str], sample_ds: Path
) -> None:
    """The part held after its first output, deaf to SIGTERM: at its limit SLURM sent SIGTERM, then SIGKILL
    after KillWait (5 s); resubmitted, it keeps that output and does the rest of its part."""
    tmp_path, timed = timed_part
    out = tmp_path / "out"
    assert slurm.wait(timed, timeout_s=150) == {timed: "TIMEOUT"}
    (held,) = records(out)
    before = (default_work_dir(out) / "done" / held).stat().st_mtime_ns
    again = submit(slurm, tmp_path, sample_ds, PART=TIMED_PART)
    assert slurm.wait(again) == {again: "COMPLETED"}
    said = (tmp_path / f"lrs-reshard-{again}_4294967294.out").read_text()
    assert said.startswith(f"part {TIMED_PART} done ("), said
    assert (default_work_dir(out) / "done" / held).stat().st_mtime_ns == before
    assert len(records(out)) > 1
