"""Depth cameras as lerobot 0.6.1 records them: 12-bit log-quantized depth in lossless HEVC `gray12le`.

A depth feature is a video feature whose `info` carries `is_depth_map: true` (or lerobot's older
`video.is_depth_map`, in `info` or `video_info`). Each frame holds 12-bit codes q in [0, 4095] of a
quantizer with `video.depth_min`, `video.depth_max`, `video.shift` (metres) and `video.use_log`
(defaults 0.01, 10, 3.5, true). lerobot decodes the plane with PyAV (torchcodec returns 8-bit RGB) and
dequantizes it into float32 (1, H, W) in millimetres (rounded) or metres; `Quantizer.dequantize` does
exactly its arithmetic, and `Quantizer.quantize` its quantizer, so that `lrs sample` writes what
lerobot writes. `DepthDecoder` is the PyAV decoder the reader uses for these streams, read forward like
torchcodec's (`reader.decode.video.DecodeCursor`). Importing it loads neither torch nor PyAV (the `lrs` command
line uses `is_depth`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from reader.decode.frames import Frames
from reader.errors import DecodeError
from reader.plan.spec import DepthUnit

if TYPE_CHECKING:
    import torch


DEPTH_QMAX = 4095  # 12-bit codes
MM_PER_METRE = 1000.0
_UINT16_MAX = 65535
DEFAULTS: dict[str, Any] = {"depth_min": 0.01, "depth_max": 10.0, "shift": 3.5, "use_log": True}
# Pixel formats a depth plane may be stored in: one plane, more than 8 bits, read without conversion.
DEPTH_PIX_FMTS = ("gray12le", "gray16le", "gray10le")
# How far ahead of the last decoded frame a decoder reads forward instead of seeking.
_FORWARD_FRAMES = 16


def is_depth(feature: Mapping[str, Any]) -> bool:
    """Whether a feature of `meta/info.json` is a depth map (lerobot's current and older spellings)."""
    info = feature.get("info") or {}
    video_info = feature.get("video_info") or {}
    return bool(
        info.get("is_depth_map") or info.get("video.is_depth_map") or video_info.get("video.is_depth_map")
    )


@dataclass(frozen=True)
class Quantizer:
    """lerobot's depth quantizer (`lerobot.datasets.depth_utils`), parameters in metres.

    Attributes:
        depth_min: depth at code 0.
        depth_max: depth at code 4095.
        shift: offset added before the log (log mode), so that depth_min + shift > 0.
        use_log: quantize log(depth + shift) instead of depth.
        pix_fmt: the pixel format the stream stores the codes in.
    """

    depth_min: float = DEFAULTS["depth_min"]
    depth_max: float = DEFAULTS["depth_max"]
    shift: float = DEFAULTS["shift"]
    use_log: bool = DEFAULTS["use_log"]
    pix_fmt: str = "gray12le"

    def __post_init__(self) -> None:
        for name in ("depth_min", "depth_max", "shift"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"Invalid video.{name} ({value!r}). Expected a finite number of metres.")
        if not isinstance(self.use_log, bool):
            raise ValueError(f"Invalid video.use_log ({self.use_log!r}). Expected true or false.")
        if self.depth_max <= self.depth_min:
            raise ValueError(
                f"Invalid video.depth_max ({self.depth_max}). Expected more than video.depth_min ({self.depth_min})."
            )
        if self.use_log and self.depth_min + self.shift <= 0:
            raise ValueError(
                f"Invalid video.shift ({self.shift}). Expected video.depth_min + video.shift > 0 for log "
                f"quantization (depth_min={self.depth_min})."
            )
        if self.pix_fmt not in DEPTH_PIX_FMTS:
            raise ValueError(
                f"Invalid video.pix_fmt ({self.pix_fmt!r}) of a depth map. Expected one of {list(DEPTH_PIX_FMTS)}."
            )

    @classmethod
    def from_feature(cls, feature: Mapping[str, Any]) -> Quantizer:
        """The quantizer of a depth feature; missing parameters take lerobot's defaults, as lerobot does.

        Raises:
            ValueError: a parameter is invalid (the message names it).
        """
        info = {**(feature.get("video_info") or {}), **(feature.get("info") or {})}
        values: dict[str, Any] = {}
        for name, default in DEFAULTS.items():
            value = info.get(f"video.{name}")
            values[name] = default if value is None else value
        return cls(pix_fmt=info.get("video.pix_fmt") or "gray12le", **values)

    def _scale_offset(self) -> tuple[float, float]:
        if self.use_log:
            log_min = math.log(self.depth_min + self.shift)
            log_max = math.log(self.depth_max + self.shift)
            return (log_max - log_min) / DEPTH_QMAX, log_min
        return (self.depth_max - self.depth_min) / DEPTH_QMAX, self.depth_min

    def dequantize(self, codes: torch.Tensor, unit: DepthUnit) -> torch.Tensor:
        """Codes (N, 1, H, W) of any integer dtype -> float32 depth (N, 1, H, W) in `unit`.

        The same torch operations, in the same order, as lerobot's `dequantize_depth`, so the values are
        bit for bit lerobot's.
        """
        import torch

        scale, offset = self._scale_offset()
        buf = codes.squeeze(-3).to(dtype=torch.float32, copy=True)
        buf.mul_(scale).add_(offset)
        if self.use_log:
            buf.exp_().sub_(float(self.shift))
        buf.clamp_(float(self.depth_min), float(self.depth_max))
        buf.unsqueeze_(-3)
        if unit == "m":
            return buf
        return buf.mul_(MM_PER_METRE).round_().clamp_(0.0, _UINT16_MAX)

    def quantize(self, depth_m: np.ndarray) -> np.ndarray:
        """Float depth in metres (H, W) -> uint16 codes, as lerobot's `quantize_depth` (input in metres)."""
        depth = np.asarray(depth_m).astype(np.float32)
        depth_min, depth_max, shift = (
            np.float32(self.depth_min),
            np.float32(self.depth_max),
            np.float32(self.shift),
        )
        if self.use_log:
            log_min = math.log(float(depth_min + shift))
            log_max = math.log(float(depth_max + shift))
            norm = (np.log(depth + shift) - log_min) / (log_max - log_min)
        else:
            norm = (depth - depth_min) / (depth_max - depth_min)
        return np.rint(norm * DEPTH_QMAX).clip(0, DEPTH_QMAX).astype(np.uint16, copy=False)

    def info(self) -> dict[str, Any]:
        """The `video.*` keys lerobot writes for this quantizer."""
        return {f"video.{name}": getattr(self, name) for name in DEFAULTS}


def open_depth_decoder(path: str, *, expected_pix_fmt: str, where: Any) -> DepthDecoder:
    """A `DepthDecoder` on `path`, with a file PyAV cannot open turned into a `DecodeError`."""
    import av

    try:
        return DepthDecoder(path, expected_pix_fmt=expected_pix_fmt, where=where)
    except (av.FFmpegError, OSError) as exc:
        raise DecodeError(f"Invalid video {where}: cannot open ({exc}). Expected an MP4.") from exc


class _Metadata:
    def __init__(self, average_fps: float, num_frames: int | None, width: int, height: int) -> None:
        self.average_fps = average_fps
        self.num_frames = num_frames
        self.width = width
        self.height = height


class DepthDecoder:
    """A depth stream decoded with PyAV into its raw codes, read forward like a torchcodec decoder.

    `get_frames_at(indices=...)` returns uint16 codes (N, 1, H, W) and their times; frame i is the one
    shown at i / average_fps. A frame at or shortly after the last one decoded is reached by decoding
    forward; anything else seeks to the keyframe before it.

    Raises:
        DecodeError: the stream's pixel format is not the feature's (`expected_pix_fmt`), or not a
            depth plane format (an 8-bit or RGB stream would give wrong depth).
    """

    def __init__(self, path: str, *, expected_pix_fmt: str, where: Any) -> None:
        import av

        self._container = av.open(path)
        try:
            self._stream = self._container.streams.video[0]
        except IndexError:
            self._container.close()
            raise DecodeError(f"Invalid video {where}: no video stream. Expected a depth stream.") from None
        pix_fmt = self._stream.codec_context.pix_fmt
        if pix_fmt != expected_pix_fmt or pix_fmt not in DEPTH_PIX_FMTS:
            self._container.close()
            raise DecodeError(
                f"Invalid video {where}: pixel format {pix_fmt!r}. Expected {expected_pix_fmt!r}, the depth "
                "feature's video.pix_fmt (a depth map read from another format would be wrong)."
            )
        self._pix_fmt = pix_fmt
        # One FFmpeg thread, as the torchcodec decoders (the decode threads and workers are the
        # parallelism). FFmpeg's own thread pool would also be a hazard: a fork worker inheriting this
        # decoder as garbage frees it there, joining threads the child does not have (a hang).
        self._stream.codec_context.thread_count = 1
        rate = self._stream.average_rate or self._stream.base_rate
        context = self._stream.codec_context
        self.metadata = _Metadata(
            float(rate) if rate else 0.0, self._stream.frames or None, context.width, context.height
        )
        if self._stream.time_base is None:
            self._container.close()
            raise DecodeError(f"Invalid video {where}: no time base. Expected one on the depth stream.")
        self._time_base: Fraction = self._stream.time_base
        self._frames: Any = None  # the decoding iterator, positioned after `self._last`
        self._last = -1

    def _index(self, pts: int) -> int:
        return round(float(pts * self._time_base) * self.metadata.average_fps)

    def _seek(self, index: int) -> None:
        target = max(0, int(index / self.metadata.average_fps / self._time_base) - 1)
        self._container.seek(target, backward=True, any_frame=False, stream=self._stream)
        self._frames = self._container.decode(self._stream)
        self._last = -1

    def _read_until(self, index: int) -> tuple[np.ndarray, float]:
        if self._frames is None or not (self._last < index <= self._last + _FORWARD_FRAMES):
            self._seek(index)
        for frame in self._frames:
            if frame.pts is None:
                continue
            found = self._index(frame.pts)
            self._last = found
            if found >= index:
                if found != index:
                    break
                return frame.to_ndarray(format=self._pix_fmt), float(frame.pts * self._time_base)
        self._frames = None
        raise IndexError(f"no frame {index} in the stream")

    def get_frames_at(self, indices: list[int]) -> Frames:
        import av
        import torch

        try:
            decoded = {i: self._read_until(i) for i in sorted(set(indices))}
        except av.FFmpegError as exc:
            self._frames = None
            raise RuntimeError(str(exc)) from exc
        data = torch.stack([torch.from_numpy(decoded[i][0].astype(np.uint16, copy=False)) for i in indices])
        pts = torch.tensor([decoded[i][1] for i in indices], dtype=torch.float64)
        return Frames(data.unsqueeze(1), pts)

    def close(self) -> None:
        self._container.close()
