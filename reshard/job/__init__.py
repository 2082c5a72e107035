"""The reshard job: a v3 source in, an lrs/1 dataset out.

`plan` decides which episodes go to which output file (pure); `execute` runs the plan's tasks inline or
in `process_pool`'s worker processes, `tables` writing the data files and `reshard.video` the videos;
`meta` writes `meta/` and the lrs/1 index last, with `carried_meta` (the source's own `meta/` files);
`run` is the whole job (work directory, parts, finalize, publishing) under `lock` (one job per output);
`estimate` says beforehand what it will do and how long a re-encode will take.

`__all__` is what the command line uses; `reshard`'s own `__all__` is the public API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.job.execute import ReshardOptions
    from reshard.job.plan import DEFAULT_EPISODES_PER_FILE
    from reshard.job.run import ReshardResult, estimate_reshard, reshard, slurm_part

__all__ = [
    "DEFAULT_EPISODES_PER_FILE",
    "ReshardOptions",
    "ReshardResult",
    "estimate_reshard",
    "reshard",
    "slurm_part",
]

_LAZY = {
    "DEFAULT_EPISODES_PER_FILE": "reshard.job.plan",
    "ReshardOptions": "reshard.job.execute",
    "ReshardResult": "reshard.job.run",
    "estimate_reshard": "reshard.job.run",
    "reshard": "reshard.job.run",
    "slurm_part": "reshard.job.run",
}

__getattr__, __dir__ = lazy_exports("reshard.job", _LAZY, globals())
