"""Resume states of `EpisodeStream`: small JSON-able dicts of coordinates, never buffers.

Two kinds, with one header (`version`, dataset `fingerprint`, `episodes` selection digest,
`episode_pool_size`, `world_size`, `shuffle`, `seed`, `epoch`):

- a *loader* state, `{"batches_consumed": k, "batch_size": B, "num_workers": W}`: what a trainer driving a
  standard DataLoader knows. The per-worker positions and the worker rotation of the resumed DataLoader
  follow from the schedule by arithmetic (`reader.loader_math.loader_resume`). The header is optional
  here, so a trainer may build this dict by hand (plus `epoch`, `seed`).
- a *consumer* state, `{"worker": w, "num_workers": W, "samples": n}`: the position of one consumer, what
  `state_dict()` returns inside a DataLoader worker (torchdata's `StatefulDataLoader` protocol) or in the
  main process with `num_workers=0`.

A state whose header names another dataset, selection, pool size, world size or shuffle is refused
with `StateError`; so is one made for another `num_workers`, when the stream is iterated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reader.errors import StateError
from reader.loader_math import loader_resume

# 2: the order of lrs 0.2 (pieces emitted in runs, one cyclic pool order); a version 1 state would
# resume another order, so it is refused.
STATE_VERSION = 2
_LOADER_KEYS = ("batches_consumed", "batch_size", "num_workers")
_CONSUMER_KEYS = ("worker", "num_workers", "samples")


def selection_digest(episodes: Sequence[int]) -> str:
    """A short digest of the selected episode indices (in stream order)."""
    return hashlib.sha256(",".join(map(str, episodes)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Identity:
    """What a state must match to resume a stream."""

    fingerprint: str
    episodes: str
    episode_pool_size: int
    world_size: int
    shuffle: bool

    def header(self, *, seed: int, epoch: int) -> dict[str, Any]:
        """The common part of every state this stream writes."""
        return {
            "version": STATE_VERSION,
            "fingerprint": self.fingerprint,
            "episodes": self.episodes,
            "episode_pool_size": self.episode_pool_size,
            "world_size": self.world_size,
            "shuffle": self.shuffle,
            "seed": seed,
            "epoch": epoch,
        }

    def check(self, state: Mapping[str, Any]) -> None:
        """Refuse a state whose header (when present) names another run's identity.

        Raises:
            StateError: naming the first mismatching field.
        """
        if "version" in state and state["version"] != STATE_VERSION:
            raise StateError(
                f"Invalid state version ({state['version']!r}). Expected {STATE_VERSION}: the state was "
                "saved by another version of lrs, whose order differs; restart the epoch."
            )
        reasons = {
            "fingerprint": "the state was saved for another dataset (or another version of it)",
            "episodes": "the state was saved for another selection of episodes",
            "episode_pool_size": "the emission order depends on the pool size",
            "world_size": "the split across ranks depends on the world size",
            "shuffle": "the order depends on shuffle",
        }
        for name, reason in reasons.items():
            if name in state and state[name] != getattr(self, name):
                raise StateError(
                    f"Invalid state {name} ({state[name]!r}). Expected {getattr(self, name)!r}: {reason}."
                )


@dataclass(frozen=True)
class Resume:
    """A loaded position, applied when the stream next iterates `epoch`.

    Attributes:
        epoch: the epoch it resumes.
        num_workers: the DataLoader workers it was made for.
        batches: loader kind: (batches_consumed, batch_size); None for the consumer kind.
        consumer: consumer kind: (logical worker, samples consumed); None for the loader kind.
    """

    epoch: int
    num_workers: int
    batches: tuple[int, int] | None = None
    consumer: tuple[int, int] | None = None

    def start(
        self, worker_samples: Sequence[int], *, num_workers: int, physical: int
    ) -> tuple[int | None, int]:
        """Which logical worker physical worker `physical` serves, and from which sample.

        Args:
            worker_samples: samples per epoch of each logical worker of the rank.
            num_workers: the DataLoader's workers now (0: the main process).
            physical: this worker's id (0 in the main process).

        Returns:
            (logical worker, or None when this worker serves nothing; samples to skip).

        Raises:
            StateError: the state was made for another `num_workers`, or counts more than the epoch.
        """
        if num_workers != self.num_workers:
            raise StateError(
                f"Invalid num_workers ({num_workers}) for this resume state. Expected {self.num_workers}, "
                "as when it was saved: each worker's share of the epoch depends on it."
            )
        if self.consumer is not None:
            worker, samples = self.consumer
            if samples > worker_samples[worker]:
                raise StateError(
                    f"Invalid samples ({samples}) for worker {worker}. Expected at most {worker_samples[worker]}, "
                    f"its samples in epoch {self.epoch}."
                )
            return worker, samples
        if self.batches is None:
            raise StateError("Invalid resume state (no position). Expected batches or a consumer position.")
        consumed, batch_size = self.batches
        resume = loader_resume(worker_samples, batch_size, consumed)
        if resume.overflow_batches:
            total = consumed - resume.overflow_batches
            raise StateError(
                f"Invalid batches_consumed ({consumed}). Expected at most {total}, the batches of epoch "
                f"{self.epoch} on this rank with batch_size={batch_size} and num_workers={num_workers}."
            )
        logical = resume.logical_worker(physical)
        return logical, 0 if logical is None else resume.samples_consumed[logical]


def parse_state(state: Mapping[str, Any], identity: Identity, *, epoch: int) -> tuple[Resume, int | None]:
    """Validate a state for this stream.

    Args:
        state: a loader or consumer state (see the module docstring).
        identity: the stream's identity.
        epoch: the stream's epoch, used when the state names none.

    Returns:
        The position to resume, and the seed the state names (None when it names none).

    Raises:
        StateError: malformed, or made for another run.
    """
    if not isinstance(state, Mapping):
        raise StateError(f"Invalid state ({type(state).__name__}). Expected a dict.")
    identity.check(state)
    seed = _int(state, "seed", 0, required=False)
    epoch = _int(state, "epoch", 0, required=False, default=epoch)
    if all(k in state for k in _CONSUMER_KEYS):
        workers = _int(state, "num_workers", 0)
        worker = _int(state, "worker", 0)
        if worker >= max(1, workers):
            raise StateError(f"Invalid state worker ({worker}). Expected < max(1, num_workers={workers}).")
        return Resume(epoch, workers, consumer=(worker, _int(state, "samples", 0))), seed
    if all(k in state for k in _LOADER_KEYS):
        batches = (_int(state, "batches_consumed", 0), _int(state, "batch_size", 1))
        return Resume(epoch, _int(state, "num_workers", 0), batches=batches), seed
    raise StateError(
        f"Invalid state (keys {sorted(state)}). Expected {list(_LOADER_KEYS)} (a trainer's count of "
        f"consumed batches) or {list(_CONSUMER_KEYS)} (what state_dict() returns inside a worker)."
    )


def _int(
    state: Mapping[str, Any], name: str, low: int, *, required: bool = True, default: int | None = None
) -> Any:
    if name not in state:
        if required:
            raise StateError(f"Invalid state (no {name!r}). Expected an integer {name}.")
        return default
    value = state[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise StateError(f"Invalid state {name} ({value!r}). Expected an integer >= {low}.")
    return value
