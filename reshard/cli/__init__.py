"""The `lrs` command line: a thin click layer over the library; errors become one-line messages.

`reshard.cli.base` holds the group and the shared helpers, `reshard.cli.types` the parameter types; each
command is a module here (`<name>_command`). This module adds them to the group, so the commands depend
on `base` and `types` and nothing depends on a command. A command imports of the library only what a
package exports in its `__all__` (`from reshard.job import reshard`), never a module's internals
(`tests/test_architecture.py` holds the rule and the few exceptions left).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType


def _exit_while_starting(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("Interrupted (SIGINT) while starting; nothing was done.\n")
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _quiet_sigint_while_importing() -> Iterator[None]:
    """Ctrl-C while `lrs` imports its libraries (a second or more on a busy machine) exits 130 in one
    line instead of a `KeyboardInterrupt` traceback from deep inside an import; nothing has been done
    yet. Python's own handler is back once the imports are done (and was left alone if not in place)."""
    ours = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if ours:
        signal.signal(signal.SIGINT, _exit_while_starting)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)


with _quiet_sigint_while_importing():
    import click

    from cache.exits import EXIT_SIGINT, EXIT_SIGTERM, Terminated, raise_on_sigterm
    from cache.printable import printable
    from reshard.cli.base import (
        EXIT_CHECK_FAILED,
        EXIT_ERROR,
        cli,
        handle_errors,
        hoist_global_flags,
        interrupt_message,
        quiet_requested,
    )
    from reshard.cli.cache_command import cache_cmd
    from reshard.cli.demo_command import demo
    from reshard.cli.describe_command import describe_cmd
    from reshard.cli.doctor_command import doctor_cmd
    from reshard.cli.inspect_command import inspect_cmd
    from reshard.cli.prewarm_command import prewarm_command
    from reshard.cli.push_command import push_command
    from reshard.cli.reshard_command import reshard_cmd
    from reshard.cli.sample_command import sample
    from reshard.cli.show_command import show_cmd
    from reshard.cli.train_command import train_cmd
    from reshard.cli.verify_command import verify_cmd

__all__ = ["EXIT_CHECK_FAILED", "EXIT_ERROR", "cli", "handle_errors", "main", "quiet_requested"]

for _command in (
    reshard_cmd,
    verify_cmd,
    inspect_cmd,
    doctor_cmd,
    push_command,
    prewarm_command,
    sample,
    describe_cmd,
    show_cmd,
    demo,
    train_cmd,
    cache_cmd,
):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point.

    Ctrl-C (SIGINT) and SIGTERM unwind the command, so temporaries are removed and a reshard, push or
    prewarm is left resumable, then exit 130 and 143 (128 + the signal), as a shell reports them.
    """
    raise_on_sigterm()
    try:
        code = cli.main(args=hoist_global_flags(sys.argv[1:]), prog_name="lrs", standalone_mode=False)
    except click.UsageError as exc:
        # One line, as every other failure: click's own form adds "Usage:" and "Try ..." lines.
        command = exc.ctx.command_path if exc.ctx is not None else "lrs"
        click.echo(f"Error: {printable(exc.format_message())} (see `{command} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:  # click's form of KeyboardInterrupt
        click.echo(interrupt_message("SIGINT"), err=True)
        sys.exit(EXIT_SIGINT)
    except Terminated:
        click.echo(interrupt_message("SIGTERM"), err=True)
        sys.exit(EXIT_SIGTERM)
    sys.exit(code if isinstance(code, int) else 0)
