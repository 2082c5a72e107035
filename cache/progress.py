"""Progress bars that suit where stderr goes: tqdm's bars on a terminal, plain lines in a log.

On a terminal `progress_bar` is tqdm as it is. When stderr is a file or a pipe (a SLURM log, `2> log`,
CI), tqdm would join every update into one `\\r`-separated line and move the cursor with escape codes
between several bars; there each update becomes one plain line instead, at most one per
`LOG_INTERVAL_S` seconds per bar, plus the final one, with no carriage return or escape code.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import IO, Any

from tqdm import tqdm

# Seconds between two progress lines of one bar when stderr is not a terminal.
LOG_INTERVAL_S = 10.0
_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class PlainLines:
    """A text stream for tqdm that writes each status it is given as one line, without `\\r` or escapes."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        for part in _ESCAPE.sub("", text).replace("\r", "\n").split("\n"):
            line = part.rstrip()
            if line:
                with self._lock:
                    self._stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def is_terminal(stream: IO[str] | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(*, disable: bool = False, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr: as it is on a terminal, plain timed lines otherwise (module docstring)."""
    if disable or is_terminal():
        return tqdm(disable=disable, **kwargs)
    kwargs.pop("position", None)
    kwargs.pop("dynamic_ncols", None)
    return tqdm(
        file=PlainLines(sys.stderr),
        mininterval=LOG_INTERVAL_S,
        maxinterval=LOG_INTERVAL_S,
        ascii=True,
        ncols=100,
        **kwargs,
    )


def human_bytes(count: float) -> str:
    """A byte count (or rate) for people: `512 B`, `23.8 KiB`, `1.5 GiB`; K, M, G are powers of 1024."""
    value, unit = float(count), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{int(count)} B" if unit == "B" else f"{value:.1f} {unit}"


def plural(count: int, noun: str) -> str:
    """`1 file`, `2 files`."""
    return f"{count} {noun}" + ("" if count == 1 else "s")
