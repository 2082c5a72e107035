"""`lrs cache --cache-dir DIR [--clean]`: what a node cache holds, per dataset, and emptying it
(`cache.cache_contents`, `cache.clean_cache`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from cache import cache_contents, clean_cache
from cache.progress import human_bytes
from reshard.cli.base import examples, handle_errors, json_option
from reshard.cli.types import ByteSize, LocalDir


@click.command(
    "cache",
    epilog=examples(
        "lrs sample v3 --num-episodes 4",
        "lrs reshard v3 --out lrs",
        "lrs prewarm lrs --cache-dir lrs-cache",
        "lrs cache --cache-dir lrs-cache --clean",
    ),
)
@click.option(
    "--cache-dir",
    required=True,
    type=LocalDir(exists=True, hint="a node cache is a local directory"),
    help="The node cache directory (`lrs prewarm --cache-dir`, `EpisodeStream(cache_dir=...)`).",
)
@click.option(
    "--clean",
    is_flag=True,
    help="Evict the least recently used files down to --keep; files in use or being written stay.",
)
@click.option(
    "--keep",
    "keep_bytes",
    type=ByteSize(),
    default=None,
    help="With --clean: the bytes to keep, e.g. 100GiB [default: none: every file not in use goes].",
)
@json_option
@handle_errors
def cache_cmd(cache_dir: Path, clean: bool, keep_bytes: int | None, as_json: bool) -> None:
    """List what a node cache holds, per dataset, or with --clean empty it, safely beside running jobs.

    Each dataset is a folder named by its fingerprint (of its index). A clean goes through the cache's
    ledger as every reader does: a file a stream holds open or a download is writing is never deleted.
    """
    if keep_bytes is not None and not clean:
        raise click.UsageError("--keep goes with --clean: the bytes a clean keeps.")
    keep = keep_bytes or 0
    evicted = clean_cache(cache_dir, keep_bytes=keep) if clean else None
    contents = cache_contents(cache_dir)
    if as_json:
        report = dataclasses.asdict(contents)
        if evicted is not None:
            report["evicted"] = dataclasses.asdict(evicted)
        click.echo(json.dumps(report, indent=2))
        return
    for dataset in contents.datasets:
        click.echo(f"{dataset.fingerprint}  {dataset.files} files  {human_bytes(dataset.bytes)}")
    line = f"{contents.root}: {len(contents.datasets)} datasets, {human_bytes(contents.total)}"
    if contents.reserved:
        line += f" ({human_bytes(contents.reserved)} reserved by downloads in flight)"
    if evicted is not None:
        line += f"; evicted {evicted.count} files ({human_bytes(evicted.bytes)})"
        if not evicted.fits:
            line += f", the rest in use or being written (over --keep {human_bytes(keep)})"
    click.echo(line + ".")
