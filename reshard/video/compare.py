"""Reading videos the way lerobot does, probing them, and proving a per-episode video equals its source.

lerobot reads frame `i` of an episode as the frame nearest to `from_timestamp + i / fps` in the episode's
video file; `nearest` is that rule, shared by `reshard.video.write` (which cuts episodes) and
`compare_episode_video` (which checks a cut: the source decoded at `from_timestamp + i / fps` against the
output decoded at `i / fps`). `probe_video` reads a file's stream properties and packet timing without
decoding. Errors name the file, and the episode and camera when the caller passes them.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeVar

import av
import numpy as np

from reader.errors import DatasetError

T = TypeVar("T")
VideoStream = av.video.stream.VideoStream
# Timestamps within this of each other are the same instant (float seconds from rational time bases).
EPS_S = 1e-6
# An output frame's timestamp may differ from i / fps by this much (lerobot's default `tolerance_s`).
TIMESTAMP_TOLERANCE_S = 1e-4
# What verify asks of a re-encode by default: every frame at least this close to its source frame.
DEFAULT_MIN_PSNR_DB = 30.0


def frame_rate(fps: float | Fraction) -> Fraction:
    """`fps` as an exact fraction (30 -> 30, 29.97002997 -> 30000/1001)."""
    return Fraction(fps).limit_denominator(100_000)


# --- opening and decoding ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoRef:
    """A video file and the episode / camera it is read for, to name them in errors."""

    path: str
    episode: int | None = None
    camera: str | None = None

    def error(self, message: str) -> DatasetError:
        """A `DatasetError` naming the file, the episode and the camera."""
        prefix = f"camera {self.camera!r}: " if self.camera is not None else ""
        return DatasetError(prefix + message, file=self.path, episode=self.episode)


@contextlib.contextmanager
def open_video(ref: VideoRef, threads: int | None = 1) -> Iterator[tuple[Any, VideoStream]]:
    """Open a video file for reading; yields the container and its first video stream.

    Args:
        ref: the file.
        threads: decoder threads (0: FFmpeg's choice; None: leave PyAV's default).

    Raises:
        DatasetError: the file is missing, not a media file, or has no video stream.
    """
    try:
        container = av.open(ref.path)
    except (av.FFmpegError, OSError) as exc:
        raise ref.error(f"not a readable video ({exc})") from exc
    with container:
        if not container.streams.video:
            raise ref.error("no video stream")
        stream = container.streams.video[0]
        if threads is not None:
            stream.codec_context.thread_count = threads
            if threads != 1:
                stream.codec_context.thread_type = "AUTO"
        yield container, stream


def codec_name(stream: VideoStream) -> str:
    """The codec's canonical name (`av1` whether PyAV decodes it with libdav1d or not)."""
    return stream.codec_context.codec.canonical_name


def demux(container: Any, stream: VideoStream, ref: VideoRef) -> Iterator[av.Packet]:
    """The stream's packets in decode order (flush packets included), read errors as `DatasetError`."""
    try:
        yield from container.demux(stream)
    except av.FFmpegError as exc:
        raise ref.error(f"not a readable video ({exc})") from exc


def seek(container: Any, stream: VideoStream, timestamp_s: float | None, ref: VideoRef) -> None:
    """Seek to the keyframe at or before `timestamp_s` (None: the start of the file)."""
    if timestamp_s is None:
        offset = stream.start_time or 0
    else:
        offset = round(Fraction(timestamp_s) / stream.time_base)
    try:
        container.seek(offset, stream=stream, backward=True, any_frame=False)
    except av.FFmpegError as exc:
        raise ref.error(f"cannot seek to {timestamp_s} s ({exc})") from exc


def all_frames(container: Any, stream: VideoStream, ref: VideoRef) -> Iterator[tuple[float, av.VideoFrame]]:
    """(time in s, frame) in presentation order, from the current position to the end."""
    for packet in demux(container, stream, ref):
        try:
            frames = stream.decode(packet)
        except av.FFmpegError as exc:
            raise ref.error(f"corrupt video data ({exc})") from exc
        for frame in frames:
            if frame.pts is None:
                raise ref.error("Invalid frame timestamp (None). Expected a pts on every frame.")
            yield float(frame.pts * frame.time_base), frame


