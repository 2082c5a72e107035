"""Errors of the offline tooling: reshard, verify, push."""

from __future__ import annotations

from reader.errors import DatasetError, FetchError, LayoutError, LrsError

__all__ = [
    "DatasetError",
    "FetchError",
    "LayoutError",
    "LrsError",
    "PushError",
    "ReshardError",
    "VerifyError",
    "WorkerDied",
]


class ReshardError(LrsError):
    """A reshard cannot proceed (bad options, an output directory of another job, a failed part)."""


class WorkerDied(ReshardError):
    """A worker process of a reshard or a verify ended abruptly (SIGKILL, the OOM killer, an encoder's
    abort); a reshard's finished work is kept.

    Attributes:
        exits: the exit code of each worker process of the pool by pid, as `multiprocessing` reports it
            (a negative code is the signal that ended it); empty where the pool did not say.
    """

    def __init__(self, *args: object, exits: dict[int, int | None] | None = None) -> None:
        super().__init__(*args)
        self.exits = dict(exits or {})


class VerifyError(LrsError):
    """An lrs/1 invariant does not hold, or the output differs from its source."""


class PushError(LrsError):
    """An upload failed permanently, or the remote does not match the index after upload."""
