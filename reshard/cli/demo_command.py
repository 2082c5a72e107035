"""`lrs demo`: the whole pipeline on a sample, with checks (`reshard.demo.pipeline`)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from reshard.cli.base import (
    EXIT_CHECK_FAILED,
    examples,
    handle_errors,
)
from reshard.cli.types import LocalDir


@click.command(epilog=examples("lrs demo --num-episodes 4"))
@click.option(
    "--workdir",
    type=LocalDir(hint="the demo writes locally (its bucket is a local file:// one)"),
    default=None,
    help="Where the demo's files go: DIR when new, empty or an earlier demo's (whose files it replaces), "
    "else a new folder in DIR; nothing else of DIR is touched [default: a temporary directory].",
)
@click.option(
    "--num-episodes",
    type=click.IntRange(2),
    default=12,
    show_default=True,
    help="Episodes of the sample.",
)
@click.option("--keep", is_flag=True, help="Keep the sample, output, bucket and cache afterwards.")
@handle_errors
def demo(workdir: Path | None, num_episodes: int, keep: bool) -> None:
    """Run the whole pipeline on a generated sample, check it, and print a summary table.

    sample -> reshard (H.265) -> verify -> push to a local bucket -> prewarm a cache -> stream one epoch
    with 2 DataLoader workers (every frame exactly once) -> resume mid-epoch (the same continuation).
    Exits 1 when a check fails, keeping the files for a look.
    """
    from dataclasses import replace

    from reshard.demo import DEMO_SAMPLE, DemoCheckError, DemoConfig, claim_workdir, render_table, run_demo

    own = workdir is None
    root = claim_workdir(Path(tempfile.mkdtemp(prefix="lrs-demo-")) if workdir is None else workdir)
    beside = (
        "" if own or root == workdir else f" ({workdir} holds files of yours: the demo uses a new folder)"
    )
    click.echo(f"lrs demo in {root}{beside}")
    try:
        result = run_demo(root, DemoConfig(replace(DEMO_SAMPLE, episodes=num_episodes)), echo=click.echo)
    except DemoCheckError as exc:
        click.echo(f"check failed: {exc}\nfiles kept in {root}", err=True)
        click.get_current_context().exit(EXIT_CHECK_FAILED)
    except BaseException:
        click.echo(f"files kept in {root}", err=True)
        raise
    click.echo()
    click.echo(render_table(result))
    if keep:
        click.echo(f"files kept in {root}")
    else:
        _remove(root, own=own)


def _remove(root: Path, *, own: bool) -> None:
    """Remove the demo's files: the whole temporary directory when the demo made one, else only what it
    wrote (and the directory, where the demo made it)."""
    from reshard.demo import cleanup_workdir

    if own:
        shutil.rmtree(root, ignore_errors=True)
    else:
        cleanup_workdir(root)