def frames_from(
    container: Any, stream: VideoStream, start_s: float, ref: VideoRef
) -> Iterator[tuple[float, av.VideoFrame]]:
    """(time in s, frame) in presentation order, from the keyframe at or before `start_s`.

    If the demuxer's seek lands past `start_s` (index quirks, B-frame delays), decoding restarts from
    the beginning of the file, so no frame at or before `start_s` is ever missed.
    """
    seek(container, stream, start_s, ref)
    frames = all_frames(container, stream, ref)
    first = next(frames, None)
    if first is not None and first[0] > start_s + EPS_S and start_s > 0:
        frames.close()
        seek(container, stream, None, ref)
        frames = all_frames(container, stream, ref)
        first = next(frames, None)
    if first is not None:
        yield first
        yield from frames


# --- lerobot's frame selection -----------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """An episode's frames inside a source file: frame `i` is wanted at `from_timestamp + i / fps`."""

    from_timestamp: float
    length: int
    rate: Fraction

    def target(self, i: int) -> float:
        """The source time of frame `i`, in seconds."""
        return self.from_timestamp + i / float(self.rate)

    @property
    def half_frame_s(self) -> float:
        return 0.5 / float(self.rate)

    @property
    def window(self) -> tuple[float, float]:
        """The half-open time range a source frame must lie in to be picked for some frame."""
        return self.target(0) - self.half_frame_s, self.target(self.length - 1) + self.half_frame_s


def nearest(items: Iterable[tuple[float, T]], segment: Segment, ref: VideoRef) -> Iterator[tuple[int, T]]:
    """Pick, for each frame `i`, the item nearest in time to `segment.target(i)` (lerobot's rule).

    Args:
        items: (time in s, item), in increasing time.
        segment: the wanted frames.
        ref: the file, for errors.

    Yields:
        (i, item) for i in 0..length-1, in order; stops consuming `items` once the last one is picked.

    Raises:
        DatasetError: no item lies within half a frame period of some target (the source lacks a frame).
    """
    i, prev = 0, None
    for t, item in items:
        while i < segment.length and t >= segment.target(i):
            target = segment.target(i)
            # Ties go to the earlier frame, as lerobot's argmin over |t - target| does.
            t_best, best = prev if prev is not None and target - prev[0] <= t - target else (t, item)
            yield i, _checked(t_best, best, i, segment, ref)
            i += 1
        if i == segment.length:
            return
        prev = (t, item)
    while i < segment.length:
        if prev is None:
            raise _missing(i, None, segment, ref)
        yield i, _checked(prev[0], prev[1], i, segment, ref)
        i += 1


def _checked(t: float, item: T, i: int, segment: Segment, ref: VideoRef) -> T:
    if abs(t - segment.target(i)) >= segment.half_frame_s - EPS_S:
        raise _missing(i, t, segment, ref)
    return item


def _missing(i: int, t: float | None, segment: Segment, ref: VideoRef) -> DatasetError:
    found = "no frame" if t is None else f"nearest frame at {t:.4f} s"
    return ref.error(
        f"Invalid video segment (frame {i} of {segment.length} wanted at {segment.target(i):.4f} s, {found}). "
        "Expected a frame within half a frame period of from_timestamp + i / fps."
    )


# --- probing -----------------------------------------------------------------------------------------


