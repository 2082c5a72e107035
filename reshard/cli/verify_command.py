"""`lrs verify DATASET [--against DATASET]`: the click layer over `reshard.verify.verify`."""

from __future__ import annotations

import json

import click

from reshard.cli.base import (
    EXIT_CHECK_FAILED,
    endpoint_url_option,
    examples,
    handle_errors,
    json_option,
)
from reshard.verify import verify
from reshard.video import DEFAULT_MIN_PSNR_DB


@click.command(
    name="verify",
    epilog=examples(
        "lrs sample v3 --num-episodes 4", "lrs reshard v3 --out lrs", "lrs verify lrs --against v3"
    ),
)
@click.argument("dataset")
@click.option("--against", help="The v3 source it was resharded from: also check every value and frame.")
@click.option(
    "--min-psnr",
    type=float,
    default=DEFAULT_MIN_PSNR_DB,
    show_default=True,
    help="Lowest per-frame PSNR (dB) accepted for a re-encoded episode video.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Processes checking files, tables and videos at once (the report is the same for any number).",
)
@json_option
@endpoint_url_option()
@handle_errors
def verify_cmd(dataset: str, against: str | None, min_psnr: float, workers: int, as_json: bool) -> None:
    """Check every lrs/1 invariant of DATASET (and with --against, equality with its source).

    Exits 1 with a report of the first class of violation found, 0 when everything holds, 3 on bad
    input or when a worker process dies.
    """
    report = verify(dataset, against=against, min_psnr=min_psnr, workers=workers)
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else report.describe())
    if not report.ok:
        click.get_current_context().exit(EXIT_CHECK_FAILED)
