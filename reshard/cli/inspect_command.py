"""`lrs inspect URL`: the click layer over `reshard.source.inspect_dataset`."""

from __future__ import annotations

import json

import click

from reshard.cli.base import (
    endpoint_url_option,
    examples,
    handle_errors,
    json_option,
)
from reshard.source import inspect_dataset, render


@click.command(name="inspect", epilog=examples("lrs sample v3 --num-episodes 4", "lrs inspect v3 --json"))
@click.argument("url", metavar="DATASET")
@json_option
@click.option(
    "--probe-videos",
    type=click.IntRange(0),
    default=2,
    show_default=True,
    help="Video files per camera whose keyframes are read (to check episode starts).",
)
@endpoint_url_option()
@handle_errors
def inspect_cmd(url: str, as_json: bool, probe_videos: int) -> None:
    """Describe the layout of any v3 dataset: files, row groups, page index, video GOPs, lrs/1 or not."""
    report = inspect_dataset(url, probe_videos=probe_videos)
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
