"""`lrs train`: lerobot's own trainer (`lerobot-train`) over an `EpisodeStream`.

`options` translates lerobot's dataset settings into stream arguments and `resume` maps a lerobot
checkpoint to a stream state (both pure, no lerobot); `loader` is what the trainer iterates in place of
its DataLoader (torch, no lerobot); `hooks` runs lerobot's `train()` with them and is the only module
that imports lerobot, when the command runs.

`__all__` is what the command line uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.train.hooks import run
    from reshard.train.options import StreamOptions
    from reshard.train.resume import interrupted_hint

__all__ = ["StreamOptions", "interrupted_hint", "run"]

_LAZY = {
    "StreamOptions": "reshard.train.options",
    "run": "reshard.train.hooks",
    "interrupted_hint": "reshard.train.resume",
}

__getattr__, __dir__ = lazy_exports("reshard.train", _LAZY, globals())
