"""`TrainLoader`: what lerobot-train iterates in place of its DataLoader when the dataset is a stream.

lerobot-train builds `DataLoader(dataset, batch_size, num_workers, prefetch_factor, persistent_workers,
...)` and draws batches with `cycle(dataloader)`, one per step, calling `iter()` again at each epoch's
end. `TrainLoader` keeps those settings, collates with `reader.collate`, and adds what a stream needs:

- **No workers, no DataLoader.** With `num_workers=0` the batches come from `EpisodeStream.batches`
  (`reader.BatchLoader`'s path): threads in the trainer's process (the stream's `decode_threads`) write
  each sample straight into its batch, rather than the main thread building samples one at a time. The
  batches, their order and the state are the `num_workers=0` DataLoader's, so a checkpoint resumes either.

- **Epochs with persistent workers.** A persistent worker keeps the copy of the dataset it started with,
  so the main process's `set_epoch` never reaches it. The DataLoader therefore iterates `EpochStream`,
  which streams epoch e, e+1, ... at its successive iterations in whichever process iterates it; the
  main process sets the first one, and every worker counts from there.
- **Counting.** The batches handed to the trainer in this epoch, so that `state_dict()` is the stream's
  state after them (`EpisodeStream.state_dict(batches_consumed=...)`, as `reader.ResumableLoader`).
- **A record of what was trained on** (for checks): with `LRS_TRAIN_RECORD=DIR` in the environment, each
  rank appends one JSON line per batch to `DIR/rank<r>.jsonl` (`{"epoch", "index"}`), in the main process,
  as the trainer receives the batch.

It is not a DataLoader, on purpose: accelerate's `prepare` would wrap one, dispatching batches from rank
0 or keeping every Nth batch of a stream that is already this rank's share.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from cache.arguments import check_int
from reader.batch.collate import collate
from reader.plan.resume.loader_math import batches_per_epoch
from reader.stream import EpisodeStream

RECORD_ENV = "LRS_TRAIN_RECORD"


class EpochStream(IterableDataset):
    """An `EpisodeStream` that streams its next epoch at every iteration, in the process iterating it."""

    def __init__(self, stream: EpisodeStream, next_epoch: int) -> None:
        super().__init__()
        self.stream, self.next_epoch = stream, next_epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.stream.set_epoch(self.next_epoch)  # a pending resume state of this epoch is kept
        self.next_epoch += 1
        return iter(self.stream)


class TrainLoader:
    """Batches of an `EpisodeStream` with a DataLoader's settings, one epoch per `iter()`, counted.

    Args:
        stream: the stream (a resume state already loaded, if any: its epoch is the first one).
        batch_size, num_workers, pin_memory, prefetch_factor, persistent_workers, multiprocessing_context:
            the DataLoader's (lerobot-train's); with `num_workers=0` no DataLoader is built, and the
            worker settings do not apply (the DataLoader ignores them too).
        record_dir: where to append the `index` of every batch (see the module docstring); None: nowhere.
    """

    def __init__(
        self,
        stream: EpisodeStream,
        *,
        batch_size: int,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        multiprocessing_context: Any = None,
        record_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.stream, self.epoch, self.batches = stream, stream.epoch, 0
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.num_workers = check_int("num_workers", num_workers, 0)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()  # as a DataLoader pins
        self.epochs = EpochStream(stream, stream.epoch)
        # None without workers: the batches then come from `stream.batches` (see the module docstring).
        self.loader: DataLoader | None = None
        if num_workers > 0:
            self.loader = DataLoader(
                self.epochs,
                batch_size=batch_size,
                num_workers=num_workers,
                pin_memory=pin_memory,
                drop_last=False,
                collate_fn=collate,
                prefetch_factor=prefetch_factor,
                persistent_workers=persistent_workers,
                multiprocessing_context=multiprocessing_context,
            )
        self.record: Path | None = None
        if record_dir is not None:
            Path(record_dir).mkdir(parents=True, exist_ok=True)
            self.record = Path(record_dir) / f"rank{stream.rank}.jsonl"

    @classmethod
    def like(cls, loader: DataLoader, *, record: bool = True) -> TrainLoader:
        """A TrainLoader with the settings of `loader`, a DataLoader over an `EpisodeStream` (lerobot-train's),
        recording its batches where `LRS_TRAIN_RECORD` says unless `record` is False (an eval loader)."""
        return cls(
            loader.dataset,  # type: ignore[arg-type]
            batch_size=loader.batch_size or 1,
            num_workers=loader.num_workers,
            pin_memory=loader.pin_memory,
            prefetch_factor=loader.prefetch_factor,
            persistent_workers=loader.persistent_workers,
            multiprocessing_context=loader.multiprocessing_context,
            record_dir=(os.environ.get(RECORD_ENV) or None) if record else None,
        )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """One epoch: the current one (from a loaded state's next batch), and the next at the next call."""
        epoch = self.epoch
        self.stream.set_epoch(epoch)
        self.epochs.next_epoch = epoch  # what the main process, or a new worker, streams
        self.batches = self.stream.pending_batches(self.num_workers)
        for batch in self._epoch_batches():
            self.batches += 1
            self._record(epoch, batch)
            yield batch
        self.epoch = epoch + 1

    def _epoch_batches(self) -> Iterator[dict[str, Any]]:
        if self.loader is not None:
            return iter(self.loader)
        batches = self.stream.batches(self.batch_size)
        return map(pinned, batches) if self.pin_memory else batches

    def __len__(self) -> int:
        """Batches per epoch on this topology (each worker's last batch may be partial)."""
        return batches_per_epoch(self.stream.schedule(self.num_workers).worker_samples(), self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The stream's state after the batches handed out so far in the current epoch."""
        return self.stream.state_dict(
            batches_consumed=self.batches, batch_size=self.batch_size, num_workers=self.num_workers
        )

    def _record(self, epoch: int, batch: dict[str, Any]) -> None:
        if self.record is None or "index" not in batch:
            return
        line = json.dumps({"epoch": epoch, "index": batch["index"].tolist()})
        with open(self.record, "a") as f:
            f.write(line + "\n")


def pinned(batch: dict[str, Any]) -> dict[str, Any]:
    """`batch` with its tensors in pinned memory, as a DataLoader with `pin_memory=True` hands it out."""
    return {
        key: value.pin_memory() if isinstance(value, torch.Tensor) else value for key, value in batch.items()
    }
