"""`lrs train [lrs options] [lerobot-train flags]`: lerobot's trainer over an `EpisodeStream`.

lrs's own options are dashed (`--cache-dir`); every other argument is lerobot-train's (`--policy.type=act`,
`--dataset.repo_id=URL`) and goes to lerobot's own parser. lerobot is imported when the command runs
(`reshard.train.hooks`), so `lrs --help` works without it.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from reshard.cli.base import cache_dir_option, endpoint_url_option, handle_errors, set_interrupt_hint
from reshard.cli.types import ByteSize, InvalidValue

# The reader's largest frame side (`reader.plan.spec.MAX_FRAME_SIDE`, internal to the reader; a test holds
# the two equal): a bigger --resize is refused here, in one line, before lerobot is imported.
MAX_SIDE = 8192


@click.command(
    "train",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    epilog="lerobot's flags: `lerobot-train --help`; each sub-config's: `lerobot-train --policy.type=act --help`.",
)
@cache_dir_option(
    "The node cache directory, shared by every rank and worker of the node (default: a temporary one for "
    "remote datasets; local ones are read in place)."
)
@click.option("--cache-max-bytes", type=ByteSize(), help="The cache budget: 200GiB, 200GB, 500M or bytes.")
@click.option(
    "--episode-pool-size",
    type=click.IntRange(min=1),
    help="Episodes each consumer mixes frames from (default max(16, 1.25 x batch_size)).",
)
@click.option(
    "--prefetch-episodes", type=click.IntRange(min=0), help="Episodes fetched ahead of use (default 8)."
)
@click.option(
    "--decode-threads", type=click.IntRange(min=0), help="Threads per consumer decoding ahead (default 2)."
)
@click.option(
    "--resize",
    metavar="WxH",
    callback=lambda _ctx, _param, value: _frame_size(value),
    help="Colour cameras resized at decode to this size, e.g. 224x224 (torchvision's antialiased bilinear "
    "Resize on the uint8 frame); the policy's input shapes follow, depth cameras keep their size. For a "
    "dataset always trained at one size, `lrs reshard --resize` stores it so: fewer bytes, less decode "
    "[default: the stored size].",
)
@click.argument("lerobot_args", nargs=-1, type=click.UNPROCESSED)
@endpoint_url_option()
@handle_errors
def train_cmd(
    cache_dir: Path | None,
    cache_max_bytes: int | None,
    episode_pool_size: int | None,
    prefetch_episodes: int | None,
    decode_threads: int | None,
    resize: tuple[int, int] | None,
    lerobot_args: tuple[str, ...],
) -> None:
    """Train with lerobot-train on an lrs/1 (or v3) dataset streamed by EpisodeStream.

    Takes lerobot-train's flags; --dataset.repo_id (or --dataset.root) may be any lrs URL: a path,
    hf://buckets/..., hf://datasets/..., s3://..., http(s)://... . Runs lerobot's own training loop
    (policy, processors, optimizer, checkpoints, --resume=true); only the dataset and its DataLoader are
    lrs's. Needs lerobot 0.6 and accelerate in this environment. Under `accelerate launch` or `torchrun`
    each rank reads its own share.
    """
    from reshard.train import StreamOptions, interrupted_hint, run

    output_dirs: list[Path] = []
    set_interrupt_hint(lambda: interrupted_hint(output_dirs[-1] if output_dirs else None))

    options = StreamOptions(
        cache_dir=str(cache_dir) if cache_dir is not None else None,
        cache_max_bytes=cache_max_bytes,
        episode_pool_size=episode_pool_size,
        prefetch_episodes=prefetch_episodes,
        decode_threads=decode_threads,
        resize=resize,
    )
    run(list(lerobot_args), options, on_output_dir=output_dirs.append)


def _frame_size(value: str | None) -> tuple[int, int] | None:
    """`WxH` as the stream's `resize`, (height, width)."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*([0-9]+)x([0-9]+)\s*", value.lower())
    if match is None or not all(0 < int(side) <= MAX_SIDE for side in match.groups()):
        raise InvalidValue(
            f"Invalid --resize ({value}). Expected WIDTHxHEIGHT in pixels, each 1..{MAX_SIDE}, e.g. 224x224."
        )
    return int(match.group(2)), int(match.group(1))
