"""`Frames`: decoded frames and their presentation times, what every decoder of the reader returns.

Below both decoders (`reader.decode.video`, torchcodec, and `reader.decode.depth`, PyAV) so that neither imports the
other for it. Importing it loads no torch: the annotations stay strings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    import torch


class Frames(NamedTuple):
    """Decoded frames and their presentation times (what torchcodec's `FrameBatch` carries)."""

    data: torch.Tensor
    pts_seconds: torch.Tensor


class FrameBatch(Protocol):
    """What a decoder's `get_frames_at` returns: `Frames`, or torchcodec's `FrameBatch`."""

    @property
    def data(self) -> torch.Tensor: ...
    @property
    def pts_seconds(self) -> torch.Tensor: ...


class FrameSource(Protocol):
    """An open decoder as the cursors read it: torchcodec's `VideoDecoder`, `DepthDecoder` (PyAV) or
    `ResizedDecoder`."""

    def get_frames_at(self, *, indices: list[int]) -> FrameBatch: ...
