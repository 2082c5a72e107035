"""The `lrs` group and what every command shares: exit codes, one-line errors, the global flags.

The commands live beside it (`reshard.cli.<name>_command`) and import this module; `reshard.cli` adds
them to the group, so nothing here imports a command.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cache import LrsError
from cache.errors import os_error_message
from cache.printable import printable, printable_lines
from cache.redaction import redact
from reshard import DISTRIBUTION
from reshard.cli.types import InvalidValue, LocalDir

F = TypeVar("F", bound=Callable[..., Any])

# Exit codes: 0 ok, 1 a check failed (verify), 2 usage (click's own), 3 bad input or a failed job.
EXIT_CHECK_FAILED = 1
EXIT_ERROR = 3


class LrsClickError(click.ClickException):
    exit_code = EXIT_ERROR


def handle_errors(fn: F) -> F:
    """Turn an `LrsError`, or an `OSError` on a local path, into a one-line message (redacted, its control
    characters escaped: a name from a dataset prints as `cache.printable` escapes it) and exit code 3;
    `--debug` prints the traceback before that line and changes nothing else (the exit code stays 3)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LrsError as exc:
            if click.get_current_context().find_root().params.get("debug"):
                click.echo(printable_lines(redact(traceback.format_exc()).rstrip().splitlines()), err=True)
            raise LrsClickError(printable(redact(str(exc)))) from exc
        except OSError as exc:
            # A local path no deeper layer words (an unwritable or full folder): the same one line, exit 3.
            if exc.filename is None:
                raise
            if click.get_current_context().find_root().params.get("debug"):
                click.echo(printable_lines(redact(traceback.format_exc()).rstrip().splitlines()), err=True)
            raise LrsClickError(printable(redact(os_error_message(exc)))) from exc

    return wrapper  # type: ignore[return-value]


# What `main` says after "Interrupted (SIGINT)" or "Terminated (SIGTERM)": set by the command that runs, as it
# knows what resumes it (`set_interrupt_hint`); a command that changes nothing sets none.
RERUN_TO_RESUME = "rerun the same command to resume"
_interrupt_hint: list[Callable[[], str]] = []


def set_interrupt_hint(hint: Callable[[], str]) -> None:
    """What to tell the user when this command is interrupted: `hint()` is called then, as what resumes it
    may have changed meanwhile (a checkpoint saved)."""
    _interrupt_hint[:] = [hint]


def interrupt_message(signal_name: str) -> str:
    """The line `main` prints when a command was interrupted by `signal_name` ("SIGINT", "SIGTERM")."""
    what = "Interrupted" if signal_name == "SIGINT" else "Terminated"
    hint = _interrupt_hint[0]() if _interrupt_hint else ""
    return f"{what} ({signal_name}); {hint}." if hint else f"{what} ({signal_name})."


def examples(*lines: str) -> str:
    """A command's epilog: `lines`, commands that run as they stand in an empty folder, offline (a test runs
    every command's, `tests/reshard/test_cli_grammar.py`). `\b` keeps click from rewrapping them."""
    return "\b\nExample (runs offline, in an empty folder):\n" + "\n".join(f"  {line}" for line in lines)


ENDPOINT_HELP = (
    "The S3-compatible endpoint of every s3:// URL this command reads or writes, e.g. http://127.0.0.1:9000 "
    "(the same as AWS_ENDPOINT_URL, which it overrides for this command)."
)


def endpoint_url_option(*, expose: bool = False, help: str = ENDPOINT_HELP) -> Callable[[F], F]:  # noqa: A002
    """`--endpoint-url URL`, the same on every command that opens a URL: it sets `AWS_ENDPOINT_URL` for the
    command (its workers inherit it; `cache.remote` reads it for every s3:// URL) and restores it after.
    With `expose`, the command gets the value too (push's Hub endpoint for hf:// targets)."""
    return click.option(
        "--endpoint-url",
        metavar="URL",
        expose_value=expose,
        callback=_set_endpoint,
        help=help,
    )


