"""Per-episode video files: a lossless split of packed v3 MP4s, or a re-encode to H.265 / H.264.

A v3 video file holds many episodes back to back; lrs/1 wants one MP4 per (episode, camera) whose frame
`i` is at `i / fps`. `write_episode_video` cuts one episode out of a packed file:

- `copy` remuxes the episode's packets (no re-encode, decoded frames bit-identical to the source's). It
  is only possible when the episode starts on a keyframe and its packets form one self-contained run in
  decode order (`reshard.video.cut`); otherwise that one episode is re-encoded with the source codec and
  the result says why.
- `hevc` / `h264` decode the episode and re-encode it with x265 / x264: yuv420p, 8 bit, short closed GOP,
  no B-frames unless asked, because the reader decodes at random frames and NVDEC has no AV1 decoder. A
  size 4:2:0 cannot hold (odd width or height) is encoded yuv444p in HEVC and refused in H.264.

Every re-encode keeps the source's colour range, matrix, primaries and transfer (`Colour`): the decoded
YUV codes are encoded as they are and tagged as the source's, so full range stays full range.

Source frames are picked the way lerobot picks them: for output frame `i`, the source frame nearest to
`from_timestamp + i / fps`. Outputs are written to a temp file beside the target, then `os.replace`d.
`probe_video` and `compare_episode_video` (from `reshard.video.compare`, re-exported here) inspect a
file and prove an output matches its source.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import av
from av.video.frame import PictureType

from reshard.errors import ReshardError
from reshard.video.compare import (
    DEFAULT_MIN_PSNR_DB,
    VideoComparison,
    VideoProbe,
    compare_episode_video,
    probe_video,
)
from reshard.video.cut import Demuxed, copy_plan, demux_window
from reshard.video.encode import (
    DEFAULT_CRF,
    DEFAULT_GOP,
    DEFAULT_PRESET,
    ENCODERS,
    MUX_OPTIONS,
    TUNES,
    VIDEO_MODES,
    X26X_PRESETS,
    Colour,
    EncoderSettings,
    VideoMode,
    add_video_stream,
    size_refusal,
    target_pix_fmt,
)
from reshard.video.frames import (
    EpisodeSpan,
    OpenVideos,
    VideoFileRef,
    VideoStream,
    codec_name,
    frame_rate,
    frames_from,
    keyframe_interval,
    nearest,
    open_video,
    pixel_format,
)
from reshard.video.resize import Resize

__all__ = [
    "DEFAULT_CRF",
    "DEFAULT_GOP",
    "DEFAULT_MIN_PSNR_DB",
    "DEFAULT_PRESET",
    "ENCODERS",
    "TUNES",
    "EncoderSettings",
    "EpisodeVideo",
    "OpenVideos",
    "VideoComparison",
    "VideoMode",
    "VideoProbe",
    "add_video_stream",
    "compare_episode_video",
    "probe_video",
    "write_episode_video",
]


# --- writing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeVideo:
    """What `write_episode_video` wrote.

    Attributes:
        path: the output file.
        bytes: its size.
        frames: frames in it (== the episode length).
        codec, pix_fmt, width, height: the video stream (codec as FFmpeg names it: av1, hevc, h264).
        gop: keyframe interval in frames: the one encoded with, or for a copy the source's as passed in
            (estimated from the source's keyframes when not passed; None when unknown).
        crf: the crf encoded with, or for a copy the source's as passed in.
        reencoded: the frames were decoded and encoded again.
        reason: why a `copy` had to re-encode; None otherwise.
    """

    path: str
    bytes: int
    frames: int
    codec: str
    pix_fmt: str
    width: int
    height: int
    gop: int | None
    crf: int | None
    reencoded: bool
    reason: str | None = None


def write_episode_video(
    src_path: str,
    out_path: str,
    *,
    from_timestamp: float,
    length: int,
    fps: float,
    mode: VideoMode = "copy",
    gop: int | None = None,
    crf: int | None = None,
    preset: str | None = None,
    tune: str | None = None,
    resize: Resize | None = None,
    bframes: int = 0,
    threads: int | None = None,
    episode: int | None = None,
    camera: str | None = None,
    depth: bool = False,
    videos: OpenVideos | None = None,
    on_frame: Callable[[int], None] | None = None,
) -> EpisodeVideo:
    """Write one episode of a packed source MP4 to its own MP4, frame `i` at `i / fps`, atomically.

    Args:
        src_path: the source video file (local).
        out_path: the file to write; its directory is created; replaced only once complete.
        from_timestamp: the episode's start in the source, in seconds (v3 `from_timestamp`).
        length: the episode's number of frames.
        fps: the dataset's frame rate.
        mode: `copy` (lossless remux, falling back to a re-encode with the source codec for an episode
            that does not start on a keyframe), `hevc` or `h264` (re-encode).
        gop: keyframe interval of a re-encode (default `DEFAULT_GOP`); in `copy` mode, the source's
            (lerobot's `video.g`), used by a fallback re-encode.
        crf: quality of a re-encode (default `DEFAULT_CRF[codec]`); in `copy` mode, the source's
            (lerobot's `video.crf`), used by a fallback re-encode.
        preset: encoder preset of a re-encode (default `DEFAULT_PRESET[codec]`); in `copy` mode, used by
            a fallback re-encode if it is one of the source encoder's presets (x264/x265 names, SVT-AV1
            numbers), else that encoder's default.
        tune: the encoder's `--tune` for an `hevc` / `h264` re-encode (one of `TUNES[mode]`, e.g.
            `fastdecode`); None: none. Refused in `copy` mode, which keeps the source's encoding.
        resize: the frame size and filter of an `hevc` / `h264` re-encode (`reshard.video.resize`);
            None: the source's size. Refused in `copy` mode; a depth map keeps its size.
        bframes: B-frames allowed in a re-encode (0: none, so decode order is presentation order).
        threads: decoder and encoder threads (default 1: callers parallelise across processes).
        episode, camera: named in error messages.
        depth: the stream is a depth map (12-bit codes): it is never re-encoded lossily nor to another
            pixel format, whatever `mode` says. It is copied; an episode that does not start on a
            keyframe is re-encoded as lossless HEVC in its own pixel format.
        videos: source files kept open across calls (a copy reads `src_path` from there, so that the
            episodes of one packed file open it once); None: open it for this call.
        on_frame: called with 1 after each frame a re-encode hands to the encoder (progress); a copy
            calls it not at all.

    Returns:
        What was written.

    Raises:
        ValueError: an argument is out of range.
        DatasetError: the source is missing, corrupt or truncated, or lacks frames of the episode.
        ReshardError: a `copy` needs a re-encode but the source codec has no encoder here; an `h264`
            re-encode of an odd frame size; an encoder that refuses the size or pixel format.
    """
    _check_args(
        from_timestamp=from_timestamp,
        length=length,
        fps=fps,
        mode=mode,
        gop=gop,
        crf=crf,
        preset=preset,
        tune=tune,
        resize=resize,
        bframes=bframes,
        threads=threads,
    )
    ref = VideoFileRef(src_path, episode, camera)
    segment = EpisodeSpan(from_timestamp, length, frame_rate(fps))
    threads = 1 if threads is None else threads
    if mode == "copy" or depth:
        return _copy_episode(
            ref,
            out_path,
            segment,
            gop=gop,
            crf=crf,
            preset=preset,
            threads=threads,
            depth=depth,
            videos=videos,
        )
    encoder = EncoderSettings(
        codec=mode,
        gop=DEFAULT_GOP if gop is None else gop,
        crf=DEFAULT_CRF[mode] if crf is None else crf,
        preset=preset,
        tune=tune,
        bframes=bframes,
        threads=threads,
    )
    # 4:2:0, or 4:4:4 where the size needs it
    return _reencode(ref, out_path, segment, encoder, pix_fmt=None, resize=resize, on_frame=on_frame)


def _check_args(
    *,
    from_timestamp: float,
    length: int,
    fps: float,
    mode: str,
    gop: int | None,
    crf: int | None,
    preset: str | None,
    tune: str | None,
    resize: Resize | None,
    bframes: int,
    threads: int | None,
) -> None:
    checks = [
        (mode in VIDEO_MODES, "mode", mode, f"one of {', '.join(VIDEO_MODES)}"),
        (math.isfinite(from_timestamp) and from_timestamp >= 0, "from_timestamp", from_timestamp, ">= 0"),
        (length >= 1, "length", length, ">= 1"),
        (math.isfinite(fps) and fps > 0, "fps", fps, "> 0"),
        (gop is None or gop >= 1, "gop", gop, ">= 1"),
        (crf is None or 0 <= crf <= 63, "crf", crf, "in [0, 63]"),
        (bframes >= 0, "bframes", bframes, ">= 0"),
        (
            mode == "copy" or preset is None or preset in X26X_PRESETS,
            "preset",
            preset,
            f"one of {X26X_PRESETS}",
        ),
        (
            tune is None or tune in TUNES.get(mode, ()),
            "tune",
            tune,
            f"one of {TUNES[mode]}" if mode in TUNES else "None: a copy keeps the source's encoding",
        ),
        (mode != "copy" or resize is None, "resize", resize, "None: a copy keeps the source's frames"),
        (threads is None or threads >= 0, "threads", threads, ">= 0 (0: the codec's own choice)"),
    ]
    for ok, name, value, expected in checks:
        if not ok:
            raise ValueError(f"Invalid {name} ({value!r}). Expected {expected}.")


@contextlib.contextmanager
def atomic_path(out_path: str) -> Iterator[str]:
    """Yield a temp path beside `out_path`; on success `os.replace` it onto `out_path`, else delete it."""
    directory = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out_path)}.", suffix=".part", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, out_path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def mux(container: av.container.OutputContainer, packets: Iterable[av.Packet]) -> None:
    """Mux packets (one function, so that tests can interrupt a write midway)."""
    for packet in packets:
        container.mux(packet)


def _reencode(
    ref: VideoFileRef,
    out_path: str,
    segment: EpisodeSpan,
    encoder: EncoderSettings,
    pix_fmt: str | None,
    reason: str | None = None,
    resize: Resize | None = None,
    on_frame: Callable[[int], None] | None = None,
) -> EpisodeVideo:
    """Re-encode one episode in `pix_fmt` (None: `target_pix_fmt` for the output size), scaled to `resize`
    (None: the source's size); `on_frame(1)` after each frame is encoded."""
    tb = 1 / segment.rate
    with open_video(ref, encoder.threads) as (container, stream):
        width, height = stream.codec_context.width, stream.codec_context.height
        if resize is not None:
            width, height = resize.width, resize.height
        colour = Colour.of(stream)
        pix_fmt = pix_fmt or target_pix_fmt(encoder.codec, width, height)
        if pix_fmt is None:
            raise ReshardError(str(ref.error(size_refusal(encoder.codec, width, height))))
        frames = nearest(frames_from(container, stream, segment.from_timestamp, ref), segment, ref)
        with atomic_path(out_path) as tmp, av.open(tmp, mode="w", format="mp4", options=MUX_OPTIONS) as out:
            ostream = _open_encoder(out, ref, segment, width, height, pix_fmt, encoder, colour)
            for i, frame in frames:
                # Scaled in the source's own format first: verify scales its source frames the same way.
                frame = colour.convert(resize.apply(frame) if resize is not None else frame, pix_fmt)
                frame.pts, frame.time_base = i, tb
                # A decoded keyframe would otherwise force a keyframe here and break the GOP pattern.
                frame.pict_type = PictureType.NONE
                mux(out, ostream.encode(frame))
                if on_frame is not None:
                    on_frame(1)
            mux(out, ostream.encode(None))
    return EpisodeVideo(
        path=out_path,
        bytes=os.path.getsize(out_path),
        frames=segment.length,
        codec=encoder.codec,
        pix_fmt=_decoded_pix_fmt(out_path, ref),
        width=width,
        height=height,
        gop=encoder.gop,
        crf=encoder.crf,
        reencoded=True,
        reason=reason,
    )


def _open_encoder(
    out: av.container.OutputContainer,
    ref: VideoFileRef,
    segment: EpisodeSpan,
    width: int,
    height: int,
    pix_fmt: str,
    encoder: EncoderSettings,
    colour: Colour,
) -> VideoStream:
    """The output stream, its encoder opened now, so that a refusal names the camera and the size."""
    try:
        return add_video_stream(
            out, encoder, fps=segment.rate, width=width, height=height, pix_fmt=pix_fmt, colour=colour
        )
    except av.FFmpegError as exc:
        problem = (
            f"Invalid video for {ENCODERS[encoder.codec]} ({width}x{height} {pix_fmt}: {exc}). "
            "Expected a size and pixel format it encodes."
        )
        raise ReshardError(str(ref.error(problem))) from exc


def _decoded_pix_fmt(path: str, ref: VideoFileRef) -> str:
    """The pixel format a decoder reports for a written file (full-range 4:2:0 HEVC reads as yuvj420p)."""
    written = VideoFileRef(path, ref.episode, ref.camera)
    with open_video(written, threads=None) as (_, stream):
        return pixel_format(stream, written)


def _copy_episode(
    ref: VideoFileRef,
    out_path: str,
    segment: EpisodeSpan,
    *,
    gop: int | None,
    crf: int | None,
    preset: str | None,
    threads: int,
    depth: bool = False,
    videos: OpenVideos | None = None,
) -> EpisodeVideo:
    opened = videos.open(ref, threads) if videos is not None else open_video(ref, threads)
    with opened as (container, stream, *_):
        codec, pix_fmt = codec_name(stream), pixel_format(stream, ref)
        width, height = stream.codec_context.width, stream.codec_context.height
        packets = demux_window(container, stream, segment, ref)
        plan = copy_plan(packets, segment, ref)
        source_gop = (
            gop
            if gop is not None
            else keyframe_interval([p.time for p in packets], [p.packet.is_keyframe for p in packets])
        )
        if isinstance(plan, list):
            _write_copy(stream, plan, out_path, segment)
            return EpisodeVideo(
                path=out_path,
                bytes=os.path.getsize(out_path),
                frames=segment.length,
                codec=codec,
                pix_fmt=pix_fmt,
                width=width,
                height=height,
                gop=source_gop,
                crf=crf,
                reencoded=False,
            )
    if depth:  # depth codes must come back bit for bit: lossless HEVC in the source's pixel format
        lossless = EncoderSettings(
            "hevc", gop=source_gop or DEFAULT_GOP, crf=0, threads=threads, lossless=True
        )
        return _reencode(ref, out_path, segment, lossless, pix_fmt, reason=plan)
    if codec not in ENCODERS:
        raise ReshardError(
            f"{ref.error(plan)} Invalid source codec for a re-encode ({codec!r}). Expected one of "
            f"{sorted(ENCODERS)}; reshard this dataset with a re-encoding video mode (hevc, h264)."
        )
    encoder = EncoderSettings(
        codec=codec,
        gop=source_gop or DEFAULT_GOP,
        crf=DEFAULT_CRF[codec] if crf is None else crf,
        preset=preset if _preset_fits(codec, preset) else None,
        threads=threads,
    )
    return _reencode(ref, out_path, segment, encoder, pix_fmt, reason=plan)


def _preset_fits(codec: str, preset: str | None) -> bool:
    """`preset` names a preset of `codec`'s encoder (x264/x265 names; SVT-AV1 numbers)."""
    if preset is None:
        return False
    return str(preset).lstrip("-").isdigit() if codec == "av1" else preset in X26X_PRESETS


def _write_copy(
    stream: VideoStream, plan: list[tuple[Demuxed, int]], out_path: str, segment: EpisodeSpan
) -> None:
    """Remux, retimed: presentation rank k -> pts k / fps; decode position j -> dts (j - delay) / fps."""
    tb = 1 / segment.rate
    # The smallest decode delay that keeps dts <= pts for every packet (0 without B-frames).
    delay = max(0, max(j - k for j, (_, k) in enumerate(plan)))
    with atomic_path(out_path) as tmp, av.open(tmp, mode="w", format="mp4", options=MUX_OPTIONS) as out:
        ostream = out.add_stream_from_template(stream, opaque=True)
        ostream.time_base = tb
        packets = []
        for j, (item, k) in enumerate(plan):
            packet = item.packet
            packet.stream = ostream
            packet.time_base = tb
            packet.pts, packet.dts, packet.duration = k, j - delay, 1
            packets.append(packet)
        mux(out, packets)
