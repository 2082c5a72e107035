"""The v3 source: any LeRobot v3 dataset opened, checked and described.

`model` opens one from any location, its metadata validated (`V3Source`, `open_source`), with the
`fingerprint` of that metadata; `checks` reads its rows and video headers, `defects` words many defects
as one error, and `diagnosis` finds every defect in one report (`lrs doctor`); `dropped` records the
episodes a reshard leaves out and `selection` is the source as the output sees it, renumbered;
`inspect` describes how a dataset's tables and videos are cut (`lrs inspect`).

`__all__` is what the command line uses; `reshard`'s own `__all__` is the public API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.source.checks import validate
    from reshard.source.diagnosis import doctor
    from reshard.source.dropped import DROPPED_JSON
    from reshard.source.inspect import inspect_dataset, plural, render
    from reshard.source.model import V3Source, describe, open_source

__all__ = [
    "DROPPED_JSON",
    "V3Source",
    "describe",
    "doctor",
    "inspect_dataset",
    "open_source",
    "plural",
    "render",
    "validate",
]

_LAZY = {
    "DROPPED_JSON": "reshard.source.dropped",
    "V3Source": "reshard.source.model",
    "describe": "reshard.source.model",
    "doctor": "reshard.source.diagnosis",
    "inspect_dataset": "reshard.source.inspect",
    "open_source": "reshard.source.model",
    "plural": "reshard.source.inspect",
    "render": "reshard.source.inspect",
    "validate": "reshard.source.checks",
}

__getattr__, __dir__ = lazy_exports("reshard.source", _LAZY, globals())