_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def _set_endpoint(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    if not value.startswith(("http://", "https://")):
        raise InvalidValue(f"Invalid --endpoint-url ({redact(value)}). Expected an http:// or https:// URL.")
    # Both names `cache.remote` reads (the S3-specific one first), so that the option wins over either.
    before = {name: os.environ.get(name) for name in _ENDPOINT_VARIABLES}
    os.environ.update(dict.fromkeys(_ENDPOINT_VARIABLES, value))

    def restore() -> None:
        for name, old in before.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

    ctx.call_on_close(restore)
    return value


# What to do instead of a URL where a command writes a local directory.
PUSH_HINT = (
    "write it locally, then upload it with `lrs push DATASET URL` (or `lrs reshard --push-bucket URL`)"
)


def quiet_requested(local: bool = False) -> bool:
    """Whether progress bars are off: the command's own `--quiet`, or `-q/--quiet` given to `lrs`."""
    return local or bool(click.get_current_context().find_root().params.get("quiet"))


# Flags that mean the same to every command and may stand anywhere on the line (`lrs verify X --debug`):
# `main` moves them before the command name, where the group reads them.
GLOBAL_FLAGS = {"--debug": "--debug", "-q": "--quiet", "--quiet": "--quiet"}


def hoist_global_flags(args: list[str]) -> list[str]:
    """`args` with `--debug` and `-q/--quiet` moved to the front (none after a `--`)."""
    flags: list[str] = []
    rest: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg in GLOBAL_FLAGS:
            if GLOBAL_FLAGS[arg] not in flags:
                flags.append(GLOBAL_FLAGS[arg])
        else:
            rest.append(arg)
    return flags + rest


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs (anywhere on the line).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars (anywhere on the line).")
@click.version_option(package_name=DISTRIBUTION)
def cli(debug: bool, quiet: bool) -> None:
    """lrs: reshard LeRobot v3 datasets for fast training from object storage, and stream them.

    Typical flow: `lrs reshard DATASET --out DIR`, `lrs verify DIR --against DATASET`, `lrs push DIR URL`,
    `lrs prewarm URL --cache-dir CACHE`, then `from reader import EpisodeStream` in training. DATASET is
    always a dataset's path or URL (an s3://, hf://, http(s):// URL, or a Hub repo id where it is read).
    """
    _interrupt_hint.clear()  # a command that resumes says so when it starts (`set_interrupt_hint`)
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _Redact) for f in handler.filters):
            handler.addFilter(_Redact())


# The loggers of lrs's own packages, whose lines may quote a name from a dataset.
_OWN_LOGGERS = ("cache", "reader", "reshard")


class _Redact(logging.Filter):
    """Redact secrets (tokens, a URL's user:password@) from every log line, whichever library wrote it,
    and escape the control characters of lrs's own lines (`cache.printable`: names from a dataset)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if record.name.split(".")[0] in _OWN_LOGGERS:
            clean = printable(clean)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def quiet_option(fn: F) -> F:
    """A command's `-q/--quiet` (as the group's, which works anywhere on the line)."""
    return click.option("-q", "--quiet", is_flag=True, default=False, help="No progress bars.")(fn)


def json_option(fn: F) -> F:
    """A command's `--json`: its report as JSON instead of text (the `as_json` argument)."""
    return click.option("--json", "as_json", is_flag=True, default=False, help="Print the report as JSON.")(
        fn
    )


def cache_dir_option(help: str) -> Callable[[F], F]:
    """A reading command's `--cache-dir`: the node cache, a local directory (a URL is refused, saying so);
    `help` says what the command does with it."""
    return click.option("--cache-dir", type=LocalDir(hint="the node cache is a local directory"), help=help)


def dry_run_option(what: str) -> Callable[[F], F]:
    """A command's `--dry-run`: `what` it prints instead of doing it."""
    return click.option("--dry-run", is_flag=True, default=False, help=f"Print {what}; change nothing.")
