"""Resume states of `EpisodeStream`: small JSON-able dicts of coordinates, never buffers.

Two kinds, with one header (`version`, dataset `fingerprint`, `episodes` selection digest,
`episode_pool_size`, `world_size`, `shuffle`, `seed`, `epoch`):

- a *loader* state, `{"batches_consumed": k, "batch_size": B, "num_workers": W}`: what a trainer driving a
  standard DataLoader knows. The per-worker positions and the worker rotation of the resumed DataLoader
  follow from the schedule by arithmetic (`reader.plan.resume.loader_math.loader_resume`). The header is optional
  here, so a trainer may build this dict by hand (plus `epoch`, `seed`).
- a *consumer* state, `{"worker": w, "num_workers": W, "samples": n}`: the position of one consumer, what
  `state_dict()` returns inside a DataLoader worker (torchdata's `StatefulDataLoader` protocol) or in the
  main process with `num_workers=0`.

A loader state may be loaded on another topology (world size, `num_workers`, batch size, pool size):
the run then streams the rest of the epoch (`reader.schedule.rest`), and the states it saves carry the
epoch's earlier runs under `"before"`, so it can move again. A consumer state moves nowhere: another
world size or pool size is refused when loaded, another `num_workers` when iterated
(`loader_state_of` turns a StatefulDataLoader's state into a loader state). A state whose header names
another dataset, selection or shuffle is refused with `StateError`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cache.arguments import check_int
from reader.errors import StateError
from reader.plan.resume.loader_math import loader_resume
from reader.schedule import Schedule
from reader.schedule.rest import RestSchedule, RunSegment, rest_after

# 2: the order of lrs 0.2 (pieces emitted in runs, one cyclic pool order); a version 1 state would
# resume another order, so it is refused.
STATE_VERSION = 2
_LOADER_KEYS = ("batches_consumed", "batch_size", "num_workers")
_CONSUMER_KEYS = ("worker", "num_workers", "samples")
# A `before` entry, in `RunSegment`'s field order.
_SEGMENT_KEYS = ("world_size", "num_workers", "batch_size", "batches_consumed", "episode_pool_size")


def selection_digest(episodes: Sequence[int | str]) -> str:
    """A short digest of the selected episode indices (in stream order; a mixture's as "source:index")."""
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

    def check(self, state: Mapping[str, Any], *, elastic: bool = True) -> None:
        """Refuse a state whose header (when present) names another run's identity: another dataset,
        selection or shuffle; with `elastic=False` (a worker's own position), also another pool size or
        world size.

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
            "shuffle": "the order depends on shuffle",
        }
        if not elastic:
            reasons["episode_pool_size"] = (
                "a worker's position in its emission order depends on the pool size"
            )
            reasons["world_size"] = "a worker's position is one rank's; resume with a trainer's batch count"
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
        world_size: the ranks it was made for.
        pool_size: the episode pool size it was made for.
        before: loader kind: the runs of this epoch before the one it counts batches of, each on its own
            topology (an elastic resume's history; empty for a run from the epoch's start).
    """

    epoch: int
    num_workers: int
    batches: tuple[int, int] | None = None
    consumer: tuple[int, int] | None = None
    world_size: int = 1
    pool_size: int = 1
    before: tuple[RunSegment, ...] = ()

    @property
    def segment(self) -> RunSegment | None:
        """The run it counts batches of, as a segment (None for the consumer kind)."""
        if self.batches is None:
            return None
        consumed, batch_size = self.batches
        return RunSegment(self.world_size, self.num_workers, batch_size, consumed, self.pool_size)

    def continues(self, *, world_size: int, num_workers: int, pool_size: int) -> bool:
        """Whether a run on this topology continues the saved run exactly (same emission orders, each
        worker from its position), rather than streaming the rest of the epoch on a new topology."""
        return (self.world_size, self.num_workers, self.pool_size) == (world_size, num_workers, pool_size)

    def history(self, *, world_size: int, num_workers: int, pool_size: int) -> tuple[RunSegment, ...]:
        """The runs of the epoch before a run on this topology: `before`, plus the saved run itself
        where the new one does not continue it."""
        segment = self.segment
        if segment is None or self.continues(
            world_size=world_size, num_workers=num_workers, pool_size=pool_size
        ):
            return self.before
        return (*self.before, segment)

    def start(
        self, worker_samples: Sequence[int], *, num_workers: int, physical: int
    ) -> tuple[int | None, int]:
        """Which logical worker physical worker `physical` serves, and from which sample, when a run
        continues the saved one (`continues`).

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


def parse_state(
    state: Mapping[str, Any],
    identity: Identity,
    *,
    epoch: int,
    default_pool: Callable[[int], int] | None = None,
) -> tuple[Resume, int | None]:
    """Validate a state for this stream.

    Args:
        state: a loader or consumer state (see the module docstring).
        identity: the stream's identity.
        epoch: the stream's epoch, used when the state names none.
        default_pool: the pool size a run with this batch size had, for a loader state that names
            none (a trainer's own dict); default: the stream's.

    Returns:
        The position to resume, and the seed the state names (None when it names none).

    Raises:
        StateError: malformed, or made for another run.
    """
    if not isinstance(state, Mapping):
        raise StateError(f"Invalid state ({type(state).__name__}). Expected a dict.")
    consumer = all(k in state for k in _CONSUMER_KEYS)
    identity.check(state, elastic=not consumer)
    seed = _int(state, "seed", 0, required=False)
    epoch = _int(state, "epoch", 0, required=False, default=epoch)
    world_size = _int(state, "world_size", 1, required=False, default=identity.world_size)
    if consumer:
        workers = _int(state, "num_workers", 0)
        worker = _int(state, "worker", 0)
        if worker >= max(1, workers):
            raise StateError(f"Invalid state worker ({worker}). Expected < max(1, num_workers={workers}).")
        consumed = (worker, _int(state, "samples", 0))
        pool = identity.episode_pool_size
        before = _segments(state.get("before", []))
        resume = Resume(
            epoch, workers, consumer=consumed, world_size=world_size, pool_size=pool, before=before
        )
        return resume, seed
    if all(k in state for k in _LOADER_KEYS):
        batches = (_int(state, "batches_consumed", 0), _int(state, "batch_size", 1))
        pool = _int(state, "episode_pool_size", 1, required=False)
        if pool is None:
            pool = default_pool(batches[1]) if default_pool is not None else identity.episode_pool_size
        resume = Resume(
            epoch,
            _int(state, "num_workers", 0),
            batches=batches,
            world_size=world_size,
            pool_size=pool,
            before=_segments(state.get("before", [])),
        )
        return resume, seed
    raise StateError(
        f"Invalid state (keys {sorted(state)}). Expected {list(_LOADER_KEYS)} (a trainer's count of "
        f"consumed batches) or {list(_CONSUMER_KEYS)} (what state_dict() returns inside a worker)."
    )


def _segments(raw: Any) -> tuple[RunSegment, ...]:
    """The `before` list of a loader state: the epoch's earlier runs, each a dict of `RunSegment.to_json`."""
    if not isinstance(raw, list):
        raise StateError(f"Invalid state before ({type(raw).__name__}). Expected a list of earlier runs.")
    segments = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or set(item) != set(_SEGMENT_KEYS):
            keys = sorted(item) if isinstance(item, Mapping) else type(item).__name__
            raise StateError(f"Invalid state before[{i}] ({keys}). Expected the keys {list(_SEGMENT_KEYS)}.")
        low = {"world_size": 1, "batch_size": 1, "episode_pool_size": 1}
        values = [_int(item, name, low.get(name, 0)) for name in _SEGMENT_KEYS]
        segments.append(RunSegment(*values))
    return tuple(segments)


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


def resumed_schedule(
    schedule: Schedule, epoch: int, resume: Resume | None
) -> tuple[Schedule | RestSchedule, tuple[RunSegment, ...]]:
    """The order a run on `schedule`'s topology streams `epoch` in after loading `resume`: the whole
    epoch's, or after earlier runs on other topologies, the rest of it (`reader.schedule.rest`); and
    those earlier runs.

    Raises:
        StateError: a run counts more batches than its part of the epoch has.
    """
    if resume is None or resume.epoch != epoch:
        return schedule, ()
    history = resume.history(
        world_size=schedule.world_size, num_workers=schedule.num_workers, pool_size=schedule.pool_size
    )
    if not history:
        return schedule, history
    try:
        rest = rest_after(schedule, epoch, history)
    except ValueError as exc:
        raise StateError(f"{exc} (resume state of epoch {epoch})") from None
    return RestSchedule(schedule, epoch, rest), history


def consumer_starts(schedule: Schedule | RestSchedule, epoch: int, resume: Resume | None) -> tuple[int, ...]:
    """Samples each logical worker of a rank has already consumed when a run on `schedule`'s topology
    continues `resume` exactly (zeros where it starts the epoch, or streams its rest afresh)."""
    workers = schedule.worker_samples()
    if resume is None or resume.epoch != epoch or resume.batches is None:
        return (0,) * len(workers)
    if not resume.continues(
        world_size=schedule.world_size, num_workers=schedule.num_workers, pool_size=schedule.pool_size
    ):
        return (0,) * len(workers)
    consumed, batch_size = resume.batches
    return loader_resume(workers, batch_size, consumed).samples_consumed


def loader_state_of(state: Mapping[str, Any], *, batch_size: int) -> dict[str, Any]:
    """The loader state (`{"batches_consumed", "batch_size", "num_workers", ...}`) of a torchdata
    `StatefulDataLoader.state_dict()` over an `EpisodeStream`: what a job that checkpointed through
    StatefulDataLoader loads into the stream (`stream.load_state_dict`) to resume on another topology,
    with a fresh StatefulDataLoader (whose own state holds its worker count and cannot move).

    Args:
        state: the StatefulDataLoader's state, at a step where every rank has consumed as many batches.
        batch_size: that loader's batch size.

    Raises:
        StateError: not the state of a StatefulDataLoader over an EpisodeStream.
    """
    check_int("batch_size", batch_size, 1)
    try:
        if "_snapshot" in state:  # num_workers > 0: the workers' streams, as of a snapshot step
            snapshot = state["_snapshot"]
            batches = snapshot["_snapshot_step"] + state.get("_steps_since_snapshot", 0)
            workers = snapshot["_main_snapshot"]["_num_workers"]
            streams = [w["dataset_state"] for w in snapshot["_worker_snapshots"].values()]
        else:  # num_workers = 0: the stream in the main process
            batches, workers, streams = state["_num_yielded"], 0, [state["dataset_state"]]
    except (KeyError, TypeError, AttributeError) as exc:
        raise StateError(
            f"Invalid StatefulDataLoader state (no {exc}). Expected torchdata's state_dict() of a "
            "StatefulDataLoader over an EpisodeStream."
        ) from None
    header = next((s for s in streams if isinstance(s, Mapping) and "fingerprint" in s), None)
    if header is None:
        raise StateError(
            "Invalid StatefulDataLoader state (no EpisodeStream state). Expected its workers' states."
        )
    loader = {k: v for k, v in header.items() if k not in _CONSUMER_KEYS}
    loader.update(batches_consumed=batches, batch_size=batch_size, num_workers=workers)
    return loader
