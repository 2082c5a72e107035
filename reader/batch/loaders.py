"""`ResumableLoader`: a DataLoader over an `EpisodeStream` that counts the batches a trainer consumes,
so that its `state_dict()` resumes at the exact next batch (the arithmetic is `reader.plan.resume.loader_math`);
`BatchLoader`: the same batches built by threads in the trainer's process, with no DataLoader workers.
Both count through `_CountedBatches`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader

from cache.arguments import check_int
from cache.redaction import scrubbed_iter
from reader.plan.resume.loader_math import batches_per_epoch
from reader.stream import EpisodeStream


class _CountedBatches:
    """Batches of `stream` as a loader hands them out (`_loader()`: its batch size and workers), counted
    so that `state_dict()` resumes at the exact next batch."""

    stream: EpisodeStream
    batches: int

    def _loader(self) -> tuple[int, int]:
        """The batch size and the DataLoader workers per rank the batches come in."""
        raise NotImplementedError

    def _counted(self, batches: Iterable[Any]) -> Iterator[Any]:
        self.batches = self.stream.pending_batches(self._loader()[1])
        for batch in batches:
            self.batches += 1
            yield batch

    def __len__(self) -> int:
        """Batches per epoch (exact: each worker's last batch may be partial)."""
        batch_size, num_workers = self._loader()
        return batches_per_epoch(self.stream.schedule(num_workers).worker_samples(), batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The stream's state after the batches consumed so far in this epoch."""
        batch_size, num_workers = self._loader()
        return self.stream.state_dict(
            batches_consumed=self.batches, batch_size=batch_size, num_workers=num_workers
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a state into the stream (see `EpisodeStream.load_state_dict`)."""
        self.stream.load_state_dict(state)
        self.batches = self.stream.pending_batches(self._loader()[1])


class ResumableLoader(_CountedBatches):
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

    def _loader(self) -> tuple[int, int]:
        return self.loader.batch_size or 1, self.loader.num_workers

    def __iter__(self) -> Iterator[Any]:
        return self._counted(self.loader)


class BatchLoader(_CountedBatches):
    """Batches of an `EpisodeStream` built in the trainer's process by threads: no DataLoader workers.

    `for batch in BatchLoader(stream, batch_size=32):` yields what
    `DataLoader(stream, batch_size=32, num_workers=0, collate_fn=reader.collate)` would, batch for batch
    (`EpisodeStream.batches`), with `len`, `set_epoch` and exact resume: `state_dict()` after k batches,
    loaded into a fresh loader over a fresh stream (same settings), continues at batch k + 1. Its state
    is that DataLoader's (`num_workers=0`), so either can resume the other; a DataLoader with workers
    resumes it through the elastic path.

    Decoding releases the GIL, so `threads` threads use as many cores with no process started, nothing
    pickled and every sample written once, straight into its batch.

    Args:
        stream: the stream (any rank: the stream knows its rank and world size).
        batch_size: samples per batch; the epoch's last batch may be smaller.
        threads: threads building samples (default: the stream's `decode_threads`, at least 1).
        batches_ahead: batches built while the current one is handed out.
        channels_last: video frames in channels-last memory order (same shapes and values; see
            `EpisodeStream.batches`): cheaper on the CPU, `.contiguous()` on the GPU if needed.
    """

    def __init__(
        self,
        stream: EpisodeStream,
        batch_size: int,
        *,
        threads: int | None = None,
        batches_ahead: int = 2,
        channels_last: bool = False,
    ) -> None:
        if not isinstance(stream, EpisodeStream):
            raise ValueError(f"Invalid stream ({type(stream).__name__}). Expected an EpisodeStream.")
        self.stream, self.batch_size = stream, check_int("batch_size", batch_size, 1)
        self.threads = None if threads is None else check_int("threads", threads, 1)
        self.batches_ahead = check_int("batches_ahead", batches_ahead, 0)
        self.channels_last = bool(channels_last)
        self.batches = 0

    def _loader(self) -> tuple[int, int]:
        return self.batch_size, 0  # one consumer per rank, as a DataLoader without workers

    def __iter__(self) -> Iterator[dict[str, Any]]:
        batches = self.stream.batches(
            self.batch_size, threads=self.threads, ahead=self.batches_ahead, channels_last=self.channels_last
        )
        yield from scrubbed_iter(self._counted(batches))

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration streams (`EpisodeStream.set_epoch`)."""
        self.stream.set_epoch(epoch)
