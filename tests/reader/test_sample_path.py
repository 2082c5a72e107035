"""The path of one sample through `reader/`: from `EpisodeStream(...)` to a batch of `BatchLoader`, which
files a reader of the code passes through when following the calls, and how often a call leads back into
a file the chain had left (a callback, such as the decoder's locating a file through the pool once did:
`pool.py` -> `decode/video.py` -> `pool.py`).

Traced with `sys.setprofile` (and `threading.setprofile`, for the row readers and the lane threads that
build a batch): at each call, the chain of reader files on the stack, outermost first, one entry per run
of frames in one file (frames outside `reader/`, torch's or the cache's, are transparent). A return is
not a step back: the reader of the code is done with the callee. The floors the reader stands on,
`reader/format/` and `reader/schedule/` (torch-free, pure, read like a library), count as one place each.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from reader import BatchLoader, EpisodeStream

READER = Path(__file__).resolve().parents[2] / "reader"
FLOORS = ("reader/format/", "reader/schedule/")
# The places a first batch visits, as measured once the callbacks went: the core path (stream,
# runtime/{pool,rows,counters,tails}, decode/video, format/, schedule/), the batch path (batch/{loaders,fill,
# collate}) and, starting the iteration in its process, the plan layer (plan/{read_plan,source,spec},
# plan/resume/{resumption,state}). Each is one role; fewer would mean merging roles into modules of many
# hundred lines (the 8 was not adopted: see docs/architecture.md). A new place fails here.
MAX_ITERATION_PLACES = 16
MAX_ITERATION_LOOPS = 2
MAX_CONSTRUCTION_LOOPS = 1


def place(path: Path) -> str | None:
    """The reader file (or floor) a code file counts as; None outside `reader/`."""
    if not path.is_relative_to(READER):
        return None
    rel = path.relative_to(READER.parent).as_posix()
    return next((floor for floor in FLOORS if rel.startswith(floor)), rel)


def chain(frame: FrameType | None) -> list[str]:
    """The reader places on `frame`'s stack, outermost first, one per run of frames in one place."""
    places: list[str] = []
    while frame is not None:
        here = place(Path(frame.f_code.co_filename))
        if here is not None and (not places or places[-1] != here):
            places.append(here)
        frame = frame.f_back
    return places[::-1]


@dataclass
class Walk:
    places: set[str] = field(default_factory=set)
    loops: set[tuple[str, ...]] = field(default_factory=set)

    def add(self, stack: list[str]) -> None:
        """One call's chain: its places, and the loop it closes if its last place is already on it."""
        self.places.update(stack)
        last, before = stack[-1], stack[:-1]
        if last in before:
            start = len(before) - 1 - before[::-1].index(last)
            self.loops.add(tuple(stack[start:]))

    def shown(self, what: str) -> str:
        lines = [
            f"{what}: {len(self.places)} places, {len(self.loops)} loops",
            "  " + ", ".join(sorted(self.places)),
        ]
        lines += ["  loop " + " -> ".join(loop) for loop in sorted(self.loops)]
        return "\n".join(lines)


@contextmanager
def traced() -> Iterator[Walk]:
    seen = Walk()
    lock = threading.Lock()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            stack = chain(frame)
            if stack:
                with lock:
                    seen.add(stack)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def _first_batch(root: Path) -> tuple[Walk, Walk]:
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


def test_one_sample_passes_through_few_reader_files(small_lrs: Path) -> None:
    construction, iteration = _first_batch(small_lrs)
    report = construction.shown("construction") + "\n" + iteration.shown("iteration")
    print(report)
    assert len(iteration.places) <= MAX_ITERATION_PLACES and len(iteration.loops) <= MAX_ITERATION_LOOPS, (
        report
    )
    assert len(construction.loops) <= MAX_CONSTRUCTION_LOOPS, report


def test_a_chain_counts_places_and_closes_loops() -> None:
    seen = Walk()
    seen.add(["reader/stream.py", "reader/runtime/pool.py"])
    seen.add(
        ["reader/stream.py", "reader/runtime/pool.py", "reader/decode/video.py", "reader/runtime/pool.py"]
    )
    seen.add(["reader/stream.py", "reader/format/"])
    assert len(seen.places) == 4
    assert seen.loops == {("reader/runtime/pool.py", "reader/decode/video.py", "reader/runtime/pool.py")}
    assert place(READER / "format" / "index.py") == "reader/format/"
    assert place(READER / "stream.py") == "reader/stream.py" and place(Path("/usr/lib/x.py")) is None


def test_the_tracer_sees_reader_frames_only(small_lrs: Path) -> None:
    with traced() as seen:
        EpisodeStream(small_lrs, decode_threads=0)
    assert "reader/stream.py" in seen.places and all(p.startswith("reader/") for p in seen.places)
