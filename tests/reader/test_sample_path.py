"""The path of one sample through `reader/`: from `EpisodeStream(...)` to a batch of `BatchLoader`, which
files it passes through and how often it goes back to a file it had left (issue 42). Traced with
`sys.setprofile` (and `threading.setprofile`, for the lane threads that build a batch), counting only
frames whose file is under `reader/`; a thread's path is the reader file it is in, each time that changes."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from reader import BatchLoader, EpisodeStream

READER = Path(__file__).resolve().parents[2] / "reader"
MAX_FILES = 8
MAX_ITERATION_RETURNS = 2
MAX_CONSTRUCTION_RETURNS = 1


def _reader_file(frame: FrameType | None) -> str | None:
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(READER):
            return path.relative_to(READER.parent).as_posix()
        frame = frame.f_back  # a frame outside reader/ (torch, cache) stays in the reader file that called it
    return None


@contextmanager
def traced() -> Iterator[dict[str, list[str]]]:
    """Per thread (by name), the reader files it passed through, in order, a file listed again each time
    the thread comes back to it from another reader file."""
    paths: dict[str, list[str]] = {}
    lock = threading.Lock()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            current = _reader_file(frame)
        elif event == "return":
            current = _reader_file(frame.f_back)
        else:
            return
        if current is None:
            return
        with lock:
            path = paths.setdefault(threading.current_thread().name, [])
            if not path or path[-1] != current:
                path.append(current)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        yield paths
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def figures(paths: dict[str, list[str]]) -> tuple[int, int]:
    """(reader files visited, returns to a file already left), over every thread's path."""
    files = {f for path in paths.values() for f in path}
    returns = sum(len(path) - len(set(path)) for path in paths.values())
    return len(files), returns


def _shown(what: str, paths: dict[str, list[str]]) -> str:
    files, returns = figures(paths)
    lines = [f"{what}: {files} reader files, {returns} returns"]
    for thread, path in paths.items():
        lines.append(f"  {thread}: " + " -> ".join(path))
    return "\n".join(lines)


def _first_batch(root: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    def make() -> EpisodeStream:
        return EpisodeStream(root, delta_timestamps=None, decode_threads=0, seed=3)

    make()  # imports whatever a first stream imports lazily, outside the trace
    with traced() as construction:
        stream = make()
    loader = BatchLoader(stream, 1, threads=1, batches_ahead=0)
    with traced() as iteration:
        batches = iter(loader)
        next(batches)
    batches.close()  # type: ignore[attr-defined]
    return construction, iteration


@pytest.mark.xfail(
    strict=True,
    reason="issue 42: not there yet. Measured on the reader-by-role branch (small sample, batch of 1, one lane): "
    "construction 19 reader files, 212 returns; iteration 24 reader files, 588 returns over its threads (main, "
    "4 row readers, 1 lane; thread timing moves the returns a little). Targets: 8 files and 2 returns "
    "(iteration), 1 return (construction)",
)
def test_one_sample_passes_through_few_reader_files(small_lrs: Path) -> None:
    construction, iteration = _first_batch(small_lrs)
    report = _shown("construction", construction) + "\n" + _shown("iteration", iteration)
    print(report)
    files, returns = figures(iteration)
    assert files <= MAX_FILES and returns <= MAX_ITERATION_RETURNS, report
    assert figures(construction)[1] <= MAX_CONSTRUCTION_RETURNS, report


def test_the_tracer_counts_files_and_returns() -> None:
    paths = {"main": ["reader/a.py", "reader/b.py", "reader/a.py", "reader/c.py", "reader/b.py"]}
    assert figures(paths) == (3, 2)
    assert "main: reader/a.py -> reader/b.py" in _shown("x", paths)


def test_the_tracer_sees_reader_frames_only(small_lrs: Path) -> None:
    with traced() as paths:
        EpisodeStream(small_lrs, decode_threads=0)
    files = {f for path in paths.values() for f in path}
    assert "reader/stream.py" in files and all(f.startswith("reader/") for f in files)
