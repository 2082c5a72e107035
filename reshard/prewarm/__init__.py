"""`lrs prewarm`: a node's cache filled with what its ranks will read first (`fill`).

`__all__` is what the command line uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.prewarm.fill import PrewarmSummary, prewarm

__all__ = ["PrewarmSummary", "prewarm"]

_LAZY = {"PrewarmSummary": "reshard.prewarm.fill", "prewarm": "reshard.prewarm.fill"}

__getattr__, __dir__ = lazy_exports("reshard.prewarm", _LAZY, globals())
