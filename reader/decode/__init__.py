"""Decoding: video frames with torchcodec (`video`), depth cameras with PyAV (`depth`), image columns with
PIL (`images`), and `Frames`, what every decoder returns (`frames`). Importing this folder loads nothing (its names load on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reader.decode.depth import is_depth

# What the command line uses (`lrs reshard` names the depth cameras); `reader.__all__` is the public API.
__all__ = ["is_depth"]

_LAZY = {"is_depth": "reader.decode.depth"}

__getattr__, __dir__ = lazy_exports("reader.decode", _LAZY, globals())
