"""Reading videos the way lerobot does: the PyAV primitives `write` cuts episodes with and `compare`
proves them with.

lerobot reads frame `i` of an episode as the frame nearest to `from_timestamp + i / fps` in the episode's
video file; `nearest` is that rule. Errors name the file, and the episode and camera when the caller
passes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter, OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple, TypeVar

import av

from cache.arguments import check_int
from reader.errors import DatasetError

T = TypeVar("T")
VideoStream = av.video.stream.VideoStream
# Timestamps within this of each other are the same instant (float seconds from rational time bases).
EPS_S = 1e-6
# An output frame's timestamp may differ from i / fps by this much (lerobot's default `tolerance_s`).
TIMESTAMP_TOLERANCE_S = 1e-4


def frame_rate(fps: float | Fraction) -> Fraction:
    """`fps` as an exact fraction (30 -> 30, 29.97002997 -> 30000/1001)."""
    return Fraction(fps).limit_denominator(100_000)


# --- opening and decoding ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoFileRef:
    """A video file and the episode / camera it is read for, to name them in errors."""

    path: str
    episode: int | None = None
    camera: str | None = None

    def error(self, message: str) -> DatasetError:
        """A `DatasetError` naming the file, the episode and the camera."""
        prefix = f"camera {self.camera!r}: " if self.camera is not None else ""
        return DatasetError(prefix + message, file=self.path, episode=self.episode)


@contextlib.contextmanager
def open_video(ref: VideoFileRef, threads: int | None = 1) -> Iterator[tuple[Any, VideoStream]]:
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


class OpenVideos:
    """Video files kept open across the episodes read from them: the `capacity` most recently used.

    A packed v3 MP4 holds hundreds of episodes, and opening it parses its whole index; readers that go
    through its episodes in order open it once instead of once per episode. A container is reused only
    for demuxing and decoding after a seek (PyAV's `seek` flushes the decoder), and closed when evicted,
    when a read of it raised, or at `close`.

    Args:
        capacity: files kept open at most.
        fetch: maps a file's name to a context giving a local path (a remote file fetched for as long
            as it stays open); None: names are local paths.
    """

    def __init__(
        self, capacity: int = 2, fetch: Callable[[str], AbstractContextManager[str]] | None = None
    ) -> None:
        self.capacity, self.fetch = check_int("capacity", capacity, 1), fetch
        self.opens = 0  # files opened so far
        self._open: OrderedDict[tuple[str, int | None], tuple[contextlib.ExitStack, OpenedVideo]] = (
            OrderedDict()
        )

    def __enter__(self) -> OpenVideos:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def open(self, ref: VideoFileRef, threads: int | None = 1) -> Iterator[OpenedVideo]:
        """`open_video(ref, threads)` (with the local path), or the one already open for that file and
        thread count."""
        key = (ref.path, threads)
        if key in self._open:
            self._open.move_to_end(key)
        else:
            self._open[key] = self._open_new(ref, threads)
            self.opens += 1
            while len(self._open) > self.capacity:
                self._drop(next(iter(self._open)))
        try:
            yield self._open[key][1]
        except BaseException:
            self._drop(key)  # its position and decoder state are unknown
            raise

    def _open_new(self, ref: VideoFileRef, threads: int | None) -> tuple[contextlib.ExitStack, OpenedVideo]:
        stack = contextlib.ExitStack()
        try:
            local = stack.enter_context(self.fetch(ref.path)) if self.fetch is not None else ref.path
            container, stream = stack.enter_context(open_video(dataclasses.replace(ref, path=local), threads))
        except BaseException:
            stack.close()
            raise
        return stack, OpenedVideo(container, stream, local)

    def _drop(self, key: tuple[str, int | None]) -> None:
        entry = self._open.pop(key, None)
        if entry is not None:
            entry[0].close()

    def close(self) -> None:
        for key in list(self._open):
            self._drop(key)


class OpenedVideo(NamedTuple):
    """A file of `OpenVideos`: its container, first video stream and local path."""

    container: Any
    stream: VideoStream
    path: str


def codec_name(stream: VideoStream) -> str:
    """The codec's canonical name (`av1` whether PyAV decodes it with libdav1d or not)."""
    return stream.codec_context.codec.canonical_name


def time_base(stream: VideoStream, ref: VideoFileRef) -> Fraction:
    """The stream's time base (a stream without one cannot be timed)."""
    if stream.time_base is None:
        raise ref.error("Invalid video time base (None). Expected a time base on the video stream.")
    return stream.time_base


def pixel_format(stream: VideoStream, ref: VideoFileRef) -> str:
    """The pixel format the stream's decoder reports."""
    if stream.codec_context.pix_fmt is None:
        raise ref.error("Invalid pixel format (None). Expected the decoder to report one.")
    return stream.codec_context.pix_fmt


def demux(container: Any, stream: VideoStream, ref: VideoFileRef) -> Iterator[av.Packet]:
    """The stream's packets in decode order (flush packets included), read errors as `DatasetError`."""
    try:
        yield from container.demux(stream)
    except av.FFmpegError as exc:
        raise ref.error(f"not a readable video ({exc})") from exc


def seek(container: Any, stream: VideoStream, timestamp_s: float | None, ref: VideoFileRef) -> None:
    """Seek to the keyframe at or before `timestamp_s` (None: the start of the file)."""
    if timestamp_s is None:
        offset = stream.start_time or 0
    else:
        offset = round(Fraction(timestamp_s) / time_base(stream, ref))
    try:
        container.seek(offset, stream=stream, backward=True, any_frame=False)
    except av.FFmpegError as exc:
        raise ref.error(f"cannot seek to {timestamp_s} s ({exc})") from exc


def all_frames(
    container: Any, stream: VideoStream, ref: VideoFileRef
) -> Generator[tuple[float, av.VideoFrame], None, None]:
    """(time in s, frame) in presentation order, from the current position to the end."""
    return decode(stream, demux(container, stream, ref), ref)


def decode(
    stream: VideoStream, packets: Iterable[av.Packet], ref: VideoFileRef
) -> Generator[tuple[float, av.VideoFrame], None, None]:
    """(time in s, frame) in presentation order, of `packets` (demuxed from `stream`, flush packets last)."""
    for packet in packets:
        try:
            frames = stream.decode(packet)
        except av.FFmpegError as exc:
            raise ref.error(f"corrupt video data ({exc})") from exc
        for frame in frames:
            if frame.pts is None:
                raise ref.error("Invalid frame timestamp (None). Expected a pts on every frame.")
            if frame.time_base is None:
                raise ref.error("Invalid frame time base (None). Expected a time base on every frame.")
            yield float(frame.pts * frame.time_base), frame


def frames_from(
    container: Any, stream: VideoStream, start_s: float, ref: VideoFileRef
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
class EpisodeSpan:
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


def nearest(
    items: Iterable[tuple[float, T]], segment: EpisodeSpan, ref: VideoFileRef
) -> Iterator[tuple[int, T]]:
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


def _checked(t: float, item: T, i: int, segment: EpisodeSpan, ref: VideoFileRef) -> T:
    if abs(t - segment.target(i)) >= segment.half_frame_s - EPS_S:
        raise _missing(i, t, segment, ref)
    return item


def _missing(i: int, t: float | None, segment: EpisodeSpan, ref: VideoFileRef) -> DatasetError:
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
