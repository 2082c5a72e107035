"""`lrs demo`: the whole pipeline on a generated sample, each step timed and each claim checked.

sample (v3, AV1) -> reshard (lrs/1, H.265) -> verify against the sample -> push to a local bucket
(`file://`) -> prewarm a node cache from the bucket -> stream one epoch from the bucket with that cache,
`EpisodeStream` and a multi-worker DataLoader -> check that every frame came exactly once and that each
decoded frame shows its own (episode, frame, camera) marker -> resume a fresh stream and DataLoader from
the middle of the epoch -> check that the continuation equals the rest of the uninterrupted run.

Every step is a plain function returning a frozen record, so tests can run the flow (or a step) without
the command line. A failed check raises `DemoCheckError`; `lrs demo` then exits with status 1. The
settings are `reshard.demo.config`, the training loop `reshard.demo.training_loop`, the checks (pure)
`reshard.demo.invariants`.

The bucket is a `file://` URL, which lrs treats as remote storage (`cache.Remote.reads_in_place`): prewarm
copies its files into the node cache and the reader then finds them there, exactly as with a real bucket.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cache.progress import human_bytes, plural
from reshard.demo.config import DemoCheckError, DemoConfig
from reshard.demo.invariants import check_exactly_once, check_frames_shown, check_prewarm_served, check_resume
from reshard.demo.sample import write_sample
from reshard.demo.training_loop import StreamRun, demo_spec, stream_epoch
from reshard.errors import LrsError
from reshard.job.execute import ReshardOptions
from reshard.job.run import reshard
from reshard.prewarm.fill import PrewarmSummary, prewarm
from reshard.push.publish import push
from reshard.source.model import open_source
from reshard.verify import verify

Echo = Callable[[str], None]
# The demo's own subdirectories of the work directory: removed before a run, and after it unless kept.
SUBDIRS = ("source", "lrs1", "bucket", "cache")
# The file that marks a directory as the demo's: only there does the demo remove anything.
MARKER = ".lrs-demo"
_WORK = ".lrs1.lrs-work"


class DemoWorkdirError(LrsError):
    """The demo was asked to clear a directory it did not make."""


@dataclass(frozen=True)
class DatasetStep:
    """A dataset the demo wrote (the sample, the reshard output) and how long writing it took."""

    path: Path
    files: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class VerifyStep:
    """`lrs verify --against` of the output: the check classes passed and the re-encode quality."""

    checks: tuple[str, ...]
    videos_reencoded: int
    worst_psnr_db: float | None
    seconds: float


@dataclass(frozen=True)
class PushStep:
    """The upload to the bucket."""

    url: str
    files: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class DemoResult:
    """Everything the demo measured; `render_table` prints it."""

    config: DemoConfig
    frames: int
    source: DatasetStep
    resharded: DatasetStep
    verified: VerifyStep
    pushed: PushStep
    prewarmed: PrewarmSummary
    epoch: StreamRun
    resumed: StreamRun
    seconds: float


# --- the steps ---------------------------------------------------------------------------------------


def make_sample(root: Path, config: DemoConfig) -> DatasetStep:
    """Write the v3 sample (AV1, lerobot's layout) to `root`."""
    began = time.perf_counter()
    write_sample(root, config.sample)
    return _dataset_step(root, began)


def reshard_sample(src: Path, out: Path, config: DemoConfig) -> DatasetStep:
    """Reshard the sample into lrs/1 in `out` (videos as `config.video`), without progress bars."""
    began = time.perf_counter()
    reshard(str(src), out, options=ReshardOptions(video=config.video), quiet=True)
    return _dataset_step(out, began)


def verify_output(out: Path, src: Path) -> VerifyStep:
    """Run every lrs/1 check on `out` and compare it with `src`.

    Raises:
        DemoCheckError: a check failed (the message is verify's report).
    """
    began = time.perf_counter()
    report = verify(str(out), against=str(src))
    if not report.ok:
        raise DemoCheckError(f"Invalid resharded dataset ({out}):\n{report.describe()}")
    reencoded = [v for v in report.videos if v.reencoded]
    return VerifyStep(
        checks=report.passed,
        videos_reencoded=len(reencoded),
        worst_psnr_db=min((v.psnr_min_db for v in reencoded), default=None),
        seconds=time.perf_counter() - began,
    )


def push_to_bucket(out: Path, url: str) -> PushStep:
    """Upload the lrs/1 dataset to the bucket `url` (created if missing), without a progress bar."""
    summary = push(out, url, create=True, quiet=True)
    files = summary.uploaded + summary.skipped
    return PushStep(
        url=summary.url,
        files=len(files),
        bytes=summary.uploaded_bytes + summary.skipped_bytes,
        seconds=summary.seconds,
    )


def prewarm_cache(url: str, cache_dir: Path, config: DemoConfig) -> PrewarmSummary:
    """Fill `cache_dir` with what the demo's stream reads in its epoch (its own spec, `demo_spec`).

    A `file://` bucket is copied into the cache like any remote one; a plain local path would be read in
    place (`PrewarmSummary.in_place`, nothing copied).
    """
    return prewarm(demo_spec(url, cache_dir, config), epoch=0, progress=False)


# --- what the checks expect --------------------------------------------------------------------------


def expected_frames(src: Path) -> dict[int, int]:
    """Episode index -> length, as the v3 source's metadata says."""
    return {e.episode_index: e.length for e in open_source(str(src)).episodes}


# --- the whole flow ----------------------------------------------------------------------------------


def run_demo(workdir: Path, config: DemoConfig | None = None, *, echo: Echo | None = None) -> DemoResult:
    """Run every step in `workdir` (see `claim_workdir`), printing a line per step.

    Args:
        workdir: where the sample, the output, the bucket and the cache go: `workdir` itself when it is
            new, empty or the demo's, else a new subdirectory of it.
        config: sizes and stream settings.
        echo: called with each progress line (default: print nothing).

    Returns:
        What every step measured.

    Raises:
        DemoCheckError: a check failed.
        LrsError: a step failed (bad input, I/O).
    """
    config = config or DemoConfig()
    say = echo or (lambda line: None)
    began = time.perf_counter()
    paths = prepare_workdir(claim_workdir(workdir))
    bucket_url = paths["bucket"].absolute().as_uri()
    source = make_sample(paths["source"], config)
    lengths = expected_frames(paths["source"])
    say(
        f"sample    {config.sample.episodes} episodes, {sum(lengths.values())} frames, {plural(config.sample.cameras, 'camera')} "
        f"{config.sample.height}x{config.sample.width} (AV1), {human_bytes(source.bytes)} ({source.seconds:.1f} s)"
    )
    resharded = reshard_sample(paths["source"], paths["lrs1"], config)
    say(
        f"reshard   lrs/1 with {config.video} video, {human_bytes(resharded.bytes)} ({resharded.seconds:.1f} s)"
    )
    verified = verify_output(paths["lrs1"], paths["source"])
    say(f"verify    {len(verified.checks)} checks passed against the sample ({verified.seconds:.1f} s)")
    pushed = push_to_bucket(paths["lrs1"], bucket_url)
    say(
        f"push      {pushed.files} files, {human_bytes(pushed.bytes)} to {pushed.url} ({pushed.seconds:.1f} s)"
    )
    prewarmed = prewarm_cache(bucket_url, paths["cache"], config)
    say(f"prewarm   {_prewarm_text(prewarmed)} ({prewarmed.seconds:.1f} s)")
    epoch, resumed = stream_and_check(bucket_url, paths["cache"], config, lengths, say)
    check_prewarm_served(prewarmed, epoch)
    return DemoResult(
        config=config,
        frames=sum(lengths.values()),
        source=source,
        resharded=resharded,
        verified=verified,
        pushed=pushed,
        prewarmed=prewarmed,
        epoch=epoch,
        resumed=resumed,
        seconds=time.perf_counter() - began,
    )


def stream_and_check(
    url: str, cache_dir: Path, config: DemoConfig, lengths: Mapping[int, int], say: Echo
) -> tuple[StreamRun, StreamRun]:
    """Stream one epoch and check it, then resume a fresh stream from its middle batch and check that.

    Returns:
        The uninterrupted epoch and the resumed continuation.

    Raises:
        DemoCheckError: a frame is missing, repeated or wrongly decoded, or the continuation differs.
    """
    epoch = stream_epoch(url, cache_dir, config)
    check_exactly_once(((s.episode, s.frame) for s in epoch.each()), lengths)
    check_frames_shown(epoch)
    say(
        f"stream    {epoch.samples} samples in {len(epoch.batches)} batches, {config.num_workers} workers: "
        f"every frame once, every decoded frame its own ({epoch.seconds:.1f} s)"
    )
    resumed = stream_epoch(url, cache_dir, config, start_batch=len(epoch.batches) // 2)
    check_resume(epoch, resumed)
    say(
        f"resume    from batch {resumed.start_batch} of {len(epoch.batches)}: the next {resumed.samples} "
        f"samples equal the uninterrupted run's, {resumed.stats.skipped} skipped by arithmetic ({resumed.seconds:.1f} s)"
    )
    return epoch, resumed


def claim_workdir(workdir: Path) -> Path:
    """The directory the demo writes into, marked as the demo's (`MARKER`), so that it never removes a
    file of the user's: `workdir` when it is new, empty or marked by an earlier demo; else (a directory
    that holds other files) a new subdirectory `lrs-demo-*` of it."""
    if (workdir / MARKER).is_file():
        return workdir
    made = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    root = workdir
    if any(workdir.iterdir()):
        root, made = Path(tempfile.mkdtemp(prefix="lrs-demo-", dir=workdir)), True
    (root / MARKER).write_text(json.dumps({"made_by": "lrs demo", "made_dir": made}) + "\n")
    return root


def prepare_workdir(root: Path) -> dict[str, Path]:
    """The demo's directories under `root` (a `claim_workdir` directory), each removed if a previous run
    left it."""
    _check_marked(root)
    paths = {name: root / name for name in SUBDIRS}
    for path in [*paths.values(), root / _WORK]:
        if path.exists():
            shutil.rmtree(path)
    return paths


def cleanup_workdir(root: Path) -> None:
    """Remove what the demo wrote under `root` (a `claim_workdir` directory), and `root` itself where the
    demo made it and nothing else is left in it."""
    _check_marked(root)
    try:
        made = bool(json.loads((root / MARKER).read_text()).get("made_dir"))
    except ValueError:
        made = False
    for name in (*SUBDIRS, _WORK):
        shutil.rmtree(root / name, ignore_errors=True)
    (root / MARKER).unlink()
    if made:
        with contextlib.suppress(OSError):
            root.rmdir()


def _check_marked(root: Path) -> None:
    if not (root / MARKER).is_file():
        raise DemoWorkdirError(
            f"Invalid demo directory ({root}): no {MARKER} file. Expected a directory the demo made "
            "(claim_workdir), so that it removes nothing of yours."
        )


def render_table(result: DemoResult) -> str:
    """The summary: sizes before and after, reshard time, reader speed, cache use, checks."""
    c, epoch, resumed = result.config, result.epoch, result.resumed
    cache = epoch.stats.cache
    ratio = result.resharded.bytes / result.source.bytes if result.source.bytes else float("nan")
    psnr = result.verified.worst_psnr_db
    rows = [
        ("source (v3, AV1)", f"{human_bytes(result.source.bytes)} in {result.source.files} files"),
        (
            f"lrs/1 ({c.video})",
            f"{human_bytes(result.resharded.bytes)} in {result.resharded.files} files ({ratio:.2f}x the source)",
        ),
        ("reshard time", f"{result.resharded.seconds:.1f} s"),
        (
            "verify",
            f"{len(result.verified.checks)} checks ok"
            + (f", worst re-encoded frame {psnr:.1f} dB PSNR" if psnr is not None else ""),
        ),
        (
            "push",
            f"{result.pushed.files} files, {human_bytes(result.pushed.bytes)} in {result.pushed.seconds:.1f} s",
        ),
        ("prewarm", f"{_prewarm_text(result.prewarmed)} ({result.prewarmed.seconds:.1f} s)"),
        ("samples/s", f"{epoch.samples_per_s:.0f} (after the first batch)"),
        ("first-batch latency", f"{epoch.first_batch_s:.2f} s (resumed: {resumed.first_batch_s:.2f} s)"),
        (
            "cache",
            f"{cache.hits} hits, {cache.misses} misses, {human_bytes(cache.bytes_fetched)} fetched while streaming"
            + (" (read in place)" if result.prewarmed.in_place else ""),
        ),
        ("exactly once", f"{epoch.samples} samples = {result.frames} frames, each once"),
        ("resume", f"at batch {resumed.start_batch}/{len(epoch.batches)}: continuation identical"),
        ("total time", f"{result.seconds:.1f} s"),
    ]
    title = (
        f"lrs demo: {c.sample.episodes} episodes x {plural(c.sample.cameras, 'camera')} "
        f"{c.sample.height}x{c.sample.width}, "
        f"batch {c.batch_size}, {c.num_workers} workers, pool {c.episode_pool_size}"
    )
    width = max(len(name) for name, _ in rows)
    rule = "-" * max(len(title), width + 2 + max(len(value) for _, value in rows))
    return "\n".join([title, rule, *(f"{name:<{width}}  {value}" for name, value in rows), rule])


# --- helpers -----------------------------------------------------------------------------------------


def _dataset_step(root: Path, began: float) -> DatasetStep:
    seconds = time.perf_counter() - began
    sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file()]
    return DatasetStep(path=root, files=len(sizes), bytes=sum(sizes), seconds=seconds)


def _prewarm_text(summary: PrewarmSummary) -> str:
    planned = f"{summary.files} files, {human_bytes(summary.bytes)}"
    if summary.in_place:
        return f"{planned} planned; local bucket, read in place: nothing copied"
    return f"{planned}: {summary.files_fetched} fetched, {summary.files_cached} already cached"
