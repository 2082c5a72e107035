"""`--layout NAME="lrs reshard options"` of the bench scripts: a named reshard of the measured source."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable

from reshard.video.resize import DEFAULT_RESIZE_FILTER, Resize

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def layout_parser(reserved: tuple[str, ...]) -> Callable[[str], tuple[str, str]]:
    """A `type=` for argparse: `NAME=OPTIONS` as (name, options), NAME none of `reserved`."""

    def parse(text: str) -> tuple[str, str]:
        name, sep, options = text.partition("=")
        if not sep or not NAME.fullmatch(name) or name in reserved:
            raise argparse.ArgumentTypeError(
                f'Invalid --layout ({text}). Expected NAME="lrs reshard options", NAME of letters, digits, '
                f"'_', '.', '-' and none of {', '.join(reserved)}."
            )
        shlex.split(options)  # unbalanced quotes fail here, not after the benchmark has begun
        return name, options

    return parse


def resize_of(options: str) -> tuple[int, int, str] | None:
    """The (width, height, filter) a layout's `--resize WxH [--resize-filter F]` asks for, or None; read
    as `lrs reshard` reads them (`Resize.parse`)."""
    argv = shlex.split(options)
    value = _value(argv, "--resize")
    if value is None:
        return None
    resize = Resize.parse(value, _value(argv, "--resize-filter") or DEFAULT_RESIZE_FILTER)
    return resize.width, resize.height, resize.filter


def _value(argv: list[str], option: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None
