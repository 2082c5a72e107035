"""Errors of the read side: malformed datasets, layout contract violations, resume state, decode."""

from __future__ import annotations

from cache.errors import CacheError, FetchError, IntegrityError, LrsError
from cache.redaction import redact

__all__ = [
    "CacheError",
    "DatasetError",
    "DecodeError",
    "FetchError",
    "IntegrityError",
    "LayoutError",
    "LrsError",
    "NotADataset",
    "RowGroupMismatch",
    "StateError",
]


class DatasetError(LrsError):
    """A dataset is malformed. The message names the file, and the episode and field when known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        episode: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = None if file is None else redact(file)
        self.episode = episode
        self.field = field
        self.problem = redact(message)  # without the location, which `file`, `episode` and `field` hold
        where = []
        if self.file is not None:
            where.append(self.file)
        if episode is not None:
            where.append(f"episode {episode}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{': '.join([', '.join(where), message]) if where else message}")


class NotADataset(DatasetError):
    """The location holds no dataset at all (no `meta/info.json`): bad input, not a defect of one."""


class LayoutError(DatasetError):
    """A dataset claims the lrs/1 layout but its `meta/lrs/` index is missing, stale or inconsistent."""


class StateError(LrsError):
    """A resume state does not fit this stream (other dataset, pool size, version, or malformed)."""


class DecodeError(LrsError):
    """A video could not be decoded. The message names the episode, camera and file."""


class RowGroupMismatch(DatasetError):
    """A row group's bytes are not those the lrs/1 index records (the file was replaced while reading)."""
