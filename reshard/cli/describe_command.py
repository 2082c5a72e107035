"""`lrs describe DATASET`: open a v3 dataset, validate it and summarise it."""

from __future__ import annotations

import json

import click

from cache.printable import printable_lines
from reshard.cli.base import (
    endpoint_url_option,
    examples,
    handle_errors,
    json_option,
)
from reshard.source import describe, open_source, validate


@click.command(name="describe", epilog=examples("lrs sample v3 --num-episodes 4", "lrs describe v3"))
@click.argument("source", metavar="DATASET")
@json_option
@click.option(
    "--full",
    is_flag=True,
    help="Also check every data file's index columns and every video header, and say so.",
)
@endpoint_url_option()
@handle_errors
def describe_cmd(source: str, as_json: bool, full: bool) -> None:
    """Open a v3 dataset (path, URL or Hub repo id), validate its metadata, and summarise it."""
    src = open_source(source)
    summary = describe(src)
    if full:
        validate(src)
        summary["checked"] = {"data_files": summary["data_files"], "video_files": summary["video_files"]}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(render_description(summary))


def render_description(summary: dict[str, object]) -> str:
    """`describe`'s summary as aligned lines for people, each `printable` (names come from the dataset)."""
    from reshard.source import plural

    length: dict[str, float] = summary["episode_length"]  # type: ignore[assignment]
    cameras: dict[str, str | None] = summary["cameras"]  # type: ignore[assignment]
    width = max((len(k) for k in cameras), default=0)
    lines = [
        f"dataset   {summary['url']} (LeRobot {summary['codebase_version']}, {summary['fps']} fps)",
        f"episodes  {summary['episodes']}, {summary['frames']} frames; length min {length['min']:g}, "
        f"median {length['median']:g}, max {length['max']:g}",
        f"tasks     {summary['tasks']}",
    ]
    for i, (key, codec) in enumerate(cameras.items()):
        lines.append(f"{'cameras' if i == 0 else '':<10}{key:<{width}}  {codec or 'codec not recorded'}")
    lines += [
        f"features  {', '.join(summary['features'])}",  # type: ignore[arg-type]
        f"files     {plural(summary['data_files'], 'data file')}, "  # type: ignore[arg-type]
        f"{plural(summary['video_files'], 'video file')}",  # type: ignore[arg-type]
    ]
    if "checked" in summary:
        lines.append("checked   every data file's index columns and every video header: ok")
    return printable_lines(lines)
