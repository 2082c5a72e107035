"""Re-encodes at the training resolution: one frame size for every (colour) camera, scaled by swscale.

A policy that sees 224x224 frames gains nothing from 640x480 files but decode time and bytes; a reshard
with `--resize` writes the size it will see. Frames are scaled in their own pixel format (YUV planes, the
source's codes and range), before the re-encode's pixel format and colour are applied, by FFmpeg's
swscale with the filter's flag (`SWS_AREA`, `SWS_BICUBIC`, `SWS_BILINEAR`). Verify scales each source
frame with the same `Resize.apply` and compares it with the output frame, so that its PSNR floor and colour
fit measure the encode alone.

lerobot's own resizes, for choosing the filter: `ImageCropResizeProcessorStep` (torchvision
`F.resize`) and the diffusion policy (`torchvision.transforms.Resize`) use bilinear with antialiasing on
tensors; pi0/pi05/smolvla (`resize_with_pad_torch`) `F.interpolate(mode="bilinear")` without
antialiasing; GR00T and evo1 bicubic with antialiasing. A downscale by area averaging (the default here)
aliases least; swscale's bilinear and bicubic widen their kernels when downscaling, as antialiased
torchvision does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import av
from av.video.reformatter import Interpolation

RESIZE_FILTERS: tuple[str, ...] = ("area", "bicubic", "bilinear")
DEFAULT_RESIZE_FILTER = "area"
_FLAGS = {"area": Interpolation.AREA, "bicubic": Interpolation.BICUBIC, "bilinear": Interpolation.BILINEAR}
_SIZE = re.compile(r"^([0-9]+)x([0-9]+)$")
# Beyond the reader's largest frame side (`reader.plan.spec.MAX_FRAME_SIDE`) nothing would read it.
_MAX_SIDE = 8192


@dataclass(frozen=True)
class Resize:
    """The frame size of a re-encode and the swscale filter that scales to it.

    Attributes:
        width, height: the output frame size in pixels, even (4:2:0 holds it), 2..8192.
        filter: `area`, `bicubic` or `bilinear`.
    """

    width: int
    height: int
    filter: str = DEFAULT_RESIZE_FILTER

    def __post_init__(self) -> None:
        for name, side in (("width", self.width), ("height", self.height)):
            if not (2 <= side <= _MAX_SIDE and side % 2 == 0):
                raise ValueError(
                    f"Invalid resize {name} ({side}). Expected an even number of pixels in 2..{_MAX_SIDE} "
                    "(4:2:0 holds even sizes)."
                )
        if self.filter not in RESIZE_FILTERS:
            raise ValueError(
                f"Invalid resize filter ({self.filter!r}). Expected one of {list(RESIZE_FILTERS)}."
            )

    @classmethod
    def parse(cls, size: str, filter: str = DEFAULT_RESIZE_FILTER) -> Resize:
        """`WxH` (e.g. `224x224`) with `filter`.

        Raises:
            ValueError: not `WxH` of even sizes, or an unknown filter.
        """
        match = _SIZE.match(size.strip().lower())
        if match is None:
            raise ValueError(f"Invalid resize ({size!r}). Expected WIDTHxHEIGHT in pixels, e.g. 224x224.")
        return cls(int(match.group(1)), int(match.group(2)), filter)

    @classmethod
    def of_params(cls, params: dict[str, Any]) -> Resize | None:
        """The resize a job's recorded parameters (`layout.json`'s `params`) name, or None."""
        size = params.get("resize")
        if not size:
            return None
        return cls.parse(str(size), str(params.get("resize_filter") or DEFAULT_RESIZE_FILTER))

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"

    def apply(self, frame: av.VideoFrame) -> av.VideoFrame:
        """`frame` scaled to this size in its own pixel format (codes and range unchanged)."""
        if (frame.width, frame.height) == (self.width, self.height):
            return frame
        return frame.reformat(width=self.width, height=self.height, interpolation=_FLAGS[self.filter])
