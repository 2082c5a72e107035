"""`scripts/faults/suite.py --quick` runs (a handful of cases, short loops) and every case behaves, so the
suite itself cannot rot: its cases, the stand-in servers it drives, and the JSON it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Tier: the fault suite's quick cases, a minute or more: `make test-all`, not `make test`.
pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(180)
def test_the_quick_fault_suite_passes(tmp_path: Path) -> None:
    report = tmp_path / "faults.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "faults" / "suite.py"), "--quick", "--out", str(report)],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert report.exists(), done.stderr[-3000:]
    result = json.loads(report.read_text())
    summary = result["summary"]
    assert summary["cases"] >= 8
    failed = {
        c["name"]: (c["outcome"], c["note"], c["leftovers"], c["traceback_tail"])
        for c in result["cases"]
        if not c["ok"]
    }
    assert not failed, failed
    assert summary["tracebacks"] == 0 and summary["leftover_files"] == 0
    assert done.returncode == 0
    assert "| case | group | outcome |" in done.stdout
