"""`lrs push DATASET URL`: the click layer over `reshard.push.publish.push`."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from cache.printable import printable
from reshard.cli.base import (
    RERUN_TO_RESUME,
    dry_run_option,
    endpoint_url_option,
    examples,
    handle_errors,
    quiet_option,
    quiet_requested,
    set_interrupt_hint,
)
from reshard.cli.types import LocalDir
from reshard.push import push


@click.command(
    "push",
    epilog=examples("lrs sample v3 --num-episodes 4", "lrs reshard v3 --out lrs", "lrs push lrs bucket/lrs"),
)
@click.argument(
    "local_dir",
    metavar="DATASET",
    type=LocalDir(exists=True, hint="DATASET is the local dataset to upload; the target URL comes second"),
)
@click.argument("url")
@click.option(
    "--create",
    is_flag=True,
    default=False,
    show_default=True,
    help="Create the bucket first if it does not exist.",
)
@endpoint_url_option(
    expose=True,
    help="The S3-compatible endpoint of an s3:// URL (the same as AWS_ENDPOINT_URL, which it overrides), "
    "or the Hub endpoint of an hf:// target.",
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=8, show_default=True, help="Uploads in flight at once."
)
@dry_run_option("what would be uploaded")
@quiet_option
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
    fsspec URL outside DATASET. A file already there is skipped only on proof of the same content (the
    store's hash, a local file's sha256, or the sha256 the published index lists), so rerunning an
    interrupted push uploads only the rest, and a push of another version replaces every changed file.
    """
    set_interrupt_hint(lambda: RERUN_TO_RESUME)
    _one_line_per_hub_warning()
    summary = push(
        local_dir,
        url,
        workers=workers,
        create=create,
        endpoint_url=endpoint_url,
        dry_run=dry_run,
        quiet=quiet_requested(quiet),
    )
    if dry_run:
        for rel in summary.uploaded:
            click.echo(f"upload {printable(rel)}")
        for rel in summary.skipped:
            click.echo(f"skip   {printable(rel)}")
    click.echo(summary.describe())


def _one_line_per_hub_warning() -> None:
    """One warning line per retry of huggingface_hub's own retry loop.

    The hub logs through a handler of its own and propagates to the root logger, where `lrs` has one too,
    so every line came out twice; and it logs each retry as two lines (the error, then "Retrying in").
    Keep lrs's handler (it names the logger) and fold each pair into one line.
    """
    if logging.getLogger().handlers:
        hub = logging.getLogger("huggingface_hub")
        for handler in list(hub.handlers):
            if type(handler) is logging.StreamHandler:
                hub.removeHandler(handler)
    http_log = logging.getLogger("huggingface_hub.utils._http")
    if not any(isinstance(f, _FoldRetries) for f in http_log.filters):
        http_log.addFilter(_FoldRetries())


class _FoldRetries(logging.Filter):
    """Holds the hub's "... thrown while requesting ..." line and prints it with the next "Retrying in"."""

    def __init__(self) -> None:
        super().__init__()
        self._held: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if " thrown while requesting " in message:
            self._held = message
            return False
        if message.startswith("Retrying in") and self._held is not None:
            record.msg, record.args = f"{self._held}; {message[0].lower()}{message[1:]}", None
            self._held = None
        return True
