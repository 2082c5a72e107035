"""Argument checks shared by every package: one rule, one message."""

from __future__ import annotations

import numbers


def check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """`value` as an int if it is an integer (not a bool; numpy integers count) in [low, high), else
    ValueError with the project's message: "Invalid NAME (VALUE). Expected an integer >= LOW."."""
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if integral and value >= low and (high is None or value < high):  # type: ignore[operator]
        return int(value)  # type: ignore[arg-type]
    expected = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high})"
    raise ValueError(f"Invalid {name} ({value!r}). Expected {expected}.")
