"""The sample's video files: RGB frames and 12-bit depth codes encoded as lerobot records them, and
single-episode MP4s concatenated by remuxing (no re-encode) into files that hold several episodes."""

from __future__ import annotations

import io
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from reshard.video.encode import EncoderSettings, add_video_stream

# The sample favours generation speed: x264 / x265 at their fastest preset, SVT-AV1 at lerobot's 12.
SAMPLE_PRESETS: dict[str, str] = {"av1": "12", "hevc": "ultrafast", "h264": "ultrafast"}


def encode_frames(
    frames: Iterator[np.ndarray],
    out: str | io.BytesIO,
    *,
    codec: str,
    fps: int,
    gop: int,
    crf: int,
    height: int,
    width: int,
    preset: str | int | None = None,
    bframes: int = 0,
    pix_fmt: str = "yuv420p",
) -> int:
    """Encode RGB frames into an MP4 (path or buffer) in `pix_fmt` (`yuvj420p`: full range, as x264
    writes an MJPEG webcam's frames); returns the number of frames written."""
    with av.open(out, mode="w", format="mp4") as container:
        preset = SAMPLE_PRESETS.get(codec) if preset is None else preset
        encoder = EncoderSettings(codec, gop=gop, crf=crf, preset=preset, bframes=bframes)
        stream = add_video_stream(container, encoder, fps=fps, width=width, height=height, pix_fmt=pix_fmt)
        return _encode_all(container, stream, frames, pix_fmt="rgb24", fps=fps)


def _encode_all(container: Any, stream: Any, images: Iterator[np.ndarray], *, pix_fmt: str, fps: int) -> int:
    """Encode images (frame i at i / fps) and flush; returns how many."""
    count = 0
    for i, image in enumerate(images):
        frame = av.VideoFrame.from_ndarray(image, format=pix_fmt)
        frame.pts, frame.time_base = i, Fraction(1, fps)
        for packet in stream.encode(frame):
            container.mux(packet)
        count += 1
    for packet in stream.encode():
        container.mux(packet)
    return count


def encode_depth(
    codes: Iterator[np.ndarray], out: str | io.BytesIO, *, fps: int, gop: int, height: int, width: int
) -> int:
    """Encode 12-bit depth codes (HxW uint16) as lossless HEVC `gray12le`, as lerobot does."""
    with av.open(out, mode="w", format="mp4") as container:
        encoder = EncoderSettings("hevc", gop=gop, crf=0, preset=SAMPLE_PRESETS["hevc"], lossless=True)
        stream = add_video_stream(container, encoder, fps=fps, width=width, height=height, pix_fmt="gray12le")
        return _encode_all(container, stream, codes, pix_fmt="gray12le", fps=fps)


def concat_remux(parts: list[bytes], out_path: str) -> list[float]:
    """Concatenate single-stream MP4s by remuxing (no re-encode); returns each part's start in seconds."""
    starts: list[float] = []
    with av.open(out_path, mode="w", format="mp4") as out:
        out_stream = None
        offset = 0  # in the output stream's time base
        for data in parts:
            with av.open(io.BytesIO(data), mode="r") as src:
                in_stream = src.streams.video[0]
                if out_stream is None:
                    out_stream = out.add_stream_from_template(in_stream, opaque=True)
                    out_stream.time_base = in_stream.time_base
                tb = in_stream.time_base
                if tb is None:
                    raise ValueError(
                        f"Invalid sample part {len(starts)} (no time base). Expected a video time base."
                    )
                starts.append(float(offset * tb))
                end = offset
                for packet in src.demux(in_stream):
                    if packet.dts is None:
                        continue
                    duration = packet.duration or 0
                    packet.pts = (packet.pts or 0) + offset
                    packet.dts = packet.dts + offset
                    end = max(end, packet.pts + duration)
                    packet.stream = out_stream
                    out.mux(packet)
                offset = end
    return starts


def add_audio(path: Path, *, rate: int = 16_000) -> None:
    """Give an MP4 a second stream, an AAC tone as long as its video, as recorders with a microphone do."""
    tmp = path.with_name(f".{path.name}.audio.mp4")
    with av.open(str(path)) as src, av.open(str(tmp), mode="w", format="mp4") as out:
        video = src.streams.video[0]
        out_video = out.add_stream_from_template(video, opaque=True)
        out_video.time_base = video.time_base
        audio = out.add_stream("aac", rate=rate, layout="mono")
        seconds = float(src.duration or 0) / av.time_base
        for packet in src.demux(video):
            if packet.dts is not None:
                packet.stream = out_video
                out.mux(packet)
        t = np.arange(int(seconds * rate)) / rate
        tone = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
        frame = av.AudioFrame.from_ndarray(tone, format="flt", layout="mono")
        frame.sample_rate, frame.pts = rate, 0
        out.mux(audio.encode(frame))
        out.mux(audio.encode(None))
    tmp.replace(path)
