"""`ResumableLoader`: a DataLoader over an `EpisodeStream` that counts the batches a trainer consumes,
so that its `state_dict()` resumes at the exact next batch (the arithmetic is `reader.loader_math`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader

from reader.loader_math import batches_per_epoch
from reader.stream import EpisodeStream


class ResumableLoader:
    """Wraps a DataLoader over an `EpisodeStream`, counting the batches the trainer consumes.

    Iterate it like the loader; `state_dict()` is then the stream's state after the batches consumed in
    this epoch (a batch counts once it has been handed to the trainer). `load_state_dict(state)` on a fresh
    wrapper (fresh stream, fresh DataLoader, same settings) resumes at the exact next batch.

    Raises:
        ValueError: the loader's dataset is not an EpisodeStream, or it drops last batches (each worker
            would drop its own partial batch, which the resume arithmetic does not model).
    """

    def __init__(self, loader: DataLoader) -> None:
        if not isinstance(loader.dataset, EpisodeStream):
            raise ValueError(
                f"Invalid loader dataset ({type(loader.dataset).__name__}). Expected an EpisodeStream."
            )
        if loader.drop_last:
            raise ValueError(
                "Invalid loader (drop_last=True). Expected drop_last=False with an EpisodeStream."
            )
        self.loader, self.stream, self.batches = loader, loader.dataset, 0

    def __iter__(self) -> Iterator[Any]:
        self.batches = self.stream.pending_batches(self.loader.num_workers)
        for batch in self.loader:
            self.batches += 1
            yield batch

    def __len__(self) -> int:
        """Batches per epoch (exact: each worker's last batch may be partial)."""
        worker_samples = self.stream.schedule(self.loader.num_workers).worker_samples()
        return batches_per_epoch(worker_samples, self.loader.batch_size or 1)

    def state_dict(self) -> dict[str, Any]:
        """The stream's state after the batches consumed so far in this epoch."""
        return self.stream.state_dict(
            batches_consumed=self.batches,
            batch_size=self.loader.batch_size or 1,
            num_workers=self.loader.num_workers,
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a state into the stream (see `EpisodeStream.load_state_dict`)."""
        self.stream.load_state_dict(state)
        self.batches = self.stream.pending_batches(self.loader.num_workers)
