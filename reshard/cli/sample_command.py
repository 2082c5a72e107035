"""`lrs sample DIR`: write a synthetic v3 dataset (`reshard.demo.sample.write_sample`)."""

from __future__ import annotations

from pathlib import Path

import click

from cache.progress import progress_bar
from reshard.cli.base import (
    F,
    examples,
    handle_errors,
    quiet_option,
    quiet_requested,
)
from reshard.cli.types import LocalDir
from reshard.demo import PIX_FMTS, SampleSpec, write_sample
from reshard.video import ENCODERS

# `lrs sample`'s options for SampleSpec fields: (flag, field, type, help); each defaults to the field's.
_SPEC_OPTIONS: list[tuple[str, str, click.ParamType, str]] = [
    ("--num-episodes", "episodes", click.IntRange(1), "How many episodes to write."),
    ("--min-length", "min_length", click.IntRange(1), "Shortest episode, in frames."),
    ("--max-length", "max_length", click.IntRange(1), "Longest episode, in frames."),
    ("--cameras", "cameras", click.IntRange(0), "Number of video cameras."),
    (
        "--image-cameras",
        "image_cameras",
        click.IntRange(0),
        "Number of cameras stored as images (dtype: image): PNG bytes in the data files, no video.",
    ),
    (
        "--depth-cameras",
        "depth_cameras",
        click.IntRange(0),
        "Number of depth cameras, written as lerobot does: 12-bit log-quantized depth, lossless HEVC gray12le.",
    ),
    ("--height", "height", click.IntRange(48), "Frame height in pixels (even, odd only in yuv444p)."),
    ("--width", "width", click.IntRange(64), "Frame width in pixels (even, odd only in yuv444p)."),
    ("--fps", "fps", click.IntRange(1), "Frames per second."),
    ("--tasks", "tasks", click.IntRange(1), "Number of distinct task strings."),
    ("--codec", "codec", click.Choice(sorted(ENCODERS)), "Video codec (lerobot's default is AV1)."),
    ("--gop", "gop", click.IntRange(1), "Keyframe interval."),
    (
        "--pix-fmt",
        "pix_fmt",
        click.Choice(PIX_FMTS),
        "Cameras' pixel format: lerobot's yuv420p, or as third-party writers do, full-range yuvj420p or "
        "yuv444p (odd sizes allowed); the last two with --codec h264 or hevc.",
    ),
    (
        "--episodes-per-data-file",
        "episodes_per_data_file",
        click.IntRange(1),
        "Episodes packed into one data parquet file.",
    ),
    (
        "--episodes-per-video-file",
        "episodes_per_video_file",
        click.IntRange(1),
        "Episodes concatenated into one MP4 per camera.",
    ),
]


def _spec_options(fn: F) -> F:
    for flag, name, kind, text in reversed(_SPEC_OPTIONS):
        fn = click.option(
            flag, name, type=kind, default=getattr(SampleSpec, name), show_default=True, help=text
        )(fn)
    return fn


@click.command(epilog=examples("lrs sample v3 --num-episodes 4"))
@click.argument(
    "directory", type=LocalDir(hint="write it locally, then upload it with `lrs push DATASET URL`")
)
@_spec_options
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
@click.option(
    "--audio", is_flag=True, help="Give the camera videos an AAC audio track, as some recorders do."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@quiet_option
@handle_errors
def sample(directory: Path, quiet: bool, unaligned: bool, **options: object) -> None:
    """Write a synthetic LeRobot v3.0 dataset, the way lerobot's recorder does.

    Frames carry their episode, frame and camera index as visible blocks, so tests and you can check
    that a loader decoded the right frame (reshard.demo.frame_marks.read_frame_id).
    """
    try:
        spec = SampleSpec(keyframe_aligned=not unaligned, **options)  # type: ignore[arg-type]
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise click.UsageError(f"Invalid DIRECTORY ({directory}). Expected a new or empty directory.")
    with progress_bar(total=spec.episodes, unit="ep", desc="sample", disable=quiet_requested(quiet)) as bar:
        write_sample(directory, spec, progress=bar.update)
    depth = f" and {spec.depth_cameras} depth cameras (hevc gray12le)" if spec.depth_cameras else ""
    images = f" and {spec.image_cameras} cameras stored as PNG images" if spec.image_cameras else ""
    click.echo(
        f"wrote {spec.episodes} episodes, {spec.cameras} cameras ({spec.codec}){depth}{images} to {directory}"
    )
