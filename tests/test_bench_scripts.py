"""`make bench` runs every benchmark (`scripts/bench/*.py` but its `_` helpers) with `--out bench/<name>.json`
and nothing else: each one must take that option and need no other argument (a benchmark that did not
made `make bench` exit 2)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(REPO.glob("scripts/bench/[!_]*.py"))


def test_make_bench_passes_only_out() -> None:
    loop = re.search(r"^bench:.*?(?=^\S)", (REPO / "Makefile").read_text(), flags=re.S | re.M)
    assert loop and "for script in scripts/bench/[!_]*.py" in loop[0] and "--out bench/$$name.json" in loop[0]


@pytest.mark.integration
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_benchmark_takes_out_and_no_required_argument(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--out" in done.stdout, done.stdout[:300]
    # argparse's usage paragraph: every positional or option outside [brackets] is required.
    usage = " ".join(done.stdout.split("\n\n")[0].split()).removeprefix("usage: ")
    required = re.sub(r"\[[^\]]*\]", "", usage).split()[1:]
    assert required == [], f"{script.name} requires {required}"
