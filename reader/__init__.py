"""lrs reader package: the layout contract (read side) and `EpisodeStream`, the training-time reader.

`from reader import EpisodeStream` streams an lrs/1 (or plain v3) dataset as a torch IterableDataset;
`BatchLoader` builds its batches with threads in the trainer's process (no DataLoader workers);
`ResumableLoader` counts the batches a trainer consumes so that `state_dict()` can resume exactly (and
`loader_state_of` turns a torchdata StatefulDataLoader's state into such a batch count);
`collate` is an optional `collate_fn` that hands each batch from a worker over as one shared buffer;
`ReadSpec` (with its `SourceSpec`s) is what a stream reads, as one JSON-able record (`stream.spec`);
`DatasetMeta.open(url)` reads a dataset's metadata under lerobot's names (fps, features, stats) without
a stream. Its errors: `DatasetError` (a bad dataset; `LayoutError` a bad lrs/1 index), `StateError` (a
resume state that does not fit) and `DecodeError`. `__all__` is the API; other modules are internal.

The stream's names are imported on first use (PEP 562): the contract modules (`reader.format.v3`,
`reader.format.index`, `reader.format.layout`) stay importable without loading torch and torchcodec, which keeps
the `lrs` command line quick to start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports
from reader.errors import DatasetError, DecodeError, LayoutError, StateError

if TYPE_CHECKING:
    from reader.batch.collate import collate
    from reader.batch.loaders import BatchLoader, ResumableLoader
    from reader.metadata import DatasetMeta
    from reader.plan.resume.state import loader_state_of
    from reader.plan.spec import ReadSpec, SourceSpec
    from reader.runtime.counters import ReaderStats
    from reader.stream import EpisodeStream

__all__ = [
    "BatchLoader",
    "DatasetError",
    "DatasetMeta",
    "DecodeError",
    "EpisodeStream",
    "LayoutError",
    "ReadSpec",
    "ReaderStats",
    "ResumableLoader",
    "SourceSpec",
    "StateError",
    "collate",
    "loader_state_of",
]

_LAZY = {
    "EpisodeStream": "reader.stream",
    "ResumableLoader": "reader.batch.loaders",
    "BatchLoader": "reader.batch.loaders",
    "ReaderStats": "reader.runtime.counters",
    "collate": "reader.batch.collate",
    "DatasetMeta": "reader.metadata",
    "ReadSpec": "reader.plan.spec",
    "SourceSpec": "reader.plan.spec",
    "loader_state_of": "reader.plan.resume.state",
}


__getattr__, __dir__ = lazy_exports("reader", _LAZY, globals())
