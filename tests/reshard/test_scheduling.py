"""No encoder leaves lrs's threads real-time: SVT-AV1 run as root makes the thread that opens it and each of
its worker threads SCHED_FIFO 99, and every process started after (a reshard's workers) inherited that,
running before every ordinary process of the node (a benchmark's `lrs reshard` starved the other jobs on
this machine until it ended)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REAL_TIME = (os.SCHED_FIFO, os.SCHED_RR)
_ENCODE = """
import os, sys
from reshard.demo.sample import write_sample
from reshard.video.encode import ordinary_scheduling
if sys.argv[2] == "unguarded":  # the control: what SVT-AV1 does without the guard
    import reshard.video.encode as encode, contextlib
    encode.ordinary_scheduling = contextlib.nullcontext
write_sample(sys.argv[1], episodes=2, cameras=1, codec="av1")
policies = {int(t): os.sched_getscheduler(int(t)) for t in os.listdir("/proc/self/task")}
print(os.sched_getscheduler(0), sum(p in (os.SCHED_FIFO, os.SCHED_RR) for p in policies.values()))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="SVT-AV1 raises its threads to real time only as root")
@pytest.mark.parametrize("guard", ["guarded", "unguarded"])
def test_an_av1_encode_leaves_no_thread_real_time(tmp_path: Path, guard: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ENCODE, str(tmp_path / "v3"), guard],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=True,
    )
    main, real_time = (int(v) for v in done.stdout.split())
    if guard == "guarded":
        assert (main, real_time) == (os.SCHED_OTHER, 0)
    else:  # the library still does it: the guard is what undoes it
        assert main in REAL_TIME and real_time > 0
