"""The click parameter types of the `lrs` commands: a local directory that is never a URL
(`LocalDir`), comma lists (`Weights`, `IndexList`), byte sizes (`ByteSize`) and SLURM-style parts
(`PartType`). Each failure is one line: `Invalid <what> (<value>). Expected <...>.`
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from cache.arguments import index_range, local_dir


class InvalidValue(click.BadParameter):
    """A bad value whose message names it already (`Invalid --out (s3://b/x): ...`): shown as it stands,
    without click's `Invalid value for '--out': ` before it."""

    def format_message(self) -> str:
        return self.message


class _OwnMessages(click.ParamType):
    """A parameter type whose failures are `InvalidValue`s when they name the value themselves."""

    def fail(
        self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None
    ) -> NoReturn:
        if message.startswith("Invalid "):
            raise InvalidValue(message, ctx=ctx, param=param)
        super().fail(message, param, ctx)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


class LocalDir(_OwnMessages, click.Path):
    """A local directory, never a URL: `file:///abs/dir` is the directory it names; `s3://...`, `hf://...`
    and every other URL are a usage error saying what to do instead (`hint`), so that no URL becomes a
    local folder named after its scheme."""

    def __init__(self, *, hint: str, exists: bool = False) -> None:
        super().__init__(exists=exists, file_okay=False, path_type=Path)
        self.hint = hint

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            name = "directory" if param is None else param.human_readable_name
            if isinstance(param, click.Option):
                name = param.opts[0]
            try:
                value = local_dir(value, name, hint=self.hint)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(value, param, ctx)


class CommaList(_OwnMessages, click.ParamType):
    """Comma-separated items, each part parsed by `parse`; a tuple (a default, or a value click converted
    before) passes through.

    Args:
        name: the metavar.
        parse: the items one part stands for; raises ValueError for a malformed part.
        what, expected: the error message's `Invalid <what> (<value>). Expected <expected>.`
    """

    def __init__(self, name: str, parse: Callable[[str], Sequence[Any]], *, what: str, expected: str) -> None:
        self.name, self.parse, self.what, self.expected = name, parse, what, expected

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[Any, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return tuple(item for part in str(value).split(",") for item in self.parse(part.strip()))
        except ValueError:
            self.fail(f"Invalid {self.what} ({value}). Expected {self.expected}.", param, ctx)


def _weight(part: str) -> list[float]:
    return [float(part)]


class Weights(CommaList):
    """A mixture's weights: 3,1 or 0.7,0.3."""

    def __init__(self) -> None:
        super().__init__("W,W,...", _weight, what="weights", expected="numbers separated by commas, e.g. 3,1")


class IndexList(CommaList):
    """Episode or rank indices: `0,3,7` or ranges `0-99,120`."""

    def __init__(self) -> None:
        super().__init__(
            "LIST", index_range, what="list", expected="integers and ranges like 0,3,7 or 0-99,120"
        )


class ByteSize(_OwnMessages, click.ParamType):
    """A byte count with the units' true meanings: `50GB` is 50 x 1000^3 bytes, `50GiB` 50 x 1024^3;
    a bare letter (`50G`, `500M`) is binary, as `du -h` and `ls -h` print sizes; `1048576` is bytes."""

    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            count = value
        else:
            match = _SIZE.match(str(value))
            count = 0
            if match:
                decimal = (match[3] or "").lower() == "b" and match[2] != ""
                count = int(float(match[1]) * (1000 if decimal else 1024) ** _UNITS[match[2].lower()])
        if count < 1:
            self.fail(
                f"Invalid size ({value}). Expected a positive byte count like 50GiB, 50GB, 500M or 1048576.",
                param,
                ctx,
            )
        return count


class PartType(_OwnMessages, click.ParamType):
    """`I/N`: part I (0-based) of N."""

    name = "I/N"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        index, _, count = str(value).partition("/")
        try:
            part = int(index), int(count)
        except ValueError:
            part = (-1, 0)
        if not 0 <= part[0] < part[1]:
            self.fail(f"Invalid part ({value}). Expected I/N with 0 <= I < N, e.g. 0/4.", param, ctx)
        return part
