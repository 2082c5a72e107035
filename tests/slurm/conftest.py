"""The real SLURM cluster the `slurm` tests submit to: `scripts/slurm/cluster.sh` installs SLURM and MUNGE
with apt when missing, starts munged, slurmctld and slurmd on loopback under a temporary state directory
once per session, and stops them at the end. Where apt cannot install them the tests skip, in one line
(but on CI, where they fail)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reshard.job.execute import HOLD_ENV
from tests.support.datasets import resharded, v3_sample
from tests.support.slurm_cluster import CLUSTER_SH, ROOT, SlurmCluster

# The part test_walltime_part.py submits past its time limit.
TIMED_PART = "2/4"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    state = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        ["bash", str(CLUSTER_SH), "start", str(state)], capture_output=True, text=True, timeout=900
    )
    try:
        if started.returncode == 2 and not os.environ.get("CI"):
            pytest.skip(f"no SLURM here: {started.stderr.strip().splitlines()[-1]}")
        assert started.returncode == 0, f"cluster.sh start failed:\n{started.stderr[-3000:]}"
        yield SlurmCluster(state)
    finally:
        subprocess.run(["bash", str(CLUSTER_SH), "stop", str(state)], capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def train_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The training tests' lrs/1 dataset: 4 episodes of 10-16 frames, one camera; read-only."""
    root = tmp_path_factory.mktemp("train-ds")
    source = v3_sample(root / "v3", episodes=4, min_length=10, max_length=16, cameras=1)
    return resharded(source, root / "lrs")


@pytest.fixture(scope="session")
def timed_part(
    slurm: SlurmCluster, sample_ds: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """`TIMED_PART` of reshard.sbatch held after its first output, deaf to SIGTERM, with a time limit of 1
    minute (SLURM's unit; the controller checks limits every 30 s): its directory and job id."""
    tmp_path = tmp_path_factory.mktemp("timed")
    env = {
        "DATASET": str(sample_ds),
        "OUT": str(tmp_path / "out"),
        "PART": TIMED_PART,
        HOLD_ENV: "recorded:1:deaf",
    }
    script = ROOT / "scripts" / "slurm" / "reshard.sbatch"
    return tmp_path, slurm.sbatch(script, "--output=%x-%A_%a.out", "--time=1", env=env, cwd=tmp_path)


@pytest.fixture(autouse=True)
def _timed_part_first(request: pytest.FixtureRequest) -> None:
    """The first slurm test submits `timed_part`, so that its minute passes while the others run."""
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("timed_part")
