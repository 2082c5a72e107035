"""Execute the tasks of a reshard plan: inline, or in a pool of processes; the work directory's protocol.

A task writes each of its unfinished outputs to a temp file in the work directory, stages it under
`stage/<path>` by rename, then writes its completion record `done/<path>.json` (`Workspace.finish`).
Outputs with a record are skipped, so tasks can be rerun after any crash. The job around the tasks
(options record, parts, finalize, publishing) is `reshard.job.run`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from cache.arguments import format_index_list, parse_index_list
from cache.fetch import MAX_UNLISTED_FILE_BYTES
from cache.progress import progress_bar
from cache.remote import Remote
from cache.store import atomic_write
from reader.decode.depth import is_depth
from reader.errors import DatasetError
from reader.format.v3 import frame_size
from reshard.errors import WorkerDied
from reshard.job.meta import (
    DataRecord,
    Record,
    VideoRecord,
    path_sha256,
    record_from_json,
    record_to_json,
)
from reshard.job.plan import DEFAULT_EPISODES_PER_FILE, DataTask, Task, VideoOutput, VideoTask
from reshard.job.process_pool import report_progress, run_in_pool
from reshard.job.tables import write_data_file
from reshard.source.model import V3Source
from reshard.video.encode import CRF_RANGE, DEFAULT_CRF, DEFAULT_PRESET, TUNES
from reshard.video.resize import DEFAULT_RESIZE_FILTER, RESIZE_FILTERS, Resize
from reshard.video.write import (
    DEFAULT_GOP,
    VIDEO_MODES,
    X26X_PRESETS,
    EpisodeVideo,
    OpenVideos,
    VideoMode,
    write_episode_video,
)

# Test hook: "<point>:<n>" makes the process SIGKILL itself at the n-th time it reaches <point>
# (staged, recorded, published, meta), to prove that any crash point resumes to identical bytes;
# `verify-job` at the start of a verify job, to kill a verify worker.
KILL_ENV = "LRS_TEST_KILL_AT"
# The tests' hold hook ("point:n", or "point:n:deaf" to ignore SIGTERM): at the n-th time the process reaches
# `point`, it waits there until SIGUSR1 (then goes on), so that a scheduler's SIGTERM or SIGKILL finds it
# mid-run.
HOLD_ENV = "LRS_TEST_HOLD_AT"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReshardOptions:
    """What the output looks like; recorded in `options.json` and `layout.json`.

    Attributes:
        video: `copy` keeps the codec (lossless split; episodes that do not start on a keyframe are
            re-encoded), `hevc` / `h264` re-encode every episode.
        gop: keyframe interval of re-encoded videos (default: the source's `video.g`, else 2).
        crf: quality of re-encoded videos (default: the video step's).
        preset: encoder preset of re-encoded videos (default: the video step's).
        tune: the encoder's `--tune` of re-encoded videos (`fastdecode`: cheaper CPU decode); None:
            none. Only with `hevc` / `h264`: a copy keeps the source's encoding.
        resize: the frame size of re-encoded videos, `WxH` (even sizes); None: the source's. Only with
            `hevc` / `h264`; depth cameras keep their size.
        resize_filter: the swscale filter of `resize` (`area`, `bicubic`, `bilinear`).
        data_file_mb: the size bound of an output data file, in MiB.
        episodes_per_data_file: the most episodes (row groups) of an output data file, which bounds the
            memory of writing and parsing its footer.
        skip_defective: leave out the episodes `lrs doctor`'s checks find defective (instead of refusing
            the source), renumbering the rest (`reshard.source.selection`).
        skip_episodes: source episodes to leave out, as `3,7,10-12`.
    """

    video: VideoMode = "copy"
    gop: int | None = None
    crf: int | None = None
    preset: str | None = None
    tune: str | None = None
    resize: str | None = None
    resize_filter: str = DEFAULT_RESIZE_FILTER
    data_file_mb: float = 100.0
    episodes_per_data_file: int = DEFAULT_EPISODES_PER_FILE
    skip_defective: bool = False
    skip_episodes: str = ""

    def __post_init__(self) -> None:
        if self.video not in VIDEO_MODES:
            raise ValueError(f"Invalid video mode ({self.video!r}). Expected one of {VIDEO_MODES}.")
        if self.gop is not None and self.gop < 1:
            raise ValueError(f"Invalid gop ({self.gop}). Expected >= 1.")
        if self.crf is not None:
            # copy mode's crf serves a fallback re-encode in the source's codec (AV1's range is widest).
            low, high = CRF_RANGE["av1" if self.video == "copy" else self.video]
            if not low <= self.crf <= high:
                raise ValueError(
                    f"Invalid crf ({self.crf}) for --video {self.video}. Expected {low}..{high}."
                )
        if self.video != "copy":
            # A default and the same value given explicitly are the same job (recorded as the default).
            if self.crf == DEFAULT_CRF[self.video]:
                object.__setattr__(self, "crf", None)
            if self.preset == DEFAULT_PRESET[self.video]:
                object.__setattr__(self, "preset", None)
        if self.skip_episodes:
            # Checked and written one way here; against the source's episodes when it is opened.
            episodes = parse_index_list(self.skip_episodes, what="episode")
            object.__setattr__(self, "skip_episodes", format_index_list(episodes))
        if not self.data_file_mb > 0:
            raise ValueError(f"Invalid data_file_mb ({self.data_file_mb}). Expected > 0.")
        if self.episodes_per_data_file < 1:
            raise ValueError(
                f"Invalid episodes_per_data_file ({self.episodes_per_data_file}). Expected >= 1."
            )
        if self.video != "copy" and self.preset is not None and self.preset not in X26X_PRESETS:
            raise ValueError(
                f"Invalid preset ({self.preset!r}) for --video {self.video}. Expected one of {list(X26X_PRESETS)}."
            )
        self._check_tune()
        self._check_resize()

    def _check_resize(self) -> None:
        if self.resize_filter not in RESIZE_FILTERS:
            raise ValueError(
                f"Invalid resize_filter ({self.resize_filter!r}). Expected one of {list(RESIZE_FILTERS)}."
            )
        if self.resize is None:
            if self.resize_filter != DEFAULT_RESIZE_FILTER:  # a filter without a size would be ignored
                raise ValueError(
                    f"Invalid resize_filter ({self.resize_filter!r}) without a resize. Expected --resize WxH."
                )
            return
        if self.video == "copy":
            raise ValueError(
                f"Invalid resize ({self.resize!r}) for --video copy. Expected --video hevc or h264: a copy "
                "keeps the source's frames."
            )
        object.__setattr__(self, "resize", str(Resize.parse(self.resize, self.resize_filter)))

    @property
    def resizing(self) -> Resize | None:
        """The resize of the re-encodes, or None."""
        return Resize.parse(self.resize, self.resize_filter) if self.resize is not None else None

    def _check_tune(self) -> None:
        if self.tune is None:
            return
        if self.video == "copy":
            raise ValueError(
                f"Invalid tune ({self.tune!r}) for --video copy. Expected --video hevc or h264: a copy "
                "keeps the source's encoding."
            )
        if self.tune not in TUNES[self.video]:
            raise ValueError(
                f"Invalid tune ({self.tune!r}) for --video {self.video}. Expected one of {list(TUNES[self.video])}."
            )

    @property
    def skipping(self) -> bool:
        """Whether episodes may be left out."""
        return self.skip_defective or bool(self.skip_episodes)

    def to_json(self) -> dict[str, Any]:
        """The options as recorded; the tune, the resize and the skip options only where set, so that a job
        without them records what it recorded before they existed (and an unfinished one of then resumes)."""
        doc = asdict(self)
        for name in ("tune", "resize", "skip_defective", "skip_episodes"):
            if not doc[name]:
                del doc[name]
        if self.resize is None:
            del doc["resize_filter"]
        return doc


DEFAULT_OPTIONS = ReshardOptions()


_KILL_COUNTS: dict[str, int] = {}
_HOLD_COUNTS: dict[str, int] = {}


def maybe_die(point: str) -> None:
    """The `KILL_ENV` test hook: SIGKILL this process at the n-th time it reaches `point` (and `HOLD_ENV`'s)."""
    maybe_hold(point)
    wanted = os.environ.get(KILL_ENV)
    if not wanted or wanted.rsplit(":", 1)[0] != point:
        return
    _KILL_COUNTS[point] = _KILL_COUNTS.get(point, 0) + 1
    if _KILL_COUNTS[point] == int(wanted.rsplit(":", 1)[1]):
        os.kill(os.getpid(), signal.SIGKILL)


# Test hook: "<episode>:<camera>" makes the process abort (SIGABRT, as x265's heap check does) as it begins
# that episode video, to prove that an encoder's crash fails that episode only.
ABORT_ENV = "LRS_TEST_ABORT_ENCODING"


def _maybe_abort(video: VideoOutput) -> None:
    if os.environ.get(ABORT_ENV) == f"{video.episode}:{video.key}":
        os.abort()


def maybe_hold(point: str) -> None:
    """The `HOLD_ENV` test hook: wait for SIGUSR1 at the n-th time this process reaches `point`."""
    wanted = os.environ.get(HOLD_ENV, "").split(":")
    if len(wanted) < 2 or wanted[0] != point:
        return
    _HOLD_COUNTS[point] = _HOLD_COUNTS.get(point, 0) + 1
    if _HOLD_COUNTS[point] != int(wanted[1]):
        return
    if wanted[2:] == ["deaf"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    go_on = threading.Event()
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: go_on.set())
    while not go_on.is_set():  # SIGTERM's handler raises `Terminated` out of here; SIGKILL ends the process
        signal.pause()


# The mode of every published output file: a dataset is meant to be read by others.
PUBLISHED_MODE = 0o644


class Workspace:
    """The work directory of one job: staged outputs, completion records, temp files."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def stage(self, rel: str) -> Path:
        return self.root / "stage" / rel

    def record_path(self, rel: str) -> Path:
        return self.root / "done" / f"{rel}.json"

    @property
    def tmp_dir(self) -> Path:
        """The directory of files being written (created on first use)."""
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp

    def temp(self, suffix: str = "") -> Path:
        """A new, unique temp path (not created)."""
        return self.tmp_dir / f"{os.getpid()}-{uuid.uuid4().hex}{suffix}"

    def is_done(self, rel: str) -> bool:
        return self.record_path(rel).exists()

    def load_record(self, rel: str) -> Record:
        return record_from_json(self.record_path(rel).read_bytes())

    def finish(self, rel: str, tmp: Path, record: Record) -> None:
        """Stage a finished output file, then write its completion record."""
        target = self.stage(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, PUBLISHED_MODE)  # every output alike (a video's temp file was made 0600)
        os.replace(tmp, target)
        maybe_die("staged")
        atomic_write(str(self.record_path(rel)), record_to_json(record))
        maybe_die("recorded")

    def local(self, remote: Remote, rel: str) -> contextlib.AbstractContextManager[str]:
        """A local path of a source file (see `local_copy`), fetched into tmp/ when remote."""
        return local_copy(remote, rel, self.tmp_dir)


def list_files(remote: Remote, top: str | None = None) -> dict[str, int | None]:
    """Size by dataset-relative path of every file under `top` (default: all); {} where listing fails.

    Plain HTTP cannot list; sizes the store does not report are None.
    """
    prefix = f"{remote.root}/" if remote.root else ""
    try:
        found = remote.fs.find(remote.path(top) if top else remote.root, detail=True)
    except (FileNotFoundError, NotImplementedError):
        return {}
    return {
        (path[len(prefix) :] if path.startswith(prefix) else path): detail.get("size")
        for path, detail in found.items()
    }


@contextlib.contextmanager
def local_copy(remote: Remote, rel: str, tmp_dir: Path) -> Iterator[str]:
    """A local path of `rel`: in place for a local dataset, else fetched into `tmp_dir` and deleted after.

    The download stops one byte past `MAX_UNLISTED_FILE_BYTES` (no index lists a source file's size):
    a body without end fills neither the disk nor the time.

    Raises:
        DatasetError: the file is larger than that.
    """
    path = remote.local_path(rel)
    if path is not None:
        yield path
        return
    tmp = tmp_dir / f"{os.getpid()}-{uuid.uuid4().hex}{Path(rel).suffix}"
    try:
        remote.get(rel, str(tmp), max_size=MAX_UNLISTED_FILE_BYTES)
        if tmp.stat().st_size > MAX_UNLISTED_FILE_BYTES:
            raise DatasetError(
                f"Invalid file size ({tmp.stat().st_size} bytes or more). Expected at most "
                f"{MAX_UNLISTED_FILE_BYTES} bytes for a source file.",
                file=remote.display(rel),
            )
        yield str(tmp)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class TaskContext:
    """Everything a task needs, picklable for process-pool workers.

    The output schema travels as Arrow IPC bytes: a pickled `pa.Schema` comes back with subtly
    different field metadata, and the parquet writer would then embed a different `ARROW:schema`,
    so a file written in a worker would differ by a few bytes from the same file written inline.
    """

    source: V3Source
    work: Path
    options: ReshardOptions
    schema_ipc: bytes = field(repr=False)
    compression: str

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))


# --- running tasks ------------------------------------------------------------------------------------


def run_task(
    task: Task,
    ctx: TaskContext,
    on_progress: Callable[[int], None] | None = None,
    on_output: Callable[[str], None] | None = None,
) -> list[VideoRecord]:
    """Write the unfinished outputs of one task; returns the video records it wrote (for warnings).

    `on_progress` counts the work as it is done (`work_units`): a data task's episodes, a video task's
    frames (each frame of a re-encode as it is encoded, a copied episode's frames once it is written);
    `on_output` is given the path of each output before it is begun.
    """
    ws = Workspace(ctx.work)
    announce = on_output or (lambda path: None)
    if isinstance(task, DataTask):
        if not ws.is_done(task.path):
            announce(task.path)
            _run_data_task(task, ctx, ws, on_progress)
        return []
    return _run_video_task(task, ctx, ws, on_progress, announce)


def _run_data_task(
    task: DataTask, ctx: TaskContext, ws: Workspace, on_episode: Callable[[int], None] | None
) -> None:
    tmp = ws.temp(".parquet")
    try:
        spans = write_data_file(
            task,
            ctx.source,
            lambda rel: ws.local(ctx.source.remote, rel),
            str(tmp),
            schema=ctx.schema,
            compression=ctx.compression,
            on_episode=on_episode,
        )
        record = DataRecord(task.path, tmp.stat().st_size, path_sha256(tmp), tuple(spans))
        ws.finish(task.path, tmp, record)
    finally:
        tmp.unlink(missing_ok=True)


def _run_video_task(
    task: VideoTask,
    ctx: TaskContext,
    ws: Workspace,
    on_frames: Callable[[int], None] | None,
    announce: Callable[[str], None],
) -> list[VideoRecord]:
    todo = [v for v in task.videos if not ws.is_done(v.path)]
    if not todo:
        return []
    source, options = ctx.source, ctx.options
    written = []
    # One container for the task's source file, which holds every episode of the task.
    with ws.local(source.remote, task.source) as src, OpenVideos(capacity=1) as opened:
        for video in todo:
            announce(video.path)
            _maybe_abort(video)
            tmp = ws.temp(".mp4")
            counted = _Counted(on_frames)
            try:
                result = write_output_video(
                    source, options, video, src, str(tmp), videos=opened, on_frame=counted.add
                )
                record = VideoRecord.of(
                    result, path=video.path, sha256=path_sha256(tmp), episode=video.episode, key=video.key
                )
                ws.finish(video.path, tmp, record)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(record)
            counted.add(video.length - counted.total)  # a copy's frames, or what a re-encode did not count
    return written


class _Counted:
    """A progress callback that also keeps the total it was given."""

    def __init__(self, callback: Callable[[int], None] | None) -> None:
        self.callback, self.total = callback, 0

    def add(self, count: int = 1) -> None:
        self.total += count
        if self.callback is not None and count:
            self.callback(count)


def write_output_video(
    source: V3Source,
    options: ReshardOptions,
    video: VideoOutput,
    src: str,
    out: str,
    *,
    length: int | None = None,
    threads: int | None = None,
    videos: OpenVideos | None = None,
    on_frame: Callable[[int], None] | None = None,
) -> EpisodeVideo:
    """Write the output `video` from its local source file `src` to `out` with the job's video settings
    (`write_episode_video`); `length`: only its first frames (a calibration encode, `reshard.job.estimate`)."""
    gop, crf = video_settings(source, video.key, options)
    return write_episode_video(
        src,
        out,
        from_timestamp=video.from_timestamp,
        length=video.length if length is None else length,
        fps=source.info.fps,
        mode=options.video,
        gop=gop,
        crf=crf,
        preset=options.preset,
        tune=options.tune,
        resize=options.resizing,
        threads=threads,
        episode=video.episode,
        camera=video.key,
        depth=is_depth(source.info.features[video.key]),
        videos=videos,
        on_frame=on_frame,
    )


def video_settings(source: V3Source, key: str, options: ReshardOptions) -> tuple[int, int | None]:
    """The (gop, crf) passed to the video step for camera `key`.

    The GOP defaults to the source's `video.g`, else 2. In copy mode the crf defaults to the source's
    `video.crf` (used only by the fallback re-encode of an episode that does not start on a keyframe,
    which keeps the source codec); a re-encoding mode leaves it to the video step's default.
    """
    info = source.info.features[key].get("info", {})
    gop = options.gop or info.get("video.g") or DEFAULT_GOP
    crf = options.crf if options.crf is not None or options.video != "copy" else info.get("video.crf")
    return int(gop), crf


class _ReshardProgress:
    """Two bars: tables counting episodes, videos counting frames (tqdm shows the rate and the ETA).

    Args:
        pending: each task to run with the work it has left (`work_left`).
        quiet: no bars.
    """

    def __init__(self, pending: list[tuple[Task, int]], *, quiet: bool) -> None:
        self.bars: dict[type, tqdm] = {}
        kinds = ((DataTask, "tables", "ep"), (VideoTask, "videos", "frame"))
        for position, (kind, desc, unit) in enumerate(kinds):
            of_kind = [(task, left) for task, left in pending if isinstance(task, kind)]
            total = sum(work_units(task) for task, _ in of_kind)
            if total:
                self.bars[kind] = progress_bar(
                    total=total,
                    initial=total - sum(left for _, left in of_kind),
                    desc=desc,
                    unit=unit,
                    disable=quiet,
                    position=position,
                    leave=True,
                    smoothing=0,  # frames/s and the ETA: the mean since the bar began
                )

    def callback(self, task: Task) -> Callable[[int], None]:
        """What counts `task`'s work on its bar as it is done."""
        return self.bars[type(task)].update

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def work_units(task: Task) -> int:
    """The work of a task as its bar counts it: a data task's episodes, a video task's frames."""
    if isinstance(task, DataTask):
        return len(task.episodes)
    return sum(v.length for v in task.videos)


def work_left(task: Task, ws: Workspace) -> int:
    """The work of `task` (`work_units`) whose outputs have no completion record yet."""
    if isinstance(task, DataTask):
        return 0 if ws.is_done(task.path) else len(task.episodes)
    return sum(v.length for v in task.videos if not ws.is_done(v.path))


# Re-encoding jobs per worker a job is cut into at least, where its tasks allow: the last jobs to finish
# then keep every worker busy to the end (a task is one source file, often one per camera).
JOBS_PER_WORKER = 4


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity (what `taskset` or a SLURM task's cpuset allows),
    at most a cgroup v2 CPU quota and `SLURM_CPUS_PER_TASK` where either is set."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) / int(period))))
    with contextlib.suppress(KeyError, ValueError):
        cpus = min(cpus, max(1, int(os.environ["SLURM_CPUS_PER_TASK"])))
    return max(1, cpus)


# Pixels to re-encode from which `--workers` defaults to one worker per CPU: about 15 s of one core of
# x265 `fast` (3.3 megapixels/s at 480x640). Below it, spawning the workers (each imports PyAV and
# pyarrow: 1 to 2 s) would cost more than it saves.
POOL_MIN_PIXELS = 50_000_000


def reencode_pixels(options: ReshardOptions, source: V3Source, tasks: Sequence[Task]) -> int:
    """Pixels the tasks re-encode (frames x output size of every camera but depth): 0 for a copy."""
    if options.video == "copy":
        return 0
    resize = options.resizing
    pixels = 0
    for task in tasks:
        if isinstance(task, VideoTask) and not is_depth(feature := source.info.features[task.key]):
            height, width = (resize.height, resize.width) if resize else frame_size(feature) or (480, 640)
            pixels += height * width * sum(v.length for v in task.videos)
    return pixels


def default_workers(pixels: int) -> int:
    """Worker processes when `--workers` is not given, for a job that re-encodes `pixels`
    (`reencode_pixels`): from `POOL_MIN_PIXELS`, one per available CPU, each encoder on one thread
    (`reencode_jobs`); else one (a copy is bound by reading and writing)."""
    return available_cpus() if pixels >= POOL_MIN_PIXELS else 1


def reencode_jobs(pending: list[tuple[Task, int]], workers: int, ws: Workspace) -> list[tuple[Task, int]]:
    """The pending tasks as the pool's jobs: a re-encoding video task cut into runs of its unfinished
    episodes of about equal frames, so that there are `JOBS_PER_WORKER` jobs per worker where the
    episodes allow: the data tasks first, then the largest.

    Every encoder runs on one thread and the workers encode episodes side by side: one thread per
    episode is x265's and x264's most efficient use of a core, and an encode's bytes do not depend on
    its thread count, so a job resumed with other `--workers`, or on a node with other cores, writes the
    same files. Cutting the tasks keeps the cores busy to the end: a task is a whole source file, and
    lerobot records one per camera.
    """
    videos = [t for t, _ in pending if isinstance(t, VideoTask)]
    if not videos:
        return pending
    pieces = -(-JOBS_PER_WORKER * workers // len(videos))  # per task, at least
    jobs: list[tuple[Task, int]] = [(t, left) for t, left in pending if not isinstance(t, VideoTask)]
    for task in videos:
        todo = [v for v in task.videos if not ws.is_done(v.path)]
        jobs += [(replace(task, videos=run), sum(v.length for v in run)) for run in _runs(todo, pieces)]
    return sorted(jobs, key=lambda job: (isinstance(job[0], VideoTask), -job[1]))  # tables first


def _runs(videos: list[VideoOutput], pieces: int) -> list[tuple[VideoOutput, ...]]:
    """`videos` in at most `pieces` consecutive runs of about equal frames."""
    total = sum(v.length for v in videos)
    runs: list[list[VideoOutput]] = [[]]
    done = 0
    for video in videos:
        # a new run once this one holds its share of the frames
        if runs[-1] and done >= total * len(runs) / pieces:
            runs.append([])
        runs[-1].append(video)
        done += video.length
    return [tuple(run) for run in runs]


def run_tasks(
    tasks: list[Task], ctx: TaskContext, *, workers: int | None = None, quiet: bool
) -> list[VideoRecord]:
    """Run tasks inline or in a pool of processes; stops at the first failure but a crashed worker's.

    A pool runs them when there are several workers, and for a re-encode of at least `POOL_MIN_PIXELS`
    whatever the workers: an encoder that aborts (x265 has, at some widths) then ends a worker, not the
    job (`_run_pool`).

    Args:
        workers: processes; None: `default_workers`.

    Returns:
        The records of the episode videos copy mode re-encoded (`reason` set), to warn of: the others
        are on disk for finalize, and kept here they would grow with the episodes.

    Raises:
        WorkerDied: a worker ended abruptly (the outputs it was writing are named).
    """
    ws = Workspace(ctx.work)
    pixels = reencode_pixels(ctx.options, ctx.source, tasks)
    workers = default_workers(pixels) if workers is None else workers
    # One look at the completion records serves the skip, the bars and the pool's progress.
    pending = [(task, left) for task in tasks if (left := work_left(task, ws))]
    progress = _ReshardProgress(pending, quiet=quiet)
    written: list[VideoRecord] = []
    if pixels and workers > (cpus := available_cpus()):
        log.warning(
            "--workers %d is more than the %d CPUs this job may use: the encoders share them (no faster).",
            workers,
            cpus,
        )
    try:
        if pixels:
            pending = reencode_jobs(pending, workers, ws)
        if len(pending) > 1 and (workers > 1 or pixels >= POOL_MIN_PIXELS):
            written = _run_pool(pending, ctx, workers, progress)
        else:
            for task, _ in pending:
                written += _reencoded(run_task(task, ctx, progress.callback(task)))
    finally:
        progress.close()
    return written


# Outputs a job lets crash a worker before it stops: a fault that ends every worker (memory, a signal to
# all) is not one episode's, and would otherwise start a pool per output.
MAX_CRASHED_OUTPUTS = 3


def _run_pool(
    pending: list[tuple[Task, int]], ctx: TaskContext, workers: int, progress: _ReshardProgress
) -> list[VideoRecord]:
    """Run the jobs in pools: a worker that ends abruptly (an encoder's abort, a signal) while it writes an
    output fails that output only; a new pool runs every job left, then the call raises `WorkerDied`
    naming the outputs that failed and why (a rerun retries them)."""
    ws = Workspace(ctx.work)
    jobs = pending  # every job, for naming what failed (searched then, not held by name)
    written: list[VideoRecord] = []
    crashed: dict[str, str] = {}  # output path -> how its worker ended
    while pending:
        writing: dict[int, str] = {}  # worker pid -> the output it is writing
        try:
            written += _run_pool_once(pending, ctx, workers, progress, writing)
            break
        except WorkerDied as exc:
            culprits = {
                writing[pid]: _how_it_ended(code)
                for pid, code in exc.exits.items()
                if pid in writing and code not in (0, None, -signal.SIGTERM) and not ws.is_done(writing[pid])
            }
            if not culprits or len(crashed) + len(culprits) > MAX_CRASHED_OUTPUTS:
                raise
            crashed.update(culprits)
            pending = _unfinished(pending, ws, skip=crashed)
    if crashed:
        which = "; ".join(f"{how} while writing {_output_name(path, jobs)}" for path, how in crashed.items())
        raise WorkerDied(
            f"A worker process ended abruptly ({which}); every other output is finished. Expected it to "
            f"finish: rerun the same command to retry (finished outputs are kept in {ctx.work})."
        )
    return written


def _output_name(path: str, jobs: list[tuple[Task, int]]) -> str:
    """The output `path` of one of `jobs`, named for people: `episode 3 of camera 'top' (videos/...)`."""
    for task, _ in jobs:
        if isinstance(task, DataTask) and task.path == path:
            return f"data file {task.path}"
        if isinstance(task, VideoTask):
            for v in task.videos:
                if v.path == path:
                    return f"episode {v.episode} of camera {v.key!r} ({v.path})"
    return path


def _how_it_ended(code: int | None) -> str:
    """`killed by SIGABRT`, `exit code 3`."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _run_pool_once(
    pending: list[tuple[Task, int]],
    ctx: TaskContext,
    workers: int,
    progress: _ReshardProgress,
    writing: dict[int, str],
) -> list[VideoRecord]:
    """One pool over `pending`; `writing` follows which output each worker is writing."""
    written: list[VideoRecord] = []
    counted = [0] * len(pending)  # work of each job on the bars, at most its `left`
    lock = threading.Lock()  # reports arrive on the pool's progress thread, results on this one

    def count(position: int, units: int) -> None:
        task, left = pending[position]
        with lock:
            more = min(units, left - counted[position])
            counted[position] += more
            progress.callback(task)(more)

    def report(item: tuple[Any, ...]) -> None:
        if item[0] == _WRITING:
            writing[item[1]] = item[2]
        else:
            count(*item)

    def finished(position: int, records: list[VideoRecord]) -> None:
        written.extend(records)
        count(position, pending[position][1])  # the rest, whether its reports came first or not

    run_in_pool(
        list(enumerate(task for task, _ in pending)),
        _run_in_worker,
        ctx,
        workers=workers,
        tmp_dir=Workspace(ctx.work).tmp_dir,
        on_result=finished,
        rerun=f"rerun the same command to resume (finished outputs are kept in {ctx.work})",
        on_progress=report,
    )
    return written


def _unfinished(
    pending: list[tuple[Task, int]], ws: Workspace, skip: dict[str, str]
) -> list[tuple[Task, int]]:
    """The jobs of `pending` with their outputs not finished yet and not in `skip`."""
    left: list[tuple[Task, int]] = []
    for task, _ in pending:
        if isinstance(task, DataTask):
            if task.path not in skip and not ws.is_done(task.path):
                left.append((task, len(task.episodes)))
            continue
        videos = tuple(v for v in task.videos if v.path not in skip and not ws.is_done(v.path))
        if videos:
            left.append((replace(task, videos=videos), sum(v.length for v in videos)))
    return left


# Seconds between two progress reports of a pool worker: a frame each time would be a message per frame.
REPORT_INTERVAL_S = 0.5


# The first item of a worker's report that it begins an output: (_WRITING, pid, output path).
_WRITING = "writing"


def _run_in_worker(ctx: TaskContext, job: tuple[int, Task]) -> list[VideoRecord]:
    """A task in a worker: its work moves the parent's bar as it is done (every `REPORT_INTERVAL_S`),
    not when the task (a whole source file of episodes) ends; each output it begins is reported first,
    so that the parent can name it if this process dies."""
    position, task = job
    pid = os.getpid()
    unsent, last = 0, time.monotonic()

    def report(units: int) -> None:
        nonlocal unsent, last
        unsent += units
        if time.monotonic() - last >= REPORT_INTERVAL_S:
            report_progress((position, unsent))
            unsent, last = 0, time.monotonic()

    def writing(path: str) -> None:
        report_progress((_WRITING, pid, path))

    return _reencoded(run_task(task, ctx, report, writing))  # the parent counts what was left unsent


def _reencoded(records: list[VideoRecord]) -> list[VideoRecord]:
    return [record for record in records if record.reason is not None]
