"""The real SLURM cluster the `slurm` tests submit to: `scripts/slurm/cluster.sh` installs SLURM and MUNGE
with apt when missing, starts munged, slurmctld and slurmd on loopback under a temporary state directory
once per session, and stops them at the end. Where apt cannot install them the tests skip, in one line
(but on CI, where they fail)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

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
