"""`lrs verify DATASET [--against DATASET]`: the click layer over `reshard.verify.verify`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from reshard.cli.base import (
    EXIT_CHECK_FAILED,
    endpoint_url_option,
    examples,
    handle_errors,
    json_option,
)
from reshard.verify import REPORT_WORST_FRAMES, verify, write_report_page
from reshard.video import DEFAULT_MIN_PSNR_DB


@click.command(
    name="verify",
    epilog=examples(
        "lrs sample v3 --num-episodes 4",
        "lrs reshard v3 --out lrs --video hevc",
        "lrs verify lrs --against v3 --report verify.html",
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
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help=(
        "With --against, also write this HTML page: per camera the PSNR of every episode, the "
        f"{REPORT_WORST_FRAMES} worst frames beside the source's, the colour fit, bytes and decode cost per "
        "frame. One file that opens in a browser offline."
    ),
)
@json_option
@endpoint_url_option()
@handle_errors
def verify_cmd(
    dataset: str,
    against: str | None,
    min_psnr: float,
    workers: int,
    report_path: Path | None,
    as_json: bool,
) -> None:
    """Check every lrs/1 invariant of DATASET (and with --against, equality with its source).

    Exits 1 with a report of the first class of violation found, 0 when everything holds, 3 on bad
    input or when a worker process dies. The --report page is written whatever the checks found.
    """
    if report_path is not None and against is None:
        raise click.UsageError(
            "Invalid --report without --against. Expected --against SOURCE: the page shows each frame "
            "beside the source's."
        )
    worst = REPORT_WORST_FRAMES if report_path is not None else 0
    report = verify(dataset, against=against, min_psnr=min_psnr, workers=workers, worst_frames=worst)
    if report_path is not None:
        write_report_page(report, report_path)
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else report.describe())
    if report_path is not None:
        click.echo(f"report: {report_path}", err=True)
    if not report.ok:
        click.get_current_context().exit(EXIT_CHECK_FAILED)
