"""`lrs reshard DATASET --out DIR`: the click layer over `reshard.job.reshard`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cache.arguments import format_index_list
from cache.redaction import redact
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
from reshard.cli.types import LocalDir, PartType
from reshard.job import DEFAULT_EPISODES_PER_FILE, ReshardOptions, estimate_reshard, reshard, slurm_part
from reshard.source import DROPPED_JSON, plural
from reshard.video import DEFAULT_RESIZE_FILTER, RESIZE_FILTERS, VIDEO_MODES


@click.command(
    name="reshard", epilog=examples("lrs sample v3 --num-episodes 4", "lrs reshard v3 --out lrs --video h264")
)
@click.argument("src", metavar="DATASET")
@click.option(
    "--out",
    required=True,
    type=LocalDir(
        hint="reshard into a local --out and add --push-bucket URL (or run `lrs push OUT URL` after)"
    ),
    help="Output directory (local).",
)
@click.option(
    "--video",
    type=click.Choice(VIDEO_MODES),
    default="copy",
    show_default=True,
    help="copy: lossless split (episodes not starting on a keyframe are re-encoded); hevc/h264: re-encode all but depth cameras, which stay lossless at their bit depth.",
)
@click.option(
    "--gop",
    type=click.IntRange(1),
    help="Keyframe interval of re-encodes [default: source's video.g, else 2].",
)
@click.option(
    "--crf",
    type=click.IntRange(0, 63),
    help="Quality of re-encodes, lower is better: 0-51 for hevc and h264 [default: 21 and 18]; 0-63 for the "
    "AV1 episodes --video copy re-encodes [default: 30].",
)
@click.option("--preset", help="Encoder preset of re-encodes [default: the codec's].")
@click.option(
    "--tune",
    help="x264/x265 --tune of re-encodes (hevc/h264 only), e.g. fastdecode: streams cheaper to decode on "
    "CPUs (h264: CAVLC, no deblocking; hevc: no deblocking, no SAO), at more bytes for the same quality; "
    "the --gop default stays (random frames, as LeRobotDataset reads) [default: none].",
)
@click.option(
    "--resize",
    metavar="WxH",
    help="Re-encode (hevc/h264 only) at this frame size, e.g. 224x224: the size the policy sees, in "
    "fewer bytes and less decode time; info.json's shapes follow. Depth cameras keep their size "
    "[default: the source's].",
)
@click.option(
    "--resize-filter",
    type=click.Choice(RESIZE_FILTERS),
    default=DEFAULT_RESIZE_FILTER,
    show_default=True,
    help="swscale filter of --resize: area averages (least aliasing when shrinking); bilinear is what "
    "lerobot's resize processor and diffusion policy use (torchvision, antialiased); bicubic is sharper.",
)
@click.option(
    "--data-file-mb",
    type=click.FloatRange(0, min_open=True),
    default=100.0,
    show_default=True,
    help="Size bound of an output data file, in MiB.",
)
@click.option(
    "--episodes-per-data-file",
    type=click.IntRange(1),
    default=DEFAULT_EPISODES_PER_FILE,
    show_default=True,
    help="Most episodes (row groups) of an output data file; bounds the memory of writing and reading its footer.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    help="Processes running tasks [default: for a re-encode (hevc/h264) of more than a few seconds, one "
    "per CPU this job may use (its affinity, cgroup quota or SLURM_CPUS_PER_TASK), each encoder on one "
    "thread; else 1].",
)
@click.option(
    "--part",
    type=PartType(),
    help="Run only part I/N of the tasks, 0-based (default from SLURM_ARRAY_TASK_ID/COUNT); then --finalize.",
)
@click.option("--finalize", is_flag=True, help="Only write meta and publish, once every part is done.")
@click.option(
    "--work-dir",
    type=LocalDir(hint="the work directory is local, on the filesystem of --out"),
    help="Work directory (same filesystem as --out) [default: <out parent>/.<out name>.lrs-work].",
)
@click.option(
    "--skip-defective",
    is_flag=True,
    help="Leave out the episodes `lrs doctor` finds defective (refused otherwise) and renumber the rest; "
    "meta/lrs/dropped.json records which and why.",
)
@click.option(
    "--skip-episodes",
    default="",
    metavar="LIST",
    help="Source episodes to leave out, as 3,7,10-12; the rest are renumbered.",
)
@dry_run_option(
    "what the job would do (episodes, frames, bytes) and, for a re-encode, how long it would take here "
    "from a calibration encode of a few frames per camera"
)
@click.option("--push-bucket", "push_url", help="After finishing, push the output to this URL (lrs push).")
@click.option("--push-create", is_flag=True, help="With --push-bucket: create the bucket if missing.")
@endpoint_url_option(
    expose=True,
    help="The S3-compatible endpoint of an s3:// source or --push-bucket (the same as AWS_ENDPOINT_URL, "
    "which it overrides), or the Hub endpoint of an hf:// --push-bucket.",
)
@quiet_option
@handle_errors
def reshard_cmd(
    src: str,
    out: Path,
    video: str,
    gop: int | None,
    crf: int | None,
    preset: str | None,
    tune: str | None,
    resize: str | None,
    resize_filter: str,
    data_file_mb: float,
    episodes_per_data_file: int,
    workers: int | None,
    part: tuple[int, int] | None,
    finalize: bool,
    work_dir: Path | None,
    skip_defective: bool,
    skip_episodes: str,
    dry_run: bool,
    push_url: str | None,
    push_create: bool,
    endpoint_url: str | None,
    quiet: bool,
) -> None:
    """Rewrite a v3 dataset (path or URL) into the lrs/1 layout in --out; rerun to resume.

    One row group per episode, one MP4 per episode and camera, and an index in meta/lrs/. Runs every
    task then finalizes; with --part I/N (or in a SLURM array) runs one part, then `--finalize` once.
    """
    set_interrupt_hint(lambda: RERUN_TO_RESUME)
    if part is not None and finalize:
        raise click.UsageError("--part and --finalize are exclusive: run the parts, then --finalize once.")
    if part is None and not finalize:
        part = slurm_part()
    if push_url and part is not None:
        raise click.UsageError("--push-bucket needs a finished output: use it with --finalize, not --part.")
    try:
        options = ReshardOptions(
            video=video,  # type: ignore[arg-type]
            gop=gop,
            crf=crf,
            preset=preset,
            tune=tune,
            resize=resize,
            resize_filter=resize_filter,
            data_file_mb=data_file_mb,
            episodes_per_data_file=episodes_per_data_file,
            skip_defective=skip_defective,
            skip_episodes=skip_episodes,
        )
    except ValueError as exc:  # checked before any work, so nothing is left behind
        raise click.UsageError(redact(str(exc))) from exc
    quiet = quiet_requested(quiet)
    if dry_run:
        if finalize:
            raise click.UsageError("--dry-run estimates the tasks: it has nothing to say of --finalize.")
        estimate = estimate_reshard(
            src, out, options=options, workers=workers, part=part, work_dir=work_dir, quiet=quiet
        )
        click.echo("\n".join(estimate.lines()))
        return
    result = reshard(
        src,
        out,
        options=options,
        workers=workers,
        part=part,
        finalize_only=finalize,
        work_dir=work_dir,
        quiet=quiet,
        on_estimate=None if quiet else lambda estimate: click.echo("\n".join(estimate.lines()), err=True),
    )
    if result.already_complete:
        click.echo(f"{out} is already a complete reshard of {redact(src)} with these options.")
    elif result.part is not None:
        index, count = result.part
        click.echo(
            f"part {index}/{count} done ({plural(result.tasks_run, 'task')}) in {result.seconds:.1f} s; "
            "run --finalize once every part is done."
        )
    else:
        click.echo(f"resharded {result.episodes} episodes into {out} in {result.seconds:.1f} s.")
    if result.dropped and result.part is None:
        click.echo(
            f"left out {len(result.dropped)} source episodes ({format_index_list([d.episode for d in result.dropped])}) "
            f"and renumbered the rest; {out / DROPPED_JSON} says why."
        )
    if result.finalized and video != "copy":
        depth = _depth_keys(out)
        if depth:
            click.echo(
                f"depth cameras {', '.join(depth)} kept as they were (lossless, at their bit depth), "
                f"not re-encoded to {video}."
            )
    if result.reencoded:
        click.echo(
            f"warning: {len(result.reencoded)} episode videos did not start on a keyframe and were re-encoded "
            "(listed in meta/lrs/layout.json), e.g. episode "
            f"{result.reencoded[0][0]} of {result.reencoded[0][1]}.",
            err=True,
        )
    if push_url and result.finalized:
        from reshard.push import push  # the upload stack is imported only when pushing

        click.echo(push(out, push_url, create=push_create, endpoint_url=endpoint_url, quiet=quiet).describe())


def _depth_keys(out: Path) -> list[str]:

    from reader.decode import is_depth

    features = json.loads((out / "meta/info.json").read_text()).get("features", {})
    return [k for k, f in features.items() if f.get("dtype") == "video" and is_depth(f)]
