"""`lrs demo`: the whole pipeline on a generated sample, each step timed and each claim checked.

sample (v3, AV1) -> reshard (lrs/1, H.265) -> verify against the sample -> push to a local bucket
(`file://`) -> prewarm a node cache from the bucket -> stream one epoch from the bucket with that cache,
`EpisodeStream` and a multi-worker DataLoader -> check that every frame came exactly once and that each
decoded frame shows its own (episode, frame, camera) marker -> resume a fresh stream and DataLoader from
the middle of the epoch -> check that the continuation equals the rest of the uninterrupted run.

Every step is a plain function returning a frozen record, so tests can run the flow (or a step) without
the command line. A failed check raises `DemoCheckError`; `lrs demo` then exits with status 1.

The bucket is a `file://` URL, which lrs treats as remote storage (`cache.Remote.reads_in_place`): prewarm
copies its files into the node cache and the reader then finds them there, exactly as with a real bucket.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import queue
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from cache import CacheStats
from cache.checks import check_int
from cache.progress import human_bytes
from reader.batch import collate
from reader.pool import ReaderStats
from reader.stream import EpisodeStream
from reshard.demo.frames import read_frame_id
from reshard.demo.sample import SampleSpec, write_sample
from reshard.errors import VerifyError
from reshard.execute import ReshardOptions
from reshard.prewarm import PrewarmSummary, prewarm
from reshard.push.publish import push
from reshard.run import reshard
from reshard.source import open_source
from reshard.verify import verify

Echo = Callable[[str], None]
# The demo's own subdirectories of the work directory: removed before a run, and after it unless kept.
SUBDIRS = ("source", "lrs1", "bucket", "cache")
_REPORT_TIMEOUT_S = 60.0


class DemoCheckError(VerifyError):
    """A claim the demo checks does not hold (verify, exactly-once coverage, decoded frames, resume)."""


@dataclass(frozen=True)
class DemoConfig:
    """What the demo generates and how it streams.

    Attributes:
        episodes: episodes of the sample.
        cameras: video cameras of the sample.
        height, width: frame size in pixels.
        min_length, max_length: episode lengths are drawn in [min_length, max_length] frames.
        video: how `reshard` writes videos ("hevc" re-encodes to H.265).
        batch_size: DataLoader batch size.
        num_workers: DataLoader workers.
        episode_pool_size: episodes each consumer mixes frames from.
        seed: the seed of the sample and of the stream's order.
    """

    episodes: int = 12
    cameras: int = 2
    height: int = 96
    width: int = 128
    min_length: int = 30
    max_length: int = 90
    video: str = "hevc"
    batch_size: int = 8
    num_workers: int = 2
    episode_pool_size: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        lows = {"episodes": 2, "cameras": 1, "batch_size": 1, "num_workers": 0, "episode_pool_size": 1}
        for name, low in lows.items():
            check_int(name, getattr(self, name), low)
        ReshardOptions(video=self.video)  # type: ignore[arg-type] - validates the mode
        self.spec()  # validates the sample's size and lengths

    def spec(self) -> SampleSpec:
        """The sample's generator spec."""
        return SampleSpec(
            episodes=self.episodes,
            cameras=self.cameras,
            height=self.height,
            width=self.width,
            min_length=self.min_length,
            max_length=self.max_length,
            seed=self.seed,
        )


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
class Sample:
    """One streamed sample: where it is from, a digest of every value, and the markers its frames show.

    Attributes:
        episode: its `episode_index`.
        frame: its `frame_index`.
        digest: blake2b of every key's value, keys in sorted order.
        shown: per camera (in camera order), the (episode, frame, camera) marker drawn in the decoded frame.
    """

    episode: int
    frame: int
    digest: str
    shown: tuple[tuple[int, int, int], ...]

    def __repr__(self) -> str:
        return f"Sample(episode {self.episode}, frame {self.frame}, {self.digest[:12]})"


