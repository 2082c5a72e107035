"""What the commands print when stderr is a log file, not a terminal: progress as plain lines, no
carriage return or cursor code (SLURM logs, CI, `2> log`)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cache.progress import PlainLines, progress_bar

LRS = "from reshard.cli import main; main()"


def _lrs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LRS, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "100"},
    )


@pytest.mark.integration
def test_sample_reshard_push_and_prewarm_log_plain_lines(tmp_path: Path) -> None:
    runs = [
        _lrs("sample", str(tmp_path / "v3"), "--num-episodes", "4", "--cameras", "2"),
        _lrs("reshard", str(tmp_path / "v3"), "--out", str(tmp_path / "out")),
        _lrs("push", str(tmp_path / "out"), str(tmp_path / "pushed")),
        _lrs("prewarm", str(tmp_path / "pushed"), "--cache-dir", str(tmp_path / "cache")),
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "\r" not in run.stderr and "\x1b" not in run.stderr, repr(run.stderr)
    progress = {name: runs[i].stderr for i, name in enumerate(["sample", "reshard", "push", "prewarm"])}
    assert "sample: 100%" in progress["sample"]
    assert "tables: 100%" in progress["reshard"] and "videos: 100%" in progress["reshard"]
    assert "push: 100%" in progress["push"]
    for name, text in progress.items():
        lines = text.strip().splitlines()
        assert len(lines) <= 12, f"{name} logged every update: {lines}"


def test_plain_lines_strip_carriage_returns_and_escape_codes() -> None:
    out = io.StringIO()
    lines = PlainLines(out)
    lines.write("\rbar:  10%|#         | 1/10\x1b[A")
    lines.write("\r")
    lines.write("\n\x1b[Kbar: 100%|##########| 10/10\n")
    assert out.getvalue() == "bar:  10%|#         | 1/10\nbar: 100%|##########| 10/10\n"


def test_a_bar_off_the_terminal_logs_at_an_interval(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_bar(total=1000, desc="work", position=1) as bar:
        for _ in range(1000):
            bar.update(1)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("work:   0%") and lines[-1].startswith("work: 100%")
    assert len(lines) <= 3 and "\r" not in err.getvalue()


@pytest.mark.integration
def test_debug_and_quiet_work_anywhere_on_the_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing")
    plain = _lrs("verify", missing)
    assert plain.returncode == 3 and "Traceback" not in plain.stderr
    for args in (["verify", missing, "--debug"], ["--debug", "verify", missing]):
        run = _lrs(*args)
        # --debug adds the traceback and changes nothing else: the same exit code and last line.
        assert run.returncode == 3 and "Traceback" in run.stderr, (args, run.stderr)
        assert run.stderr.strip().splitlines()[-1] == plain.stderr.strip(), run.stderr
    quiet = _lrs("sample", str(tmp_path / "v3"), "--num-episodes", "2", "-q")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    after = _lrs("reshard", str(tmp_path / "v3"), "--out", str(tmp_path / "o"), "--debug", "-q")
    assert after.returncode == 0 and "%|" not in after.stderr, after.stderr
    verify = _lrs("verify", str(tmp_path / "o"), "-q")
    assert verify.returncode == 0, verify.stderr


def test_hoist_keeps_arguments_after_a_double_dash() -> None:
    from reshard.cli import hoist_global_flags

    assert hoist_global_flags(["verify", "x", "-q", "--debug", "-q"]) == ["--quiet", "--debug", "verify", "x"]
    assert hoist_global_flags(["sample", "--", "-q"]) == ["sample", "--", "-q"]


@pytest.mark.integration
def test_usage_errors_are_one_line_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("not empty")
    cases = [
        (["sample", str(tmp_path / "d")], "Invalid DIRECTORY", "lrs sample --help"),
        (["bogus"], "No such command 'bogus'", "lrs --help"),
        (["prewarm", str(tmp_path), "--cache-dir", str(tmp_path / "c"), "--nnodes", "2"], "--node-rank", "lrs prewarm"),
        (["prewarm", str(tmp_path), "--cache-dir", str(tmp_path / "c"), "--max-bytes", "5XB"], "Invalid size", ""),
    ]  # fmt: skip
    for args, message, hint in cases:
        run = _lrs(*args)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1, (args, run.stderr)
        assert lines[0].startswith("Error: ") and message in lines[0] and hint in lines[0]
