"""Probing videos and proving a per-episode video equals its source.

`probe_video` reads a file's stream properties and packet timing without decoding (`probe_opened`, of a
file already open, also returns the packets, so that `frames.decode` of them needs no second open);
`compare_episode_video` checks a cut: the source decoded at `from_timestamp + i / fps` (lerobot's rule,
`reshard.video.frames.nearest`) against the output decoded at `i / fps` (`compare_frames`, of frames
decoded by the caller). Errors name the file, and the episode and camera when the caller passes them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass, field
from typing import Any

import av
import numpy as np

from reshard.video.frames import (
    EPS_S,
    TIMESTAMP_TOLERANCE_S,
    EpisodeSpan,
    VideoFileRef,
    VideoStream,
    all_frames,
    codec_name,
    demux,
    frame_rate,
    frames_from,
    keyframe_interval,
    nearest,
    open_video,
    time_base,
)
from reshard.video.resize import Resize

# What verify asks of a re-encode by default: every frame at least this close to its source frame.
DEFAULT_MIN_PSNR_DB = 30.0
# ... and colours that stay put: the fitted `output = gain * source + offset` (RGB in [0, 1]) within these.
MAX_GAIN_ERROR, MAX_OFFSET = 0.03, 0.01
# The fit is over the means of 8x8 blocks: a lossy encode loses fine detail, not block means, so a good
# re-encode fits gain 1 whatever its texture. Below this spread of the source's block means (about 5 code
# values) a gain is not measurable, and the fit is the mean shift alone (gain 1).
_BLOCK, _MIN_SPREAD = 8, 0.02


@dataclass(frozen=True)
class ColourFit:
    """The least-squares line `output = gain * source + offset` through RGB block means in [0, 1].

    Kept as sums, so that the fits of several episodes add up to the fit of a camera.
    """

    n: int = 0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0

    @classmethod
    def of(cls, source: np.ndarray, output: np.ndarray) -> ColourFit:
        """The fit of one frame pair (HxWx3 uint8 RGB)."""
        x, y = _block_means(source), _block_means(output)
        return cls(x.size, float(x.sum()), float(y.sum()), float((x * x).sum()), float((x * y).sum()))

    def __add__(self, other: ColourFit) -> ColourFit:
        return ColourFit(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def gain(self) -> float:
        if not self.n:
            return 1.0
        variance = self.sxx / self.n - (self.sx / self.n) ** 2
        if variance < _MIN_SPREAD**2:
            return 1.0
        return (self.sxy / self.n - self.sx * self.sy / self.n**2) / variance

    @property
    def offset(self) -> float:
        return (self.sy - self.gain * self.sx) / self.n if self.n else 0.0

    def moved(self) -> bool:
        """The colours moved: gain off 1 by more than `MAX_GAIN_ERROR`, or offset beyond `MAX_OFFSET`."""
        return abs(self.gain - 1.0) > MAX_GAIN_ERROR or abs(self.offset) > MAX_OFFSET


def _block_means(rgb: np.ndarray) -> np.ndarray:
    """Per-channel means of the 8x8 blocks of an HxWx3 frame (the whole frame if smaller), in [0, 1]."""
    bh, bw = min(_BLOCK, rgb.shape[0]), min(_BLOCK, rgb.shape[1])
    h, w = rgb.shape[0] // bh * bh, rgb.shape[1] // bw * bw
    blocks = rgb[:h, :w].reshape(h // bh, bh, w // bw, bw, 3)
    return blocks.mean(axis=(1, 3), dtype=np.float64) / 255.0


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
    pix_fmt: str | None  # None: the decoder reports none
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
    ref = VideoFileRef(path, episode, camera)
    with open_video(ref, threads=None) as (container, stream):
        return probe_opened(container, stream, ref)[0]


def probe_opened(
    container: Any, stream: VideoStream, ref: VideoFileRef
) -> tuple[VideoProbe, list[av.Packet]]:
    """`probe_video` of an open file, read from its start, with the packets read (flush packets included,
    so that `frames.decode` of them gives every frame): a caller that also decodes the file opens it once.

    Raises:
        DatasetError: the file is unreadable.
    """
    tb = time_base(stream, ref)
    times, keys, end, packets = [], [], 0.0, []
    for packet in demux(container, stream, ref):
        packets.append(packet)
        if packet.dts is None or packet.pts is None:
            continue
        times.append(float(packet.pts * tb))
        keys.append(bool(packet.is_keyframe))
        end = max(end, float((packet.pts + (packet.duration or 0)) * tb))
    cc = stream.codec_context
    rate = stream.average_rate or stream.guessed_rate
    probe = VideoProbe(
        path=ref.path,
        bytes=os.path.getsize(ref.path),
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
    return probe, packets


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
        colour: the fitted gain and offset of the frames that differ (gain 1, offset 0 when none does).
    """

    frames: int
    identical: bool
    psnr_min_db: float
    psnr_mean_db: float
    problems: tuple[str, ...] = ()
    colour: ColourFit = field(default=ColourFit(), repr=False)

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
    resize: Resize | None = None,
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
        resize: the output's `lrs reshard --resize`: each source frame is scaled so (`Resize.apply`) before
            it is compared, as `lrs verify --against` does.

    Returns:
        The comparison; output problems are reported in it, not raised.

    Raises:
        ValueError: `length` < 1 or `fps` <= 0.
        DatasetError: either file is unreadable, or the source lacks frames of the episode.
    """
    segment = episode_span(from_timestamp, length, fps)
    src_ref, out_ref = VideoFileRef(src_path, episode, camera), VideoFileRef(out_path, episode, camera)
    threads = 1 if threads is None else threads
    with open_video(src_ref, threads) as (src, src_stream), open_video(out_ref, threads) as (out, out_stream):
        source = frames_from(src, src_stream, from_timestamp, src_ref)
        if resize is not None:
            source = ((t, resize.apply(frame)) for t, frame in source)
        return compare_frames(source, all_frames(out, out_stream, out_ref), segment, src_ref)


def episode_span(from_timestamp: float, length: int, fps: float) -> EpisodeSpan:
    """The episode's frames in its source, its arguments checked.

    Raises:
        ValueError: `length` < 1 or `fps` <= 0.
    """
    if length < 1 or not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"Invalid length/fps ({length}, {fps}). Expected length >= 1 and fps > 0.")
    return EpisodeSpan(from_timestamp, length, frame_rate(fps))


def compare_frames(
    source: Iterable[tuple[float, av.VideoFrame]],
    output: Iterator[tuple[float, av.VideoFrame]],
    segment: EpisodeSpan,
    src_ref: VideoFileRef,
    *,
    observe: FramePairObserver | None = None,
) -> VideoComparison:
    """`compare_episode_video` of decoded frames: the source's from the episode's start (lerobot's
    nearest frames are picked here), the output's from its first frame. `observe`, if given, sees each
    pair of frames that differ (`lrs verify --report` keeps the worst).

    Raises:
        DatasetError: the source lacks frames of the episode, or either file is unreadable.
    """
    tally, length = _Tally(segment, observe=observe), segment.length
    for i, src_frame in nearest(source, segment, src_ref):
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


# Called with frame i, the source's and the output's RGB frames (HxWx3 uint8) and their mean squared error,
# for each pair that differs.
FramePairObserver = Callable[[int, np.ndarray, np.ndarray, float], None]


@dataclass
class _Tally:
    segment: EpisodeSpan
    observe: FramePairObserver | None = None
    problems: list[str] = field(default_factory=list)
    squared_errors: list[float] = field(default_factory=list)
    colour: ColourFit = field(default_factory=ColourFit)
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
        if same:
            self.squared_errors.append(0.0)
            return
        a, b = _rgb(src), _rgb(out)
        diff = a.astype(np.int32) - b.astype(np.int32)
        mse = float(np.mean(diff * diff))
        self.squared_errors.append(mse)
        self.colour += ColourFit.of(a, b)
        if self.observe is not None:
            self.observe(i, a, b, mse)

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
            colour=self.colour,
        )


def _same_planes(a: av.VideoFrame, b: av.VideoFrame) -> bool:
    if a.format.name != b.format.name:
        return False
    try:
        return np.array_equal(a.to_ndarray(), b.to_ndarray())
    except ValueError:  # a pixel format PyAV cannot export as is: compare what a reader would see
        return _mse_rgb(a, b) == 0.0


def _rgb(frame: av.VideoFrame) -> np.ndarray:
    """The frame as RGB, as lerobot sees it (swscale honours the range and matrix, as torchcodec does)."""
    return frame.to_ndarray(format="rgb24")


def _mse_rgb(a: av.VideoFrame, b: av.VideoFrame) -> float:
    diff = _rgb(a).astype(np.int32) - _rgb(b).astype(np.int32)
    return float(np.mean(diff * diff))


def _psnr(mse: float) -> float:
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)
