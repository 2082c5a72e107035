"""Argument checks shared by every package: one rule, one message."""

from __future__ import annotations

import numbers
import os
import re
from urllib.parse import unquote, urlsplit

from cache.redaction import redact

# A URL: a scheme, then `://` (`s3://`, `hf://`, `file://`, `gs://`, ...).
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """`value` as an int if it is an integer (not a bool; numpy integers count) in [low, high), else
    ValueError with the project's message: "Invalid NAME (VALUE). Expected an integer >= LOW."."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
        if number >= low and (high is None or number < high):
            return number
    expected = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high})"
    raise ValueError(f"Invalid {name} ({value!r}). Expected {expected}.")


def index_range(item: str, *, what: str = "index") -> range:
    """One item of an index list: `7`, or a range `0-99` with both ends included.

    Raises:
        ValueError: not a non-negative integer, or a range FIRST-LAST with LAST < FIRST (naming the item).
    """
    first, dash, last = item.partition("-")
    if not first.isdigit() or (dash and not last.isdigit()):
        raise ValueError(
            f"Invalid {what} list item ({item!r}). Expected {what} indices and ranges, as 3,7,10-12."
        )
    if dash and int(last) < int(first):
        raise ValueError(f"Invalid {what} range ({item!r}). Expected FIRST-LAST with 0 <= FIRST <= LAST.")
    return range(int(first), int(last or first) + 1)


def parse_index_list(text: str, *, what: str = "index") -> list[int]:
    """`"3,7,10-12"` -> `[3, 7, 10, 11, 12]`: the indices a comma-separated list names, sorted, each once.

    Raises:
        ValueError: a malformed item (`index_range`).
    """
    return sorted({i for part in text.split(",") for i in index_range(part.strip(), what=what)})


def local_dir(value: str | os.PathLike[str], name: str, *, hint: str = "") -> str:
    """`value` as a local directory path: a `file://` URL as the path it names, any other URL refused,
    so that no URL ever becomes a local folder named after its scheme (`./s3:/bucket/...`).

    Args:
        value: the path or URL given.
        name: what it was given as, for the message (`--out`, `cache_dir`).
        hint: what to do instead, appended to the message.

    Raises:
        ValueError: `value` is a URL other than a local `file://` one.
    """
    text = os.fspath(value)
    if not _URL.match(text):
        return text
    url = urlsplit(text)
    if url.scheme.lower() == "file" and url.netloc in ("", "localhost") and url.path:
        return unquote(url.path)
    raise ValueError(
        f"Invalid {name} ({redact(text)}): a URL. Expected a local directory{'; ' + hint if hint else ''}."
    )


def format_index_list(values: list[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2,5`: the inverse of `parse_index_list` for sorted, distinct indices."""
    parts: list[list[int]] = []
    for value in values:
        if parts and value == parts[-1][-1] + 1:
            parts[-1] = [parts[-1][0], value]
        else:
            parts.append([value])
    return ",".join("-".join(str(v) for v in part) for part in parts)
