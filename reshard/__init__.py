"""lrs reshard package: the offline jobs and the `lrs` command line over them.

The library: `source` (any v3 dataset opened, checked, described), `job` (the reshard job: plan, tables,
`meta/` and the lrs/1 index, work directory and lock), `video` (per-episode video files), `verify`
(prove an output, and its equality with its source), `push` (publish to a bucket) and `prewarm` (fill a
node's cache). The application on top: `cli` (the `lrs` commands, a thin click layer that imports only
what these packages export), `train` (`lrs train`), `preview` (`lrs show`) and `demo` (`lrs sample`,
`lrs demo`). `errors` holds what the jobs raise, `distribution` the name lrs is installed under.

lrs is distributed as `lrs-lerobot` (`lrs` on PyPI is an unrelated package; `DISTRIBUTION`); its import
names are `reader`, `cache` and `reshard`, and its command is `lrs`.

`__all__` is the API: `open_source` opens any v3 dataset (its metadata validated), `validate` checks
every row and video header, `reshard` runs what `lrs reshard` runs; `reshard.verify` exports `verify`.
Every other module is internal and may move. The names are imported on first use (PEP 562), so
`lrs --help` loads none of the jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.distribution import DISTRIBUTION
    from reshard.errors import PushError, ReshardError, VerifyError
    from reshard.job.execute import ReshardOptions
    from reshard.job.run import ReshardResult, reshard
    from reshard.source.checks import validate
    from reshard.source.model import V3Source, open_source

__all__ = [
    "DISTRIBUTION",
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
    "DISTRIBUTION": "reshard.distribution",
    "PushError": "reshard.errors",
    "ReshardError": "reshard.errors",
    "VerifyError": "reshard.errors",
    "ReshardOptions": "reshard.job.execute",
    "ReshardResult": "reshard.job.run",
    "reshard": "reshard.job.run",
    "V3Source": "reshard.source.model",
    "open_source": "reshard.source.model",
    "validate": "reshard.source.checks",
}


__getattr__, __dir__ = lazy_exports("reshard", _LAZY, globals())
