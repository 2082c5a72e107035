"""The `videos` check class (5) and the comparisons of `source-videos` (7) in one read of each episode video.

An output video is opened once: its packets are probed (the `videos` class), then decoded from memory
and compared with its source's frames (`source-videos`, with a source). The source's packed files stay
open across the episodes they hold (`OpenVideos`, one per camera). A job reads a range of episodes
(`read_episode_videos`); `judge_videos` and `judge_source_videos` turn the ranges' outcomes, in order,
into the violations a single pass over the episodes gives, whatever ran them in parallel. For `lrs verify
--report` (`VerifyRun.keep_worst`), the comparison's frames also pass through `report_frames.VideoLook`:
each outcome carries its video's cost, each range its cameras' worst frames.

What comparing with the source raises is kept until `source-videos` is judged: checked in class order,
a broken source table (class 6) is reported before it, as when each class read the videos itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import av

from reader.decode.depth import is_depth
from reader.errors import DatasetError
from reader.format.index import EpisodeEntry, VideoFile
from reshard.verify.context import VerifyRun, VideoQuality
from reshard.verify.output_checks import video_problems
from reshard.verify.report_frames import VideoCost, VideoLook, WorstFrame, WorstFrames
from reshard.video.compare import (
    MAX_GAIN_ERROR,
    MAX_OFFSET,
    ColourFit,
    VideoComparison,
    compare_frames,
    episode_span,
    probe_opened,
)
from reshard.video.frames import OpenVideos, VideoFileRef, decode, frames_from, open_video
from reshard.video.resize import Resize


@dataclass(frozen=True)
class CameraOutcome:
    """What reading one episode video found.

    Attributes:
        episode, key, path: the episode, its camera and its output video (dataset-relative).
        problems: the `videos` class's findings.
        comparison: with the source (None without one, or when comparing raised: `deferred`).
        deferred: what comparing raised, raised when `source-videos` is judged.
        cost: its bytes and decode CPU (with a comparison, for `lrs verify --report`).
    """

    episode: int
    key: str
    path: str
    problems: tuple[str, ...]
    comparison: VideoComparison | None = None
    deferred: Exception | None = None
    cost: VideoCost | None = None


@dataclass(frozen=True)
class RangeOutcome:
    """The episode videos of a range of episodes, in order; `error`: what stopped the range (raised when
    its turn comes, as a single pass would have); `worst`: for `lrs verify --report`, each camera's worst
    frames in the range."""

    cameras: tuple[CameraOutcome, ...]
    error: Exception | None = None
    worst: tuple[WorstFrame, ...] = field(default=(), repr=False)


def episode_ranges(episodes: int, jobs: int) -> list[range]:
    """`episodes` split into at most `jobs` contiguous ranges of nearly equal size."""
    if episodes <= 0:
        return []
    step = -(-episodes // max(1, jobs))
    return [range(start, min(start + step, episodes)) for start in range(0, episodes, step)]


def read_episode_videos(run: VerifyRun, episodes: range, *, compare: bool) -> RangeOutcome:
    """Read the episode videos of `episodes`, comparing each with its source if `compare`; the outcome
    keeps the videos with a problem, and with `compare` every video (its comparison)."""
    outcomes: list[CameraOutcome] = []
    worst = WorstFrames(run.keep_worst if compare else 0)
    source = run.source
    fetch = (lambda rel: run.local(source.remote, rel)) if source is not None else None
    with OpenVideos(capacity=max(1, len(run.layout.info.video_keys)), fetch=fetch) as sources:
        for ep in episodes:
            entry = run.layout.episodes[ep]
            for video in entry.videos:
                look = VideoLook(entry.episode_index, video.key) if worst.keep else None
                try:
                    outcome = _read_one(run, entry, video, sources if compare else None, look)
                except DatasetError as exc:
                    return RangeOutcome(tuple(outcomes), exc, worst.frames())
                if compare or outcome.problems:  # nothing else to keep of a good video
                    outcomes.append(outcome)
                if look is not None:
                    worst.offer(look)
    return RangeOutcome(tuple(outcomes), worst=worst.frames())


def _read_one(
    run: VerifyRun,
    entry: EpisodeEntry,
    video: VideoFile,
    sources: OpenVideos | None,
    look: VideoLook | None = None,
) -> CameraOutcome:
    ep, key, rel = entry.episode_index, video.key, video.path
    with run.local(run.remote, rel) as path:
        ref = VideoFileRef(path, ep, key)
        with open_video(ref, threads=1) as (container, stream):
            probe, packets = probe_opened(container, stream, ref)
            problems = tuple(video_problems(run, entry, video, probe))
            if sources is None:
                return CameraOutcome(ep, key, rel, problems)
            output: Iterator[tuple[float, av.VideoFrame]] = decode(stream, packets, ref)
            try:
                if look is not None:
                    output = look.output_clock.timed(output)
                comparison = _compare(run, ep, key, sources, output, look)
            except Exception as exc:  # noqa: BLE001  raised at `source-videos`, if that class is reached
                return CameraOutcome(ep, key, rel, problems, deferred=exc)
    cost = None if look is None else look.cost(probe.bytes, comparison.frames)
    return CameraOutcome(ep, key, rel, problems, comparison, cost=cost)


def _compare(
    run: VerifyRun,
    ep: int,
    key: str,
    sources: OpenVideos,
    output: Iterator[tuple[float, av.VideoFrame]],
    look: VideoLook | None = None,
) -> VideoComparison:
    src = run.source
    if src is None:
        raise ValueError("Invalid comparison without a source. Expected --against.")
    episode = src.episodes[ep]
    segment = episode_span(episode.video(key).from_timestamp, episode.length, src.info.fps)
    # A resized re-encode is compared with its source frames scaled as the reshard scaled them (a depth
    # map keeps its size and codes).
    resize = None if is_depth(src.info.features[key]) else Resize.of_params(run.layout.params)
    with sources.open(VideoFileRef(src.video_file(episode, key), ep, key)) as (container, stream, local):
        src_ref = VideoFileRef(local, ep, key)
        frames = frames_from(container, stream, segment.from_timestamp, src_ref)
        if look is not None:
            frames = look.source_clock.timed(frames)
        if resize is not None:
            frames = ((t, resize.apply(frame)) for t, frame in frames)
        return compare_frames(frames, output, segment, src_ref, observe=look)


# --- judging, in the parent, in episode order ---------------------------------------------------------


def judge_videos(run: VerifyRun, ranges: Sequence[RangeOutcome]) -> None:
    """The `videos` class: each range's problems in order; the first error raises.

    Raises:
        DatasetError: an output video is unreadable (or what else stopped a range).
    """
    for outcome in ranges:
        for camera in outcome.cameras:
            for message in camera.problems:
                run.fail("videos", message, camera.path, camera.episode)
        if outcome.error is not None:
            raise outcome.error


def judge_source_videos(run: VerifyRun, ranges: Sequence[RangeOutcome]) -> None:
    """The `source-videos` class, camera by camera and source file by source file, as the comparisons
    were once made.

    Raises:
        DatasetError: a source video lacks an episode's frames or is unreadable.
        ValueError: an episode's length or the fps is out of range.
    """
    src, layout = run.source, run.layout
    if src is None:
        return
    found = {(c.episode, c.key): c for outcome in ranges for c in outcome.cameras}
    reencoded = {(r["episode"], r["camera"]) for r in layout.layout.get("reencoded", [])}
    copy_mode = layout.params.get("video", "copy") == "copy"
    for key in src.video_keys:
        # A depth map's 12-bit codes must come back bit for bit (copied, or re-encoded losslessly): equal
        # codes are equal depth; an 8-bit view's PSNR would hide a destroyed depth stream.
        depth = is_depth(src.info.features[key])
        colour = ColourFit()
        for episodes in src.episodes_by_video_file(key).values():
            for episode in episodes:
                ep = episode.episode_index
                camera = found[(ep, key)]
                if camera.deferred is not None:
                    raise camera.deferred
                result = camera.comparison
                if result is None:  # only where the run did not compare: a caller's mistake
                    raise ValueError(f"Invalid outcome of episode {ep}, {key}. Expected a comparison.")
                was_reencoded = (not copy_mode or (ep, key) in reencoded) and not depth
                fit = result.colour
                run.videos.append(
                    VideoQuality(
                        ep,
                        key,
                        was_reencoded,
                        result.identical,
                        result.psnr_min_db,
                        result.psnr_mean_db,
                        fit.gain,
                        fit.offset,
                    )
                )
                _judge(run, camera.path, ep, result, was_reencoded, depth=depth)
                colour += fit if was_reencoded else ColourFit()
        run.colours[key] = colour
        _judge_colour(run, key, colour)


def _judge_colour(run: VerifyRun, key: str, fit: ColourFit) -> None:
    """A camera's re-encoded frames keep the source's colours: a contrast stretch or a shift (a range or
    matrix lost on the way) can keep every frame above the PSNR floor."""
    if fit.moved():
        run.fail(
            "source-videos",
            f"Invalid colours of {key} (decoded output = {fit.gain:.3f} x source {fit.offset:+.4f}, RGB in "
            f"[0, 1]). Expected gain 1 +- {MAX_GAIN_ERROR:g} and offset within +-{MAX_OFFSET:g}: the "
            "re-encode lost the source's colour range or matrix.",
        )


def _judge(
    run: VerifyRun, rel: str, ep: int, result: VideoComparison, reencoded: bool, *, depth: bool = False
) -> None:
    for problem in result.problems:
        run.fail("source-videos", problem, rel, ep)
    if depth and not result.identical:
        run.fail(
            "source-videos",
            "Invalid depth frames (not the source's codes). Expected the source's 12-bit depth codes "
            "exactly: a depth map is copied or re-encoded losslessly, never to fewer bits.",
            rel,
            ep,
        )
    elif not reencoded and not result.identical:
        run.fail(
            "source-videos",
            f"Invalid frames (PSNR min {result.psnr_min_db:.1f} dB). Expected frames identical to the source's "
            "(copied, not re-encoded).",
            rel,
            ep,
        )
    elif reencoded and result.psnr_min_db < run.min_psnr:
        run.fail(
            "source-videos",
            f"Invalid quality (PSNR min {result.psnr_min_db:.1f} dB, mean {result.psnr_mean_db:.1f} dB). "
            f"Expected every frame >= {run.min_psnr:g} dB.",
            rel,
            ep,
        )
