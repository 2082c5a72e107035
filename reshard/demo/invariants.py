"""The demo's checks, pure functions of what it streamed: every frame exactly once, every decoded frame
its own, nothing left to download after a complete prewarm, and a resumed run equal to the rest of the
uninterrupted one. Each raises `DemoCheckError` naming the first thing that does not hold."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from reshard.demo.config import DemoCheckError
from reshard.demo.training_loop import Sample, StreamRun
from reshard.prewarm.fill import PrewarmSummary


def check_exactly_once(pairs: Iterable[tuple[int, int]], lengths: Mapping[int, int]) -> None:
    """Check that `pairs` (episode, frame) hold every frame of `lengths` exactly once.

    Raises:
        DemoCheckError: a frame is missing, repeated, or not in the dataset (the first of each is named).
    """
    got = Counter(pairs)
    want = Counter((e, f) for e, n in lengths.items() for f in range(n))
    if got == want:
        return
    missing = sorted(want - got)
    repeated = sorted(p for p, n in got.items() if n > 1)
    foreign = sorted(set(got) - set(want))
    problems = [
        f"{len(items)} {what}, first episode {items[0][0]} frame {items[0][1]}"
        for what, items in (("missing", missing), ("repeated", repeated), ("not in the dataset", foreign))
        if items
    ]
    raise DemoCheckError(
        f"Invalid epoch coverage ({sum(got.values())} samples: {'; '.join(problems)}). "
        f"Expected each of the {sum(want.values())} frames of {len(lengths)} episodes exactly once."
    )


def check_frames_shown(run: StreamRun) -> None:
    """Check that each sample's decoded frames show its own (episode, frame, camera) marker.

    Raises:
        DemoCheckError: a frame shows another marker (the first such sample is named).
    """
    for number, sample in enumerate(run.each()):
        for camera, shown in enumerate(sample.shown):
            if shown != (sample.episode, sample.frame, camera):
                raise DemoCheckError(
                    f"Invalid decoded frame (sample {number}, episode {sample.episode}, frame {sample.frame}, "
                    f"camera {camera}): it shows episode {shown[0]} frame {shown[1]} camera {shown[2]}. "
                    "Expected the frame of its own episode, frame index and camera."
                )


def check_prewarm_served(prewarmed: PrewarmSummary, run: StreamRun) -> None:
    """Check that a complete prewarm left the stream nothing to download.

    Raises:
        DemoCheckError: the stream fetched bytes although prewarm planned its whole epoch.
    """
    cache = run.stats.cache
    if prewarmed.limited_by is None and not prewarmed.dry_run and (cache.misses or cache.bytes_fetched):
        raise DemoCheckError(
            f"Invalid prewarm: the stream still fetched {cache.misses} files ({cache.bytes_fetched} bytes). "
            "Expected a complete prewarm to leave the epoch nothing to download."
        )


def check_resume(uninterrupted: StreamRun, resumed: StreamRun) -> None:
    """Check that `resumed` is the rest of `uninterrupted` after its `start_batch`, batch by batch.

    Raises:
        DemoCheckError: the first batch or sample that differs is named.
    """
    cut = resumed.start_batch
    rest = uninterrupted.batches[cut:]
    for i, (got, want) in enumerate(zip(resumed.batches, rest, strict=False)):
        if got != want:
            at = next(
                (j for j, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
                min(len(got), len(want)),
            )
            raise DemoCheckError(
                f"Invalid resumed stream (batch {cut + i} of the epoch, sample {at}: "
                f"{_at(got, at)}). Expected {_at(want, at)}, as the uninterrupted run."
            )
    if len(resumed.batches) != len(rest):
        raise DemoCheckError(
            f"Invalid resumed stream ({len(resumed.batches)} batches after batch {cut}). "
            f"Expected {len(rest)}, as the uninterrupted run."
        )


def _at(batch: Sequence[Sample], i: int) -> str:
    return repr(batch[i]) if i < len(batch) else "the end of the batch"
