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

from tests.support.datasets import resharded, v3_sample
from tests.support.slurm_cluster import CLUSTER_SH, SlurmCluster


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
