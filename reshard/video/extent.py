"""How much of a video file is there: its header's end time and, for a file cut short, the time of every
frame whose packet is whole.

An MP4 whose index (`moov`) comes first stays readable when its end is cut off (a download or copy that
stopped): the header still promises every frame, the demuxer ends early without an error, and the frames
past the cut are simply missing. Reading the header alone cannot see it. `video_extent` reads the packets
of the last GOP only (one seek); when they are there, the file is whole. When they are not, it demuxes
every packet, without decoding, and keeps the presentation time of each whole one, so that an episode is
defective exactly when some of its frames are missing. An MP4 cut before its index (`moov` at the end) is
not readable at all.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import av
import numpy as np

from reshard.video.frames import EPS_S


@dataclass(frozen=True)
class VideoExtent:
    """What a video file holds.

    Attributes:
        end_s: where its header says the video stream ends, in seconds.
        frames: the frame count its header promises (0 where it gives none).
        times_s: None for a whole file; for one cut short, the presentation time of every frame whose
            packet is whole, sorted.
        width, height: its frames' size in pixels, as its stream's header says (0 where it does not).
    """

    end_s: float
    frames: int = 0
    times_s: np.ndarray | None = None
    width: int = 0
    height: int = 0

    def __repr__(self) -> str:
        cut = "" if self.times_s is None else f", cut short: {len(self.times_s)} frames"
        return f"VideoExtent(end_s={self.end_s:.4f}, frames={self.frames}, {self.width}x{self.height}{cut})"

    @property
    def truncated(self) -> bool:
        return self.times_s is not None


def frames_in_range(times_s: np.ndarray, from_s: float, to_s: float, fps: float) -> int:
    """How many of `times_s` (sorted) fall to an episode spanning `[from_s, to_s)` at `fps`: lerobot takes
    the frame nearest `from_s + i / fps`, so a frame counts from half a period before `from_s`."""
    half = 0.5 / fps
    lo, hi = np.searchsorted(times_s, [from_s - half, to_s - half])
    return int(hi - lo)


def video_extent(container: Any) -> VideoExtent:
    """The extent of the first video stream of an opened PyAV input container.

    Raises:
        ValueError: the file has no video stream, or no end time in its header.
        av.FFmpegError: the file cannot be read.
    """
    if not container.streams.video:
        raise ValueError("no video stream")
    stream = container.streams.video[0]
    end_s = _header_end_s(container, stream)
    frames = int(stream.frames or 0)
    width, height = int(stream.codec_context.width or 0), int(stream.codec_context.height or 0)
    if _tail_present(container, stream, end_s):
        return VideoExtent(end_s, frames, width=width, height=height)
    container.seek(stream.start_time or 0, stream=stream, backward=True, any_frame=False)
    return VideoExtent(end_s, frames, _whole_packet_times(container, stream), width=width, height=height)


def _header_end_s(container: Any, stream: Any) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(((stream.start_time or 0) + stream.duration) * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000
    raise ValueError("video has no duration in its header")


def _tail_present(container: Any, stream: Any, end_s: float) -> bool:
    """Whether the packets from the last keyframe on are whole and reach the header's end time."""
    if stream.time_base is None:
        return False
    try:
        container.seek(
            round((end_s - EPS_S) / stream.time_base), stream=stream, backward=True, any_frame=False
        )
        reached = -np.inf
        for packet in container.demux(stream):
            if packet.pts is None:
                continue
            if packet.is_corrupt:
                return False
            reached = max(reached, float((packet.pts + (packet.duration or 0)) * stream.time_base))
    except av.FFmpegError:
        return False
    return reached >= end_s - EPS_S


def _whole_packet_times(container: Any, stream: Any) -> np.ndarray:
    """The presentation time of each whole packet, up to the first damaged one or a read error."""
    times: list[float] = []
    with contextlib.suppress(av.FFmpegError):  # what was read before an error is what the file holds
        for packet in container.demux(stream):
            if packet.is_corrupt:
                break
            if packet.pts is not None:
                times.append(float(packet.pts * stream.time_base))
    return np.sort(np.asarray(times, dtype=np.float64))


def decoded_frame_times(container: Any) -> np.ndarray:
    """The presentation time of every frame of the first video stream that decodes, sorted: decoding
    stops at the first damaged packet or error (a file cut short), and the frames before it are kept."""
    stream = container.streams.video[0]
    times: list[float] = []
    # What decoded before a damaged packet or an error is what the file holds; the flush adds the frames
    # the decoder still holds (a decoder that cannot flush after an error keeps what it gave).
    with contextlib.suppress(av.FFmpegError):
        for packet in container.demux(stream):
            if packet.is_corrupt:
                break
            times += [float(f.time) for f in stream.decode(packet) if f.time is not None]
    with contextlib.suppress(av.FFmpegError):
        times += [float(f.time) for f in stream.decode(None) if f.time is not None]
    return np.sort(np.asarray(times, dtype=np.float64))