@dataclass(frozen=True)
class StreamRun:
    """One pass of a DataLoader over an `EpisodeStream`.

    Attributes:
        batches: the samples of each batch, in the order the trainer got them.
        start_batch: batches of the epoch consumed before this pass (a resume), else 0.
        first_batch_s: from building the stream to holding the first batch.
        seconds: from building the stream to the end of the pass.
        samples_per_s: samples per second after the first batch.
        stats: the reader's counters summed over the DataLoader's processes.
    """

    batches: tuple[tuple[Sample, ...], ...]
    start_batch: int
    first_batch_s: float
    seconds: float
    samples_per_s: float
    stats: ReaderStats

    def __repr__(self) -> str:
        return (
            f"StreamRun(batches={len(self.batches)}, samples={self.samples}, start_batch={self.start_batch}, "
            f"first_batch_s={self.first_batch_s:.2f}, samples_per_s={self.samples_per_s:.0f})"
        )

    @property
    def samples(self) -> int:
        """Samples of the pass."""
        return sum(len(b) for b in self.batches)


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
    write_sample(root, config.spec())
    return _dataset_step(root, began)


def reshard_sample(src: Path, out: Path, config: DemoConfig) -> DatasetStep:
    """Reshard the sample into lrs/1 in `out` (videos as `config.video`), without progress bars."""
    began = time.perf_counter()
    reshard(str(src), out, options=ReshardOptions(video=config.video), quiet=True)  # type: ignore[arg-type]
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
    """Fill `cache_dir` with what the demo's stream reads in its epoch (the reader's own schedule).

    A `file://` bucket is copied into the cache like any remote one; a plain local path would be read in
    place (`PrewarmSummary.in_place`, nothing copied).
    """
    return prewarm(
        url,
        str(cache_dir),
        world_size=1,
        num_workers=config.num_workers,
        seed=config.seed,
        epoch=0,
        episode_pool_size=config.episode_pool_size,
        progress=False,
    )


def stream_epoch(url: str, cache_dir: Path, config: DemoConfig, *, start_batch: int = 0) -> StreamRun:
    """Stream epoch 0 from `url` through a fresh `EpisodeStream` and DataLoader, as a trainer would.

    Args:
        url: the dataset (the bucket).
        cache_dir: the node cache.
        config: the stream's settings.
        start_batch: resume after this many batches of the epoch, through `load_state_dict` with the
            trainer's `{"batches_consumed", "batch_size", "num_workers"}`.

    Returns:
        The samples of every batch and how fast they came.
    """
    began = time.perf_counter()
    stream = _open_stream(url, cache_dir, config, start_batch)
    cameras = {key: i for i, key in enumerate(config.spec().camera_keys)}
    reports: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    loader = DataLoader(
        _Reporting(stream, reports),
        batch_size=config.batch_size,
        num_workers=config.num_workers,
        collate_fn=collate,  # one shared buffer per batch (reader.batch)
    )
    batches: list[tuple[Sample, ...]] = []
    first_at, first_samples = 0.0, 0
    try:
        for batch in loader:
            if not batches:
                first_at, first_samples = time.perf_counter(), len(batch["index"])
            batches.append(tuple(_samples(batch, cameras)))
        ended = time.perf_counter()
        if not batches:
            raise DemoCheckError(
                f"Invalid stream ({url}, start batch {start_batch}): no batch. Expected samples."
            )
        stats = _collect_stats(reports, max(1, config.num_workers), url)
    finally:
        reports.close()
    total = sum(len(b) for b in batches)
    return StreamRun(
        batches=tuple(batches),
        start_batch=start_batch,
        first_batch_s=first_at - began,
        seconds=ended - began,
        samples_per_s=(total - first_samples) / (ended - first_at) if ended > first_at else 0.0,
        stats=stats,
    )


def _open_stream(url: str, cache_dir: Path, config: DemoConfig, start_batch: int) -> EpisodeStream:
    """A fresh stream, as a (restarted) trainer builds it; `start_batch` > 0 loads the trainer's state.

    The demo is one process: rank 0 of 1, whatever RANK / WORLD_SIZE the environment holds.
    """
    stream = EpisodeStream(
        url,
        rank=0,
        world_size=1,
        cache_dir=cache_dir,
        seed=config.seed,
        episode_pool_size=config.episode_pool_size,
        return_uint8=True,
    )
    if start_batch:
        state = {
            "batches_consumed": start_batch,
            "batch_size": config.batch_size,
            "num_workers": config.num_workers,
        }
        stream.load_state_dict(state)
    return stream