def keyframe_interval(times: Sequence[float], keyframes: Sequence[bool]) -> int | None:
    """The most common distance in frames between consecutive keyframes (ties: the larger), or None."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    ranks = [rank for rank, i in enumerate(order) if keyframes[i]]
    gaps = Counter(b - a for a, b in zip(ranks, ranks[1:], strict=False))
    if not gaps:
        return None
    return max(gaps.items(), key=lambda kv: (kv[1], kv[0]))[0]


@dataclass(frozen=True)
class VideoProbe:
    """A video file's first video stream, read from its header and packets (nothing decoded).

    Attributes:
        path, bytes: the file and its size.
        codec: as FFmpeg names it (av1, hevc, h264, ...). profile: e.g. `Main` (None when unknown).
        pix_fmt, width, height: the coded picture.
        fps: the stream's average frame rate (0.0 when the header has none).
        frames: number of frames (packets).
        duration_s: end of the last frame (its pts plus duration), in seconds.
        gop: the most common keyframe interval in frames (None with fewer than two keyframes).
        keyframe_times_s: presentation times of the keyframes, ascending.
        frame_times_s: presentation times of all frames, ascending.
        reordered: decode order differs from presentation order (B-frames).
    """

    path: str
    bytes: int
    codec: str
    profile: str | None
    pix_fmt: str
    width: int
    height: int
    fps: float
    frames: int
    duration_s: float
    gop: int | None
    keyframe_times_s: tuple[float, ...] = field(repr=False)
    frame_times_s: tuple[float, ...] = field(repr=False)
    reordered: bool

    @property
    def starts_on_keyframe(self) -> bool:
        """The first frame in presentation order is a keyframe."""
        return bool(self.keyframe_times_s) and self.keyframe_times_s[0] <= self.frame_times_s[0] + EPS_S


def probe_video(path: str, *, episode: int | None = None, camera: str | None = None) -> VideoProbe:
    """Read the stream properties and every packet's timing of a video file (no decoding).

    Raises:
        DatasetError: the file is missing, unreadable or has no video stream.
    """
    ref = VideoRef(path, episode, camera)
    with open_video(ref, threads=None) as (container, stream):
        tb = stream.time_base
        times, keys, end = [], [], 0.0
        for packet in demux(container, stream, ref):
            if packet.dts is None or packet.pts is None:
                continue
            times.append(float(packet.pts * tb))
            keys.append(bool(packet.is_keyframe))
            end = max(end, float((packet.pts + (packet.duration or 0)) * tb))
        cc = stream.codec_context
        rate = stream.average_rate or stream.guessed_rate
        return VideoProbe(
            path=path,
            bytes=os.path.getsize(path),
            codec=codec_name(stream),
            profile=cc.profile,
            pix_fmt=cc.pix_fmt,
            width=cc.width,
            height=cc.height,
            fps=float(rate) if rate else 0.0,
            frames=len(times),
            duration_s=end,
            gop=keyframe_interval(times, keys),
            keyframe_times_s=tuple(sorted(t for t, k in zip(times, keys, strict=True) if k)),
            frame_times_s=tuple(sorted(times)),
            reordered=any(b < a for a, b in zip(times, times[1:], strict=False)),
        )


# --- comparing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoComparison:
    """An episode's output video against its source, frame by frame.

    Attributes:
        frames: frame pairs compared.
        identical: every decoded output frame equals its source frame bit for bit (same pixel format
            and planes), and there is no problem.
        psnr_min_db: PSNR (RGB, 8 bit) of the worst frame; inf when identical, 0.0 when nothing compared.
        psnr_mean_db: PSNR of the mean squared error over all compared frames; inf when identical.
        problems: what is wrong with the output besides pixel differences (frame count, timestamps,
            first frame not a keyframe, frame size), one line each.
    """

    frames: int
    identical: bool
    psnr_min_db: float
    psnr_mean_db: float
    problems: tuple[str, ...] = ()

    def passes(self, min_psnr_db: float | None = None) -> bool:
        """No problem, and identical (`min_psnr_db` None) or every frame at least `min_psnr_db`."""
        if self.problems or self.frames == 0:
            return False
        return self.identical if min_psnr_db is None else self.psnr_min_db >= min_psnr_db


def compare_episode_video(
    src_path: str,
    from_timestamp: float,
    out_path: str,
    *,
    length: int,
    fps: float,
    threads: int | None = None,
    episode: int | None = None,
    camera: str | None = None,
) -> VideoComparison:
    """Decode an episode from its source (at `from_timestamp + i / fps`) and its output (at `i / fps`).

    Args:
        src_path: the source video file.
        from_timestamp: the episode's start in the source, in seconds.
        out_path: the episode's own video file.
        length: the episode's number of frames.
        fps: the dataset's frame rate.
        threads: decoder threads per file (default 1).
        episode, camera: named in error messages.

    Returns:
        The comparison; output problems are reported in it, not raised.

    Raises:
        ValueError: `length` < 1 or `fps` <= 0.
        DatasetError: either file is unreadable, or the source lacks frames of the episode.
    """
    if length < 1 or not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"Invalid length/fps ({length}, {fps}). Expected length >= 1 and fps > 0.")
    segment = Segment(from_timestamp, length, frame_rate(fps))
    src_ref, out_ref = VideoRef(src_path, episode, camera), VideoRef(out_path, episode, camera)
    threads = 1 if threads is None else threads
    tally = _Tally(segment)
    with open_video(src_ref, threads) as (src, src_stream), open_video(out_ref, threads) as (out, out_stream):
        source = nearest(frames_from(src, src_stream, from_timestamp, src_ref), segment, src_ref)
        output = all_frames(out, out_stream, out_ref)
        for i, src_frame in source:
            got = next(output, None)
            if got is None:
                tally.problems.append(f"output has {i} frames, expected {length}")
                break
            tally.add(i, src_frame, *got)
        else:
            extra = sum(1 for _ in output)
            if extra:
                tally.problems.append(f"output has {length + extra} frames, expected {length}")
    return tally.result()


@dataclass
class _Tally:
    segment: Segment
    problems: list[str] = field(default_factory=list)
    squared_errors: list[float] = field(default_factory=list)
    identical: bool = True
    late: int = 0  # output frames off their time
    first_late: tuple[int, float] | None = None

    def add(self, i: int, src: av.VideoFrame, t: float, out: av.VideoFrame) -> None:
        if i == 0 and not out.key_frame:
            self.problems.append("output does not start on a keyframe")
        if abs(t - i / float(self.segment.rate)) > TIMESTAMP_TOLERANCE_S:
            self.late += 1
            self.first_late = self.first_late or (i, t)
        if (src.width, src.height) != (out.width, out.height):
            if not any(p.startswith("output frame size") for p in self.problems):
                self.problems.append(
                    f"output frame size {out.width}x{out.height}, expected {src.width}x{src.height}"
                )
            self.identical = False
            return
        same = _same_planes(src, out)
        self.identical = self.identical and same
        self.squared_errors.append(0.0 if same else _mse_rgb(src, out))

    def result(self) -> VideoComparison:
        problems = list(self.problems)
        if self.first_late is not None:
            i, t = self.first_late
            problems.append(
                f"{self.late} output frames off their time i / fps by more than {TIMESTAMP_TOLERANCE_S} s "
                f"(first: frame {i} at {t:.6f} s, expected {i / float(self.segment.rate):.6f} s)"
            )
        errors = self.squared_errors
        return VideoComparison(
            frames=len(errors),
            identical=self.identical and not problems and len(errors) == self.segment.length,
            psnr_min_db=_psnr(max(errors)) if errors else 0.0,
            psnr_mean_db=_psnr(sum(errors) / len(errors)) if errors else 0.0,
            problems=tuple(problems),
        )


def _same_planes(a: av.VideoFrame, b: av.VideoFrame) -> bool:
    if a.format.name != b.format.name:
        return False
    try:
        return np.array_equal(a.to_ndarray(), b.to_ndarray())
    except ValueError:  # a pixel format PyAV cannot export as is: compare what a reader would see
        return _mse_rgb(a, b) == 0.0


def _mse_rgb(a: av.VideoFrame, b: av.VideoFrame) -> float:
    diff = a.to_ndarray(format="rgb24").astype(np.int32) - b.to_ndarray(format="rgb24").astype(np.int32)
    return float(np.mean(diff * diff))


def _psnr(mse: float) -> float:
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)
