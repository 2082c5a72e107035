"""`lrs sample`, `lrs describe` and `lrs demo`."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import click
from tqdm import tqdm

from reshard.cli import cli, handle_errors
from reshard.sample import ENCODERS, SampleSpec, write_sample
from reshard.source import describe, open_source, validate


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--episodes",
    type=click.IntRange(1),
    default=SampleSpec.episodes,
    show_default=True,
    help="Number of episodes.",
)
@click.option(
    "--min-length",
    type=click.IntRange(1),
    default=SampleSpec.min_length,
    show_default=True,
    help="Shortest episode, in frames.",
)
@click.option(
    "--max-length",
    type=click.IntRange(1),
    default=SampleSpec.max_length,
    show_default=True,
    help="Longest episode, in frames.",
)
@click.option(
    "--cameras",
    type=click.IntRange(0),
    default=SampleSpec.cameras,
    show_default=True,
    help="Number of video cameras.",
)
@click.option(
    "--height",
    type=click.IntRange(48),
    default=SampleSpec.height,
    show_default=True,
    help="Frame height in pixels (even).",
)
@click.option(
    "--width",
    type=click.IntRange(64),
    default=SampleSpec.width,
    show_default=True,
    help="Frame width in pixels (even).",
)
@click.option(
    "--fps", type=click.IntRange(1), default=SampleSpec.fps, show_default=True, help="Frames per second."
)
@click.option(
    "--tasks",
    type=click.IntRange(1),
    default=SampleSpec.tasks,
    show_default=True,
    help="Number of distinct task strings.",
)
@click.option(
    "--codec",
    type=click.Choice(sorted(ENCODERS)),
    default=SampleSpec.codec,
    show_default=True,
    help="Video codec (lerobot's default is AV1).",
)
@click.option(
    "--gop", type=click.IntRange(1), default=SampleSpec.gop, show_default=True, help="Keyframe interval."
)
@click.option(
    "--episodes-per-data-file",
    type=click.IntRange(1),
    default=SampleSpec.episodes_per_data_file,
    show_default=True,
    help="Episodes packed into one data parquet file.",
)
@click.option(
    "--episodes-per-video-file",
    type=click.IntRange(1),
    default=SampleSpec.episodes_per_video_file,
    show_default=True,
    help="Episodes concatenated into one MP4 per camera.",
)
@click.option(
    "--converted",
    is_flag=True,
    help="Write data row groups spanning many episodes, as datasets converted from v2.1 have.",
)
@click.option(
    "--unaligned",
    is_flag=True,
    help="Encode each video file as one stream, so episode starts are not keyframe aligned.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@handle_errors
def sample(directory: Path, quiet: bool, unaligned: bool, **options: object) -> None:
    """Write a synthetic LeRobot v3.0 dataset, the way lerobot's recorder does.

    Frames carry their episode, frame and camera index as visible blocks, so tests and you can check
    that a loader decoded the right frame (reshard.sample.read_frame_id).
    """
    spec = SampleSpec(keyframe_aligned=not unaligned, **options)  # type: ignore[arg-type]
    with tqdm(total=spec.episodes, unit="ep", desc="sample", disable=quiet) as bar:
        write_sample(directory, spec, progress=bar.update)
    click.echo(f"wrote {spec.episodes} episodes, {spec.cameras} cameras ({spec.codec}) to {directory}")


@cli.command(name="describe")
@click.argument("source")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--full", is_flag=True, help="Also read every data file's index columns and every video header."
)
@handle_errors
def describe_cmd(source: str, as_json: bool, full: bool) -> None:
    """Open a v3 dataset (path, URL or Hub repo id), validate it, and summarise it."""
    src = open_source(source)
    if full:
        validate(src)
    summary = describe(src)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    for key, value in summary.items():
        click.echo(f"{key:>18}: {value}")


@cli.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to put the demo's files (default: a temporary directory, removed afterwards).",
)
@click.option("--episodes", type=click.IntRange(2), default=12, show_default=True, help="Sample size.")
@handle_errors
def demo(workdir: Path | None, episodes: int) -> None:
    """Run the main job on a freshly generated sample dataset and print a short summary."""
    own = workdir is None
    root = Path(tempfile.mkdtemp(prefix="lrs-demo-")) if own else workdir
    try:
        _run_demo(root, episodes)
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)


def _run_demo(root: Path, episodes: int) -> None:
    src_dir = root / "source"
    if src_dir.exists():
        shutil.rmtree(src_dir)
    t0 = time.perf_counter()
    write_sample(src_dir, SampleSpec(episodes=episodes, cameras=2, height=96, width=128))
    t_sample = time.perf_counter() - t0
    source = open_source(str(src_dir))
    validate(source)
    summary = describe(source)
    click.echo(
        f"sample    {summary['episodes']} episodes, {summary['frames']} frames, "
        f"{len(summary['cameras'])} cameras ({', '.join(set(summary['cameras'].values()))}) "
        f"in {t_sample:.1f} s -> {src_dir}"
    )
    click.echo(
        f"source    {summary['data_files']} data files, {summary['video_files']} video files, "
        f"episode length {summary['episode_length']['min']}..{summary['episode_length']['max']}: valid v3.0"
    )
