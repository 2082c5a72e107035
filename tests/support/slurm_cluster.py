"""A real one-node SLURM cluster for the tests (`scripts/slurm/cluster.sh`): submit, signal and wait on
jobs with SLURM's own commands (sbatch, scancel, scontrol), polling `scontrol show job` at short intervals."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "scripts" / "slurm" / "cluster.sh"
# Where a job has finished, for good or not (`scontrol show job`'s JobState).
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"})
_POLL_S = 0.05


class SlurmError(AssertionError):
    """A SLURM command failed, or a job did not reach the state a test waits for."""


@dataclass(frozen=True)
class SlurmCluster:
    """The cluster of one state directory, started by `cluster.sh start`.

    Attributes:
        state: its state directory (slurm.conf, the daemons' logs).
    """

    state: Path

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with SLURM_CONF set and this Python's `lrs` first on PATH: what jobs
        inherit (sbatch exports the submitter's environment)."""
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        pythonpath = (
            f"{ROOT}{os.pathsep}{os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else str(ROOT)
        )
        return {
            **os.environ,
            "SLURM_CONF": str(self.state / "slurm.conf"),
            "PATH": path,
            "PYTHONPATH": pythonpath,
        }

    def run(self, *argv: str, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
        """A SLURM command's stdout; `SlurmError` with its stderr when it fails."""
        done = subprocess.run(
            argv, env={**self.env, **(env or {})}, cwd=cwd, capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, script: Path, *options: str, env: Mapping[str, str] | None = None, cwd: Path) -> str:
        """Submit `script` with `options` (and `env` exported); its job id."""
        return self.run("sbatch", "--parsable", *options, str(script), env=env, cwd=cwd).strip().split(";")[0]

    def jobs(self, job: str) -> dict[str, dict[str, str]]:
        """Each job of `job` (an array's tasks, or one job) by its id (`7_2` for a task): scontrol's fields."""
        done = subprocess.run(
            ["scontrol", "show", "job", "-o", job], env=self.env, capture_output=True, text=True, timeout=30
        )
        found = {}
        for line in done.stdout.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if "JobId" not in fields:
                continue
            task = fields.get("ArrayTaskId")
            key = f"{fields['ArrayJobId']}_{task}" if task and "ArrayJobId" in fields else fields["JobId"]
            found[key] = fields
        return found

    def states(self, job: str) -> dict[str, str]:
        """The JobState of each job of `job`."""
        return {key: fields["JobState"] for key, fields in self.jobs(job).items()}

    def wait(self, job: str, *, timeout_s: float = 120.0) -> dict[str, str]:
        """Wait until every job of `job` has ended; their states."""
        return self.wait_for(job, lambda states: bool(states) and set(states.values()) <= ENDED, timeout_s)

    def wait_for(
        self, job: str, predicate: Callable[[dict[str, str]], bool], timeout_s: float = 120.0
    ) -> dict[str, str]:
        """Wait until `predicate(states)` holds for the states of `job`'s jobs; those states."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.states(job)
            if predicate(states):
                return states
            if time.monotonic() > deadline:
                raise SlurmError(f"job {job} still {states} after {timeout_s:.0f} s")
            time.sleep(_POLL_S)


def poll(predicate: Callable[[], bool], what: str, *, timeout_s: float = 60.0) -> None:
    """Wait until `predicate()` holds, checking every 50 ms; `SlurmError` naming `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SlurmError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(_POLL_S)
