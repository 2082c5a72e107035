"""Per-episode video files: `frames` (PyAV primitives and lerobot's nearest-frame rule), `encode` (the
codecs and their settings), `resize` (the frame size of a re-encode), `cut` (which packets of a packed
file hold an episode, and whether they can be copied), `write` (cut or re-encode one episode), `compare`
(probe a file, prove an output equals its source frame by frame) and `extent` (how much of a file is
there: a file cut short, per frame).

`__all__` is what the command line uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.video.compare import DEFAULT_MIN_PSNR_DB
    from reshard.video.encode import ENCODERS, VIDEO_MODES
    from reshard.video.resize import DEFAULT_RESIZE_FILTER, RESIZE_FILTERS

__all__ = ["DEFAULT_MIN_PSNR_DB", "DEFAULT_RESIZE_FILTER", "ENCODERS", "RESIZE_FILTERS", "VIDEO_MODES"]

_LAZY = {
    "DEFAULT_MIN_PSNR_DB": "reshard.video.compare",
    "ENCODERS": "reshard.video.encode",
    "VIDEO_MODES": "reshard.video.encode",
    "DEFAULT_RESIZE_FILTER": "reshard.video.resize",
    "RESIZE_FILTERS": "reshard.video.resize",
}

__getattr__, __dir__ = lazy_exports("reshard.video", _LAZY, globals())
