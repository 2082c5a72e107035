"""The read plan, torch-free: what a stream reads (`spec`: `ReadSpec`, `SourceSpec`), each dataset opened
once (`source`: `OpenedSource`), the plan built from them (`read_plan`: selection and schedule), the delta
windows in frames (`windows`), the files that plan needs and when (`fetch`, for prewarm and the stream),
and the arithmetic of a resume (`resume`), a node's ranks from torchrun's options (`topology`). Prewarm builds the same plan as the stream; nothing here imports
torch or decodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reader.plan.fetch import FetchPlan
    from reader.plan.spec import default_pool_size
    from reader.plan.topology import NodeRanks, node_ranks

# What the command line uses (`lrs prewarm`); `reader.__all__` is the public API.
__all__ = ["FetchPlan", "NodeRanks", "default_pool_size", "node_ranks"]

_LAZY = {
    "FetchPlan": "reader.plan.fetch",
    "default_pool_size": "reader.plan.spec",
    "NodeRanks": "reader.plan.topology",
    "node_ranks": "reader.plan.topology",
}

__getattr__, __dir__ = lazy_exports("reader.plan", _LAZY, globals())
