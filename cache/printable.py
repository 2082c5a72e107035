"""The one rule for text from a dataset that lrs prints: its control characters escaped.

A feature name, a camera key or a task string comes from the dataset's own files, and a dataset comes from
anyone. Printed raw, an escape sequence in a name retitles or clears the terminal, and a newline forges a
line of a report (`verify: OK`). `printable` escapes every character that Python's `repr` escapes (those
`str.isprintable` rejects: control and format characters, line and paragraph separators, unassigned code
points, but the space), spelled as `repr` spells it (`\\x1b`, `\\n`, `\\u202e`), without repr's quotes:
the rule by which lrs's messages have always quoted a task string (`{task!r}`). Every other character,
letters of any script included, is left as it is.

No import of the rest of lrs, so that every package and the command line use this one rule.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["has_control", "printable", "printable_lines"]


def has_control(text: str) -> bool:
    """Whether `text` holds a character `printable` escapes."""
    return not text.isprintable()


def printable(text: str) -> str:
    """`text` with every character `repr` escapes escaped as `repr` escapes it (module docstring)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_lines(lines: Iterable[str]) -> str:
    """`lines` joined by newlines, each made `printable`: a newline inside one stays on its line."""
    return "\n".join(printable(line) for line in lines)
