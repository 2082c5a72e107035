"""Resume arithmetic for a torch DataLoader over an IterableDataset (pure, no torch import).

With `num_workers=W > 0` every worker batches its own stream (`batch_size` B, `drop_last=False`, so a
worker's last batch may be partial) and the DataLoader returns batches round-robin across workers
starting at worker 0, skipping workers that are exhausted (torch's `_MultiProcessingDataLoaderIter`
hands tasks to active workers in a fixed cycle, returns results in task order, and drops the tasks of a
worker once it has signalled the end of its stream). With `num_workers=0` the main process batches the
single consumer's stream: the same arithmetic with one worker.

A resumed run builds a fresh DataLoader, whose cycle starts at physical worker 0 again. So physical
worker j must serve logical worker `worker_map[j]`: the logical workers that still have batches, in
cyclic order starting from the one that would have produced the next batch. Physical workers beyond
`len(worker_map)` serve nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cache.arguments import check_int

__all__ = ["LoaderResume", "batches_per_epoch", "batches_per_worker", "loader_resume"]


def _check_samples(per_worker_samples: Sequence[int]) -> list[int]:
    counts = list(per_worker_samples)
    if not counts:
        raise ValueError(
            "Invalid per_worker_samples ([]). Expected one count per worker (one for num_workers=0)."
        )
    return [check_int(f"sample count of worker {w}", int(n), 0) for w, n in enumerate(counts)]


def batches_per_worker(per_worker_samples: Sequence[int], batch_size: int) -> tuple[int, ...]:
    """Batches each worker produces in an epoch: `ceil(n_w / batch_size)` (last batch may be partial).

    Args:
        per_worker_samples: Samples per epoch of each worker of one rank (one entry for num_workers=0).
        batch_size: DataLoader batch size.

    Returns:
        One batch count per worker.
    """
    size = check_int("batch_size", batch_size, 1)
    return tuple(-(-n // size) for n in _check_samples(per_worker_samples))


def batches_per_epoch(per_worker_samples: Sequence[int], batch_size: int) -> int:
    """Batches one rank's DataLoader yields in an epoch."""
    return sum(batches_per_worker(per_worker_samples, batch_size))


@dataclass(frozen=True)
class LoaderResume:
    """Where each logical worker stands after some batches, and how to resume in a fresh DataLoader.

    Attributes:
        samples_consumed: Samples of each logical worker already delivered in consumed batches.
        worker_map: Logical worker served by physical worker j, for j < len(worker_map); the logical
            workers that still have batches, cyclically from the one producing the next batch.
        overflow_batches: Batches consumed beyond the end of this epoch (0 when within it). Nothing is
            clamped silently: the epoch is then fully consumed and the caller rolls these batches into the
            next epoch (per-worker counts are the same every epoch).
    """

    samples_consumed: tuple[int, ...]
    worker_map: tuple[int, ...]
    overflow_batches: int = 0

    def logical_worker(self, physical: int) -> int | None:
        """The logical worker physical worker `physical` serves, or None if it serves nothing."""
        physical = check_int("physical worker", physical, 0)
        return self.worker_map[physical] if physical < len(self.worker_map) else None


def _full_laps(batches: Sequence[int], consumed: int) -> int:
    """The largest lap count j such that the first j full round-robin laps fit in `consumed` batches."""
    low, high = 0, max(batches)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(b, middle) for b in batches) <= consumed:
            low = middle
        else:
            high = middle - 1
    return low


def loader_resume(per_worker_samples: Sequence[int], batch_size: int, batches_consumed: int) -> LoaderResume:
    """The state of one rank's DataLoader after `batches_consumed` batches of an epoch.

    Args:
        per_worker_samples: Samples per epoch of each logical worker (one entry for num_workers=0).
        batch_size: DataLoader batch size.
        batches_consumed: Batches the rank has consumed this epoch; may exceed the epoch (see
            `LoaderResume.overflow_batches`).

    Returns:
        Samples consumed per logical worker and the physical-to-logical worker map of the resumed run.
    """
    counts = _check_samples(per_worker_samples)
    batches = batches_per_worker(counts, batch_size)
    consumed = check_int("batches_consumed", batches_consumed, 0)
    if consumed >= sum(batches):
        return LoaderResume(tuple(counts), (), consumed - sum(batches))
    laps = _full_laps(batches, consumed)
    # Lap `laps` is in progress: its first `offset` active workers have already delivered their batch.
    active = [w for w, b in enumerate(batches) if b > laps]
    offset = consumed - sum(min(b, laps) for b in batches)
    done = [min(b, laps) + (w in active[:offset]) for w, b in enumerate(batches)]
    samples = tuple(min(n, d * batch_size) for n, d in zip(counts, done, strict=True))
    remaining = [w for w, b in enumerate(batches) if b > done[w]]
    head = remaining.index(active[offset])
    return LoaderResume(samples, tuple(remaining[head:] + remaining[:head]))