class _Reporting(IterableDataset):
    """The stream, sending its process's counters home once that process's share of the epoch ends."""

    def __init__(self, stream: EpisodeStream, reports: Any) -> None:
        self.stream, self.reports = stream, reports

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.stream
        self.reports.put(self.stream.stats().to_dict())


# --- the checks (pure) -------------------------------------------------------------------------------


def expected_frames(src: Path) -> dict[int, int]:
    """Episode index -> length, as the v3 source's metadata says."""
    return {e.episode_index: e.length for e in open_source(str(src)).episodes}


def check_exactly_once(pairs: Iterable[tuple[int, int]], lengths: Mapping[int, int]) -> None:
    """Check that `pairs` (episode, frame) hold every frame of `lengths` exactly once.

    Raises:
        DemoCheckError: a frame is missing, repeated, or not in the dataset (the first of each is named).
    """
    got = Counter(pairs)
    want = Counter((e, f) for e, n in lengths.items() for f in range(n))
    if got == want:
        return
    missing = sorted(want - got)
    repeated = sorted(p for p, n in got.items() if n > 1)
    foreign = sorted(set(got) - set(want))
    problems = [
        f"{len(items)} {what}, first episode {items[0][0]} frame {items[0][1]}"
        for what, items in (("missing", missing), ("repeated", repeated), ("not in the dataset", foreign))
        if items
    ]
    raise DemoCheckError(
        f"Invalid epoch coverage ({sum(got.values())} samples: {'; '.join(problems)}). "
        f"Expected each of the {sum(want.values())} frames of {len(lengths)} episodes exactly once."
    )


def check_frames_shown(run: StreamRun) -> None:
    """Check that each sample's decoded frames show its own (episode, frame, camera) marker.

    Raises:
        DemoCheckError: a frame shows another marker (the first such sample is named).
    """
    for number, sample in enumerate(_flat(run.batches)):
        for camera, shown in enumerate(sample.shown):
            if shown != (sample.episode, sample.frame, camera):
                raise DemoCheckError(
                    f"Invalid decoded frame (sample {number}, episode {sample.episode}, frame {sample.frame}, "
                    f"camera {camera}): it shows episode {shown[0]} frame {shown[1]} camera {shown[2]}. "
                    "Expected the frame of its own episode, frame index and camera."
                )


def check_prewarm_served(prewarmed: PrewarmSummary, run: StreamRun) -> None:
    """Check that a complete prewarm left the stream nothing to download.

    Raises:
        DemoCheckError: the stream fetched bytes although prewarm planned its whole epoch.
    """
    cache = run.stats.cache
    if prewarmed.limited_by is None and not prewarmed.dry_run and (cache.misses or cache.bytes_fetched):
        raise DemoCheckError(
            f"Invalid prewarm: the stream still fetched {cache.misses} files ({cache.bytes_fetched} bytes). "
            "Expected a complete prewarm to leave the epoch nothing to download."
        )


def check_resume(uninterrupted: StreamRun, resumed: StreamRun) -> None:
    """Check that `resumed` is the rest of `uninterrupted` after its `start_batch`, batch by batch.

    Raises:
        DemoCheckError: the first batch or sample that differs is named.
    """
    cut = resumed.start_batch
    rest = uninterrupted.batches[cut:]
    for i, (got, want) in enumerate(zip(resumed.batches, rest, strict=False)):
        if got != want:
            at = next(
                (j for j, (g, w) in enumerate(zip(got, want, strict=False)) if g != w),
                min(len(got), len(want)),
            )
            raise DemoCheckError(
                f"Invalid resumed stream (batch {cut + i} of the epoch, sample {at}: "
                f"{_at(got, at)}). Expected {_at(want, at)}, as the uninterrupted run."
            )
    if len(resumed.batches) != len(rest):
        raise DemoCheckError(
            f"Invalid resumed stream ({len(resumed.batches)} batches after batch {cut}). "
            f"Expected {len(rest)}, as the uninterrupted run."
        )


# --- the whole flow ----------------------------------------------------------------------------------


