"""Encoder settings of the re-encodes: the codecs, their defaults (measured), and one stream's options."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import av
from av.video.reformatter import ColorRange

from reshard.video.frames import VideoStream, frame_rate

# SVT-AV1 prints its configuration on every encoder open unless told otherwise.
os.environ.setdefault("SVT_LOG", "1")

VideoMode = Literal["copy", "hevc", "h264"]
VIDEO_MODES: tuple[str, ...] = ("copy", "hevc", "h264")
# Codec name (as FFmpeg's codec descriptors name it) -> the encoder used to write it.
ENCODERS: dict[str, str] = {"av1": "libsvtav1", "hevc": "libx265", "h264": "libx264"}
# lerobot records with g=2: every other frame is a keyframe, so a random-access decode costs at most one
# extra frame. Re-encodes keep that unless the caller passes the source's own GOP.
DEFAULT_GOP = 2
# Re-encode defaults, chosen by measurement (docs/cli/reshard.md: how those defaults were chosen).
DEFAULT_CRF: dict[str, int] = {"av1": 30, "hevc": 21, "h264": 18}
DEFAULT_PRESET: dict[str, str] = {"av1": "8", "hevc": "fast", "h264": "fast"}
# The crf each encoder accepts (8-bit x264/x265: 0-51; SVT-AV1: 0-63), checked before any work.
CRF_RANGE: dict[str, tuple[int, int]] = {"av1": (0, 63), "hevc": (0, 51), "h264": (0, 51)}
X26X_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
)
# x264's and x265's `--tune` values (`x264 --fullhelp`, `x265 --help`): settings applied over the preset.
# `fastdecode` makes streams cheaper to decode on a CPU: x264 drops CABAC (CAVLC instead), the deblocking
# filter and weighted prediction; x265 drops deblocking, SAO and weighted prediction. SVT-AV1 has none here.
# What it gains, measured: docs/cli/reshard.md (`--tune fastdecode`).
TUNES: dict[str, tuple[str, ...]] = {
    "h264": ("film", "animation", "grain", "stillimage", "psnr", "ssim", "fastdecode", "zerolatency"),
    "hevc": ("psnr", "ssim", "grain", "zerolatency", "fastdecode", "animation"),
}
# moov in front: a reader can start on the first bytes of a whole-file fetch.
MUX_OPTIONS: dict[str, str] = {"movflags": "faststart"}
# What NVDEC decodes (NVIDIA's NVDEC application note): H.264 4:2:0 only (4:4:4 on no GPU), HEVC 4:2:0
# from Pascal on and HEVC 4:4:4 from Turing on. A size that 4:2:0 cannot hold (odd width or height) is
# encoded 4:4:4 in HEVC and refused in H.264.
PIX_FMT_420, PIX_FMT_444 = "yuv420p", "yuv444p"


def target_pix_fmt(codec: str, width: int, height: int) -> str | None:
    """The pixel format of an `hevc` / `h264` re-encode of `width` x `height` frames: 4:2:0 where the size
    allows it, else HEVC 4:4:4; None for an odd size in H.264 (no NVDEC decodes H.264 4:4:4)."""
    if width % 2 == 0 and height % 2 == 0:
        return PIX_FMT_420
    return PIX_FMT_444 if codec == "hevc" else None


# x265's AVX/AVX2 `propagateCost` (its cu-tree, in the lookahead) writes up to 16 bytes past a buffer of
# one int per 8x8 block of a half-resolution row when that row holds fewer than 4 blocks: frames at most 48
# pixels wide (x265 2.1 to 4.2; docs/limits.md). At 33-48 the write reaches the next heap chunk's size
# field, and the process aborts (`corrupted size vs. prev_size`) when glibc next frees near it. Without the
# cu-tree the kernel is never called; the SIMD level cannot be chosen per encoder (x265 sets it once per
# process), so this is the per-encoder fix. Wider frames are encoded as before, byte for byte.
X265_NO_CUTREE_WIDTH = 48


def size_refusal(codec: str, width: int, height: int) -> str:
    """Why `target_pix_fmt` refuses a size, and what to do instead."""
    return (
        f"Invalid frame size ({width}x{height}) for --video {codec}. Expected an even width and height "
        "(4:2:0); NVDEC decodes no H.264 4:4:4: reshard with --video hevc (4:4:4 at odd sizes) or copy."
    )


# --- colour ------------------------------------------------------------------------------------------


# AVCOL_SPC_RGB, and the UNSPECIFIED of AVColorSpace, AVColorPrimaries and AVColorTransferCharacteristic
# (PyAV's `Colorspace` enum holds swscale's matrices, not these codes).
_SPC_RGB, _UNSPECIFIED = 0, 2


@dataclass(frozen=True)
class Colour:
    """How a stream's YUV codes map to colours (FFmpeg's AVCOL_* codes): range, matrix, primaries, transfer.

    A re-encode keeps the source's: its YUV codes are encoded as they are (never converted to another
    range or matrix) and tagged with the source's values, so every decoder maps them to the same RGB.
    Full range (`yuvj420p`, `color_range=pc`) stays full range.
    """

    range: int = ColorRange.UNSPECIFIED
    space: int = _UNSPECIFIED
    primaries: int = _UNSPECIFIED
    trc: int = _UNSPECIFIED

    @classmethod
    def of(cls, stream: VideoStream) -> Colour:
        """The colour of a decoding stream (FFmpeg's `yuvj*` formats are full range whatever the tag)."""
        cc = stream.codec_context
        full = cc.color_range == ColorRange.JPEG or (cc.pix_fmt or "").startswith("yuvj")
        # An RGB source is converted to YUV here with swscale's default matrix, not tagged RGB.
        space = _UNSPECIFIED if cc.colorspace == _SPC_RGB else cc.colorspace
        return cls(ColorRange.JPEG if full else cc.color_range, space, cc.color_primaries, cc.color_trc)

    def tag(self, stream: VideoStream) -> None:
        """Tag an encoding stream (FFmpeg's libx264/libx265 write these into the VUI)."""
        cc = stream.codec_context
        cc.color_range, cc.colorspace = self.range, self.space
        cc.color_primaries, cc.color_trc = self.primaries, self.trc

    def convert(self, frame: av.VideoFrame, pix_fmt: str) -> av.VideoFrame:
        """`frame` in `pix_fmt`, its codes in this range (a yuvj420p frame becomes yuv420p, codes unchanged)."""
        if frame.format.name == pix_fmt:
            return frame
        return frame.reformat(format=pix_fmt, src_color_range=self.range, dst_color_range=self.range)


# --- encoder settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncoderSettings:
    """How an encoder is set up, but for the frame rate, size and pixel format: fixed keyframe interval,
    no scene cuts, closed GOP, `bframes` B-frames.

    Attributes:
        codec: `av1`, `hevc` or `h264`.
        gop: keyframe interval in frames.
        crf: constant rate factor.
        preset: encoder speed preset; None picks `DEFAULT_PRESET[codec]`.
        tune: the encoder's `--tune` (one of `TUNES[codec]`); None: none.
        bframes: consecutive B-frames allowed (x264/x265 only).
        threads: worker threads; None leaves the encoder's default (x265: one per core).
        lossless: x265's lossless mode (`crf` is then ignored): what lerobot writes depth maps with.
    """

    codec: str
    gop: int
    crf: int
    preset: str | int | None = None
    tune: str | None = None
    bframes: int = 0
    threads: int | None = None
    lossless: bool = False

    def __post_init__(self) -> None:
        if self.lossless and self.codec != "hevc":
            raise ValueError(f"Invalid codec ({self.codec!r}) for a lossless encode. Expected 'hevc'.")
        if self.codec not in ENCODERS:
            raise ValueError(f"Invalid codec ({self.codec!r}). Expected one of {sorted(ENCODERS)}.")
        if self.tune is not None and self.tune not in TUNES.get(self.codec, ()):
            raise ValueError(
                f"Invalid tune ({self.tune!r}) for {self.codec}. Expected one of {list(TUNES.get(self.codec, ()))}."
            )

    def options(self, width: int | None = None) -> dict[str, str]:
        """The encoder's options for PyAV, for frames `width` pixels wide (None: a width that needs nothing
        of its own)."""
        codec, gop, crf, bframes, threads = self.codec, self.gop, self.crf, self.bframes, self.threads
        preset = DEFAULT_PRESET[codec] if self.preset is None else str(self.preset)
        if codec == "av1":
            return {"g": str(gop), "crf": str(crf), "preset": preset}
        # The tune is applied with the preset, before the params below (which touch none of its settings).
        tuned = {"tune": self.tune} if self.tune is not None else {}
        params = [f"keyint={gop}", f"min-keyint={gop}", "scenecut=0", f"bframes={bframes}"]
        if codec == "h264":
            return {"crf": str(crf), "preset": preset, **tuned, "x264-params": ":".join(params)}
        # x265 ignores AVCodecContext.thread_count: its thread pool and frame threads are set here.
        # Reproducible output (a resumed reshard equals an uninterrupted one): with x265's sliced lookahead
        # two encodes of the same frames in one process differed about every other run, and with weighted
        # prediction's analysis they differed between processes (measured, 1 pool thread). Without both,
        # every encode was byte-identical, at the same speed; robot cameras rarely fade, which is what
        # weighted prediction is for.
        params += ["open-gop=0", "log-level=error", "lookahead-slices=0", "weightp=0"]
        params += ["lossless=1"] if self.lossless else []
        params += ["cutree=0"] if width is not None and width <= X265_NO_CUTREE_WIDTH else []
        if threads:
            params += [f"pools={threads}"] + (["frame-threads=1"] if threads == 1 else [])
        return {"crf": str(crf), "preset": preset, **tuned, "x265-params": ":".join(params)}


def add_video_stream(
    container: av.container.OutputContainer,
    encoder: EncoderSettings,
    *,
    fps: float | Fraction,
    width: int,
    height: int,
    pix_fmt: str = PIX_FMT_420,
    colour: Colour | None = None,
) -> VideoStream:
    """Add an encoding video stream to an output container, time base `1 / fps`, its encoder opened (an
    encoder that refuses the size or pixel format raises `av.FFmpegError` here), at the scheduling
    priority of everything else (`ordinary_scheduling`).

    Args:
        container: the output container.
        encoder: the codec and its settings.
        fps: frame rate.
        width, height: frame size in pixels.
        pix_fmt: the pixel format to encode.
        colour: the range, matrix, primaries and transfer to tag (default: untagged, limited range).
    """
    rate = frame_rate(fps)
    codec = encoder.codec
    stream = container.add_stream(ENCODERS[codec], rate=rate, options=encoder.options(width))
    assert isinstance(stream, VideoStream), stream  # ENCODERS holds video encoders only
    stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
    stream.time_base = 1 / rate
    if codec != "av1":
        stream.codec_context.gop_size = encoder.gop
        stream.codec_context.max_b_frames = encoder.bframes
    if codec == "hevc":
        stream.codec_tag = "hvc1"  # parameter sets out of band; what Apple players and most tools expect
    if encoder.threads is not None:
        stream.codec_context.thread_count = encoder.threads
    if colour is not None:
        colour.tag(stream)
    with ordinary_scheduling():
        stream.codec_context.open()
    return stream


_REAL_TIME = (os.SCHED_FIFO, os.SCHED_RR)


@contextlib.contextmanager
def ordinary_scheduling() -> Iterator[None]:
    """Undo, when the block ends, any real-time scheduling a library gave this process's threads in it.

    SVT-AV1 (libsvtav1, as PyAV's wheel has it) run as root makes the thread that opens an encoder and
    each of its ~40 worker threads SCHED_FIFO at priority 99: from then on the process, and every process
    it starts (a reshard's workers inherit the policy), would run before every ordinary process of the
    node, other users' included, and a busy one could starve the node. So the calling thread gets its own
    policy back, and every thread started in the block that is real-time becomes SCHED_OTHER. (As another
    user the library's calls fail, with a warning of its own, and nothing changes.)
    """
    before = _threads()
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, param):
            os.sched_setscheduler(0, policy, param)
        for tid in _threads() - before:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                if os.sched_getscheduler(tid) in _REAL_TIME:
                    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))


def _threads() -> set[int]:
    """The ids of this process's threads."""
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:  # no /proc: nothing to undo that can be seen
        return set()
