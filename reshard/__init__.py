"""lrs reshard package: the `lrs` command line and the offline jobs (reshard, verify, push, prewarm).

lrs is distributed as `lrs-lerobot` (`lrs` on PyPI is an unrelated package); its import names are
`reader`, `cache` and `reshard`, and its command is `lrs`.

`__all__` is the API: `open_source` opens any v3 dataset (its metadata validated), `validate` checks
every row and video header, `reshard` runs what `lrs reshard` runs; `reshard.verify` exports `verify`.
Every other module is internal and may move. The names are imported on first use (PEP 562), so
`lrs --help` loads none of the jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.errors import PushError, ReshardError, VerifyError
    from reshard.execute import ReshardOptions
    from reshard.run import ReshardResult, reshard
    from reshard.source import V3Source, open_source
    from reshard.source_checks import validate

__all__ = [
    "PushError",
    "ReshardError",
    "ReshardOptions",
    "ReshardResult",
    "V3Source",
    "VerifyError",
    "open_source",
    "reshard",
    "validate",
]

_LAZY = {
    "PushError": "reshard.errors",
    "ReshardError": "reshard.errors",
    "VerifyError": "reshard.errors",
    "ReshardOptions": "reshard.execute",
    "ReshardResult": "reshard.run",
    "reshard": "reshard.run",
    "V3Source": "reshard.source",
    "open_source": "reshard.source",
    "validate": "reshard.source_checks",
}


__getattr__, __dir__ = lazy_exports("reshard", _LAZY, globals())
