"""`Frames`: decoded frames and their presentation times, what every decoder of the reader returns.

Below both decoders (`reader.decode.video`, torchcodec, and `reader.decode.depth`, PyAV) so that neither imports the
other for it. Importing it loads no torch: the annotations stay strings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch


class Frames(NamedTuple):
    """Decoded frames and their presentation times (what torchcodec's `FrameBatch` carries)."""

    data: torch.Tensor
    pts_seconds: torch.Tensor
