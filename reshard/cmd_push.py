"""`lrs push DIR URL`: the click layer over `reshard.push.push`."""

from __future__ import annotations

from pathlib import Path

import click

from reshard.cli import cli, handle_errors
from reshard.push import push


@cli.command("push")
@click.argument("local_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("url")
@click.option(
    "--create",
    is_flag=True,
    default=False,
    show_default=True,
    help="Create the bucket first if it does not exist.",
)
@click.option(
    "--endpoint-url",
    default=None,
    show_default=True,
    help="S3-compatible endpoint (overrides AWS_ENDPOINT_URL), or the Hub endpoint for hf:// targets.",
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=8, show_default=True, help="Uploads in flight at once."
)
@click.option(
    "--dry-run",
    is_flag=True,
    default=False,
    show_default=True,
    help="Print what would be uploaded; upload nothing.",
)
@click.option("--quiet", is_flag=True, default=False, show_default=True, help="No progress bar.")
@handle_errors
def push_command(
    local_dir: Path,
    url: str,
    create: bool,
    endpoint_url: str | None,
    workers: int,
    dry_run: bool,
    quiet: bool,
) -> None:
    """Upload a resharded dataset to a bucket, resumably, its index last.

    URL is hf://buckets/<owner>/<name>[/prefix], s3://bucket/prefix, a local path, or another writable
    fsspec URL. Files already there with the same size (and hash, where the store has one) are skipped,
    so rerunning an interrupted push uploads only the rest.
    """
    summary = push(
        local_dir,
        url,
        workers=workers,
        create=create,
        endpoint_url=endpoint_url,
        dry_run=dry_run,
        quiet=quiet,
    )
    if dry_run:
        for rel in summary.uploaded:
            click.echo(f"upload {rel}")
        for rel in summary.skipped:
            click.echo(f"skip   {rel}")
    click.echo(summary.describe())
