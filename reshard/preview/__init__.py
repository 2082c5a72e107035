"""`lrs show`: one PNG of an episode that a person can read on a headless node (over SSH, in a bucket).

`reshard.preview.episode_view` reads the episode through `EpisodeStream` (so the picture is what a model
is fed), `reshard.preview.strip` turns camera frames into tiles (depth as a colour map),
`reshard.preview.plot` draws the state and action curves, and `reshard.preview.canvas` lays them out
under the task string. Drawing uses Pillow only, already a dependency of lrs for image cameras.

`__all__` is what the command line uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.preview.canvas import render, write_png
    from reshard.preview.episode_view import read_episode_view

__all__ = ["read_episode_view", "render", "write_png"]

_LAZY = {
    "read_episode_view": "reshard.preview.episode_view",
    "render": "reshard.preview.canvas",
    "write_png": "reshard.preview.canvas",
}

__getattr__, __dir__ = lazy_exports("reshard.preview", _LAZY, globals())
