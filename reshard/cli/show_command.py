"""`lrs show DATASET --out FILE.png`: a picture of one episode, read as training reads it."""

from __future__ import annotations

from pathlib import Path

import click

from reshard.cli.base import cache_dir_option, endpoint_url_option, examples, handle_errors
from reshard.cli.types import InvalidValue


def _png_path(ctx: click.Context, param: click.Parameter, value: str) -> Path:
    """`--out` is a local file ending in .png whose directory exists (checked before anything is read)."""
    path = Path(value)
    if "://" in value or path.suffix.lower() != ".png":
        raise InvalidValue(f"Invalid --out ({value}). Expected a local file path ending in .png.")
    if not path.parent.is_dir():
        raise InvalidValue(f"Invalid --out ({value}). Expected a file in an existing directory.")
    return path


@click.command(
    name="show",
    epilog=examples("lrs sample v3 --num-episodes 4", "lrs show v3 --episode 1 --out episode-1.png"),
)
@click.argument("dataset")
@click.option(
    "--episode", type=click.IntRange(min=0), default=0, show_default=True, help="The episode index to draw."
)
@click.option(
    "--frames",
    type=click.IntRange(1, 64),
    default=8,
    show_default=True,
    help="Frames per camera strip, evenly spaced from the first frame to the last.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    callback=_png_path,
    help="The PNG to write (replaced atomically if it exists).",
)
@cache_dir_option(
    "The node cache directory for a remote dataset (default: a temporary one; local ones are read in place)."
)
@endpoint_url_option()
@handle_errors
def show_cmd(dataset: str, episode: int, frames: int, out: Path, cache_dir: Path | None) -> None:
    """Draw one episode into a PNG: camera strips, state and action curves, the task.

    DATASET is any path or URL lrs reads (lrs/1 or plain v3). The episode is read through
    `EpisodeStream` as a training run reads it (uint8 frames, depth in millimetres), so the picture is
    what a model is fed. Each camera gets a strip of evenly spaced frames (depth as a colour map, dark
    near and bright far); each numeric feature (observation.state, action, ...) a panel with one curve
    per dimension over time, named from meta/info.json, with the strips' frames marked. The whole
    episode is decoded, one pass in order.
    """
    from reshard.preview import read_episode_view, render, write_png

    view = read_episode_view(dataset, episode, frames=frames, cache_dir=cache_dir)
    image = render(view, tiles=frames)
    write_png(image, out)
    cameras = len(view.cameras)
    click.echo(
        f"wrote {out} ({image.width}x{image.height}): episode {episode}, {view.length} frames, "
        f"{cameras} camera{'s' if cameras != 1 else ''}, {len(view.curves)} curve panels"
    )
