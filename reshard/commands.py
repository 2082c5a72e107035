"""Imports every module that registers an `lrs` subcommand (one module per command family)."""

from __future__ import annotations

from reshard import (
    cmd_prewarm,  # noqa: F401
    cmd_push,  # noqa: F401
    cmd_reshard,  # noqa: F401
    cmd_sample,  # noqa: F401
)
