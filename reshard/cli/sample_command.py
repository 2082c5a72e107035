"""`lrs sample`, `lrs describe` and `lrs demo`."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import click

from cache.progress import progress_bar
from reshard.cli.base import (
    EXIT_CHECK_FAILED,
    F,
    LocalDir,
    handle_errors,
    json_option,
    quiet_option,
    quiet_requested,
)
from reshard.demo.sample import write_sample
from reshard.demo.sample_spec import PIX_FMTS, SampleSpec
from reshard.source import describe, open_source
from reshard.source_checks import validate
from reshard.video.encode import ENCODERS

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


@click.command()
@click.argument("directory", type=LocalDir(hint="write it locally, then upload it with `lrs push DIR URL`"))
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


@click.command(name="describe")
@click.argument("source")
@json_option
@click.option(
    "--full",
    is_flag=True,
    help="Also check every data file's index columns and every video header, and say so.",
)
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
    """`describe`'s summary as aligned lines for people."""
    from reshard.inspect import plural

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
    return "\n".join(lines)


@click.command()
@click.option(
    "--workdir",
    type=LocalDir(hint="the demo writes locally (its bucket is a local file:// one)"),
    default=None,
    help="Where the demo's files go: DIR when new, empty or an earlier demo's (whose files it replaces), "
    "else a new folder in DIR; nothing else of DIR is touched [default: a temporary directory].",
)
@click.option(
    "--num-episodes",
    "episodes",
    type=click.IntRange(2),
    default=12,
    show_default=True,
    help="Episodes of the sample.",
)
@click.option("--keep", is_flag=True, help="Keep the sample, output, bucket and cache afterwards.")
@handle_errors
def demo(workdir: Path | None, episodes: int, keep: bool) -> None:
    """Run the whole pipeline on a generated sample, check it, and print a summary table.

    sample -> reshard (H.265) -> verify -> push to a local bucket -> prewarm a cache -> stream one epoch
    with 2 DataLoader workers (every frame exactly once) -> resume mid-epoch (the same continuation).
    Exits 1 when a check fails, keeping the files for a look.
    """
    from reshard.demo.pipeline import DemoCheckError, DemoConfig, claim_workdir, render_table, run_demo

    own = workdir is None
    root = claim_workdir(Path(tempfile.mkdtemp(prefix="lrs-demo-")) if workdir is None else workdir)
    beside = (
        "" if own or root == workdir else f" ({workdir} holds files of yours: the demo uses a new folder)"
    )
    click.echo(f"lrs demo in {root}{beside}")
    try:
        result = run_demo(root, DemoConfig(episodes=episodes), echo=click.echo)
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
    from reshard.demo.pipeline import cleanup_workdir

    if own:
        shutil.rmtree(root, ignore_errors=True)
    else:
        cleanup_workdir(root)
