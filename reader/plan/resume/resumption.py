"""`Resumption`: the one entry point of a stream's resume, torch-free.

The stream hands it what it is asked (`load_state_dict`'s state, `state_dict`'s arguments, the start of an
iteration) and gets coordinates back; the arithmetic behind them is `state` (parsing and checking a state,
the rest of an epoch after earlier runs), `loader_math` (batches consumed -> samples per worker) and the
schedule's `reader.schedule.rest`. `IterationCursor` is where a process's running iteration is, what
`state_dict()` reads inside a DataLoader worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from reader.errors import StateError
from reader.plan.resume.state import Identity, Resume, parse_state, resumed_schedule
from reader.plan.spec import default_pool_size
from reader.schedule import EpochPlan, Schedule
from reader.schedule.rest import RestSchedule, RunSegment, consumed_counts, rest_after


class Positioned(Protocol):
    """What a cursor reads of the consumer it follows: the next sample's step."""

    @property
    def position(self) -> int: ...


@dataclass
class IterationCursor:
    """Where a process's running iteration is: its consumer, epoch, logical worker and worker count, and
    the runs of the epoch before it (an elastic resume's, `reader.schedule.rest`)."""

    consumer: Positioned
    epoch: int
    logical: int
    num_workers: int
    history: tuple[RunSegment, ...] = ()


@dataclass(frozen=True)
class Start:
    """Where an iteration starts: the order it streams (the epoch's, or the rest of it after earlier runs),
    the logical worker it serves (None: a resume left it nothing), the samples it skips, and the epoch's
    earlier runs."""

    schedule: Schedule | RestSchedule
    logical: int | None
    samples: int
    history: tuple[RunSegment, ...]


class Resumption:
    """A stream's resume: the identity its states carry and the loaded state still pending (applied when
    the stream next iterates that state's epoch).

    Args:
        identity: what a state must match (`ReadPlan.identity`).
        default_pool: how a trainer's state without a pool size is read: None, the stream's pool size was
            given; True, it followed the batch size (`default_pool_size(batch_size)`); False, the default
            pool of an unknown batch size.
    """

    def __init__(self, identity: Identity, default_pool: bool | None) -> None:
        self.identity = identity
        self._default_pool = default_pool
        self._resume: Resume | None = None

    def pending(self, epoch: int) -> Resume | None:
        """The loaded state, when it is for `epoch`."""
        return self._resume if self._resume is not None and self._resume.epoch == epoch else None

    def set_epoch(self, epoch: int) -> None:
        """A loaded state stays pending until the epoch moves away from the one it names."""
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None

    def load(
        self, state: Mapping[str, Any], *, seed: int, epoch: int, schedule: Callable[[int], Schedule]
    ) -> tuple[int, int]:
        """Check `state` and keep it pending; the runs it names are checked now, by arithmetic.

        Args:
            state: what `state_dict` returns, or a trainer's loader state.
            seed, epoch: the stream's, for a state that names none.
            schedule: the stream's schedule for a seed, without DataLoader workers.

        Returns:
            The epoch and seed to stream from now on.

        Raises:
            StateError: the state is malformed or made for another run.
        """
        default_pool = None
        if self._default_pool is not None:
            given = self._default_pool
            default_pool = lambda batch_size: default_pool_size(batch_size if given else None)  # noqa: E731
        resume, named = parse_state(state, self.identity, epoch=epoch, default_pool=default_pool)
        if named is not None:
            schedule(named)  # validates it
            seed = named
        if resume.before or resume.segment is not None:
            # The runs it names, each within what its epoch had left (the samples the earlier runs
            # consumed are computed only where there are earlier runs).
            base = schedule(seed)
            try:
                run: EpochPlan = base
                if resume.before:
                    run = RestSchedule(base, resume.epoch, rest_after(base, resume.epoch, resume.before))
                if resume.segment is not None:
                    consumed_counts(run, resume.segment)
            except ValueError as exc:
                raise StateError(f"{exc} (resume state of epoch {resume.epoch})") from None
        self._resume = resume
        return resume.epoch, seed

    def start(self, schedule: Schedule, epoch: int, *, physical: int) -> Start:
        """Where worker `physical` of a run on `schedule`'s topology starts `epoch`.

        Raises:
            StateError: the pending state does not fit this run (another num_workers, more samples).
        """
        ordered, history = resumed_schedule(schedule, epoch, self.pending(epoch))
        resume = self.pending(epoch)
        if resume is not None and (
            resume.consumer is not None or self._continues(resume, schedule.num_workers)
        ):
            logical, samples = resume.start(
                ordered.worker_samples(), num_workers=schedule.num_workers, physical=physical
            )
            return Start(ordered, logical, samples, history)
        return Start(ordered, physical, 0, history)

    def loader_state(
        self, *, seed: int, epoch: int, batches_consumed: int, batch_size: int, num_workers: int
    ) -> dict[str, Any]:
        """The state after `batches_consumed` batches of `epoch` (what a trainer knows), checked."""
        state = self.identity.header(seed=seed, epoch=epoch)
        state.update(batches_consumed=batches_consumed, batch_size=batch_size, num_workers=num_workers)
        history = self._history(epoch, num_workers)
        if history:
            state["before"] = [s.to_json() for s in history]
        parse_state(state, self.identity, epoch=epoch)
        return state

    def cursor_state(self, cursor: IterationCursor, *, seed: int) -> dict[str, Any]:
        """The state of a running iteration: its consumer's position."""
        state = self.identity.header(seed=seed, epoch=cursor.epoch)
        state.update(worker=cursor.logical, num_workers=cursor.num_workers, samples=cursor.consumer.position)
        if cursor.history:
            state["before"] = [s.to_json() for s in cursor.history]
        return state

    def pending_batches(self, epoch: int, num_workers: int | None) -> int:
        """Batches a pending trainer state says were consumed in `epoch` by the run that a DataLoader with
        `num_workers` continues (0 if none, or where that DataLoader streams the rest of the epoch on a new
        topology)."""
        resume = self.pending(epoch)
        if resume is None or resume.batches is None:
            return 0
        if num_workers is not None and not self._continues(resume, num_workers):
            return 0
        return resume.batches[0]

    def _continues(self, resume: Resume, num_workers: int) -> bool:
        identity = self.identity
        return resume.continues(
            world_size=identity.world_size, num_workers=num_workers, pool_size=identity.episode_pool_size
        )

    def _history(self, epoch: int, num_workers: int) -> tuple[RunSegment, ...]:
        """The runs of `epoch` before a run with `num_workers` workers (an elastic resume's)."""
        resume = self.pending(epoch)
        if resume is None:
            return ()
        identity = self.identity
        return resume.history(
            world_size=identity.world_size, num_workers=num_workers, pool_size=identity.episode_pool_size
        )
