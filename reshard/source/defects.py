"""Defects as one error: a defect in one line (`describe_defect`), and many defects as one `DatasetError`
that counts them and names every defective episode (`defects_error`, `raise_defects`).

Below `reshard.source.model` and the checks (`reshard.source.checks`, `reshard.source.diagnosis`), which all report
their defects through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cache.arguments import format_index_list
from cache.redaction import redact
from reader.errors import DatasetError


class Located(Protocol):
    """A defect as `DatasetError` and `doctor.Defect` both hold it."""

    @property
    def problem(self) -> str: ...

    @property
    def file(self) -> str | None: ...

    @property
    def episode(self) -> int | None: ...

    @property
    def field(self) -> str | None: ...


def describe_defect(defect: Located) -> str:
    """A defect in one line: where (file, field) and what is wrong; the episode is said apart."""
    where = [w for w in (defect.file, defect.field and f"field {defect.field!r}") if w]
    return f"{', '.join(where)}: {defect.problem}" if where else defect.problem


def raise_defects(defects: Sequence[Located], url: str) -> None:
    """Raise `defects_error` of the defects, if there are any.

    Raises:
        DatasetError: when `defects` is not empty.
    """
    if defects:
        raise defects_error(defects, url)


def defects_error(defects: Sequence[Located], url: str) -> DatasetError:
    """One error for `defects` (not empty): the first; where there are more, its message counts them and
    names every defective episode, and says that `lrs doctor` lists each one."""
    first = defects[0]
    if len(defects) == 1:
        if isinstance(first, DatasetError):
            return first
        return DatasetError(first.problem, file=first.file, episode=first.episode, field=first.field)
    episodes = sorted({d.episode for d in defects if d.episode is not None})
    among = f", in episodes {format_index_list(episodes)}" if episodes else ""
    return DatasetError(
        f"{first.problem} ({len(defects)} defects in all{among}; `lrs doctor {redact(url)}` lists each, "
        "and `lrs reshard --skip-defective` leaves those episodes out)",
        file=first.file,
        episode=first.episode,
        field=first.field,
    )
