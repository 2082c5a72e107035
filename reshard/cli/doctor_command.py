"""`lrs doctor DATASET`: the click layer over `reshard.source.doctor`."""

from __future__ import annotations

import json

import click

from reshard.cli.base import (
    EXIT_CHECK_FAILED,
    endpoint_url_option,
    examples,
    handle_errors,
    json_option,
    quiet_option,
    quiet_requested,
)


@click.command(name="doctor", epilog=examples("lrs sample v3 --num-episodes 4", "lrs doctor v3"))
@click.argument("source", metavar="DATASET")
@json_option
@click.option(
    "--decode",
    is_flag=True,
    help="Decode every video frame and count each episode's (default: headers only).",
)
@quiet_option
@endpoint_url_option()
@handle_errors
def doctor_cmd(source: str, as_json: bool, decode: bool, quiet: bool) -> None:
    """List every defect of the v3 dataset DATASET (a path or URL), read-only.

    Runs the checks reshard and verify make, to the end instead of stopping at the first: metadata,
    episode ranges, referenced files, orphan files, each data file's rows, each video's frames. Each
    defect names the file, the episode and the field. Exits 0 when there is none, 1 when there are.
    """
    from reshard.source import doctor

    report = doctor(source, decode=decode, progress=not quiet_requested(quiet) and not as_json)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render())
    if not report.clean:
        click.get_current_context().exit(EXIT_CHECK_FAILED)
