"""How every benchmark ends: its report as JSON on stdout, and in `--out FILE` when given (what `make bench`
passes each benchmark of `scripts/bench/`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(report: Any, out: Path | None, *, indent: int = 2) -> None:
    """Print `report` as JSON, and write it to `out` (its folder made) when given."""
    text = json.dumps(report, indent=indent)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