def run_demo(workdir: Path, config: DemoConfig | None = None, *, echo: Echo | None = None) -> DemoResult:
    """Run every step in `workdir` (its `SUBDIRS` are replaced), printing a line per step.

    Args:
        workdir: where the sample, the output, the bucket and the cache go.
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
    paths = prepare_workdir(workdir)
    bucket_url = paths["bucket"].absolute().as_uri()
    source = make_sample(paths["source"], config)
    lengths = expected_frames(paths["source"])
    say(
        f"sample    {config.episodes} episodes, {sum(lengths.values())} frames, {_count(config.cameras, 'camera')} "
        f"{config.height}x{config.width} (AV1), {human_bytes(source.bytes)} ({source.seconds:.1f} s)"
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
    check_exactly_once(((s.episode, s.frame) for s in _flat(epoch.batches)), lengths)
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


def prepare_workdir(workdir: Path) -> dict[str, Path]:
    """The demo's directories under `workdir`, each removed if a previous run left it."""
    workdir.mkdir(parents=True, exist_ok=True)
    paths = {name: workdir / name for name in SUBDIRS}
    for path in [*paths.values(), workdir / ".lrs1.lrs-work"]:
        if path.exists():
            shutil.rmtree(path)
    return paths


def cleanup_workdir(workdir: Path) -> None:
    """Remove what the demo wrote under `workdir` (nothing else)."""
    for name in (*SUBDIRS, ".lrs1.lrs-work"):
        shutil.rmtree(workdir / name, ignore_errors=True)


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
        f"lrs demo: {c.episodes} episodes x {_count(c.cameras, 'camera')} {c.height}x{c.width}, "
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


def _samples(batch: Mapping[str, Any], cameras: Mapping[str, int]) -> Iterator[Sample]:
    """The samples of a collated batch, each with a digest of its values and its frames' markers."""
    keys = sorted(batch)
    episodes, frames = batch["episode_index"].tolist(), batch["frame_index"].tolist()
    for i, (episode, frame) in enumerate(zip(episodes, frames, strict=True)):
        digest = hashlib.blake2b(digest_size=16)
        for key in keys:
            digest.update(key.encode())
            digest.update(_value_bytes(batch[key][i]))
        shown = tuple(_marker(batch[key][i]) for key in sorted(cameras, key=cameras.__getitem__))
        yield Sample(int(episode), int(frame), digest.hexdigest(), shown)


def _value_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return value.numpy().tobytes() if hasattr(value, "numpy") else repr(value).encode()


def _marker(image: torch.Tensor) -> tuple[int, int, int]:
    """The (episode, frame, camera) marker in the top band of a CxHxW uint8 frame (only that band is read)."""
    band = (image.shape[-1] // 16) * 3
    return read_frame_id(image[:, :band, :])


def _flat(batches: Sequence[Sequence[Sample]]) -> Iterator[Sample]:
    for batch in batches:
        yield from batch


def _at(batch: Sequence[Sample], i: int) -> str:
    return repr(batch[i]) if i < len(batch) else "the end of the batch"


def _collect_stats(reports: Any, expected: int, url: str) -> ReaderStats:
    """Sum the counters each DataLoader process sent at the end of its stream."""
    got = []
    for _ in range(expected):
        try:
            got.append(reports.get(timeout=_REPORT_TIMEOUT_S))
        except queue.Empty as exc:
            raise DemoCheckError(
                f"Invalid stream ({url}): {len(got)} of {expected} processes reported their counters. "
                "Expected every DataLoader process to finish its stream."
            ) from exc
    cache = sum((CacheStats(**r.pop("cache")) for r in got), CacheStats())
    names = [f.name for f in fields(ReaderStats) if f.name != "cache"]
    return ReaderStats(**{n: sum(r[n] for r in got) for n in names}, cache=cache)


def _prewarm_text(summary: PrewarmSummary) -> str:
    planned = f"{summary.files} files, {human_bytes(summary.bytes)}"
    if summary.in_place:
        return f"{planned} planned; local bucket, read in place: nothing copied"
    return f"{planned}: {summary.files_fetched} fetched, {summary.files_cached} already cached"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
