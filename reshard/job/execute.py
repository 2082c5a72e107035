"""Execute the tasks of a reshard plan: inline, or in a pool of processes; the work directory's protocol.

A task writes each of its unfinished outputs to a temp file in the work directory, stages it under
`stage/<path>` by rename, then writes its completion record `done/<path>.json` (`Workspace.finish`).
Outputs with a record are skipped, so tasks can be rerun after any crash. The job around the tasks
(options record, parts, finalize, publishing) is `reshard.job.run`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
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
from reshard.job.meta import (
    DataRecord,
    Record,
    VideoRecord,
    path_sha256,
    record_from_json,
    record_to_json,
)
from reshard.job.plan import DEFAULT_EPISODES_PER_FILE, DataTask, Task, VideoTask
from reshard.job.process_pool import report_progress, run_in_pool
from reshard.job.tables import write_data_file
from reshard.source.model import V3Source
from reshard.video.encode import CRF_RANGE, DEFAULT_CRF, DEFAULT_PRESET, TUNES
from reshard.video.resize import DEFAULT_RESIZE_FILTER, RESIZE_FILTERS, Resize
from reshard.video.write import (
    DEFAULT_GOP,
    VIDEO_MODES,
    X26X_PRESETS,
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
    task: Task, ctx: TaskContext, on_episode: Callable[[int], None] | None = None
) -> list[VideoRecord]:
    """Write the unfinished outputs of one task; returns the video records it wrote (for warnings)."""
    ws = Workspace(ctx.work)
    if isinstance(task, DataTask):
        if not ws.is_done(task.path):
            _run_data_task(task, ctx, ws, on_episode)
        return []
    return _run_video_task(task, ctx, ws, on_episode)


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
    task: VideoTask, ctx: TaskContext, ws: Workspace, on_episode: Callable[[int], None] | None
) -> list[VideoRecord]:
    todo = [v for v in task.videos if not ws.is_done(v.path)]
    if not todo:
        return []
    source, options = ctx.source, ctx.options
    gop, crf = video_settings(source, task.key, options)
    written = []
    # One container for the task's source file, which holds every episode of the task.
    with ws.local(source.remote, task.source) as src, OpenVideos(capacity=1) as opened:
        for video in todo:
            tmp = ws.temp(".mp4")
            try:
                result = write_episode_video(
                    src,
                    str(tmp),
                    from_timestamp=video.from_timestamp,
                    length=video.length,
                    fps=source.info.fps,
                    mode=options.video,
                    gop=gop,
                    crf=crf,
                    preset=options.preset,
                    tune=options.tune,
                    resize=options.resizing,
                    episode=video.episode,
                    camera=video.key,
                    depth=is_depth(source.info.features[video.key]),
                    videos=opened,
                )
                record = VideoRecord.of(
                    result, path=video.path, sha256=path_sha256(tmp), episode=video.episode, key=video.key
                )
                ws.finish(video.path, tmp, record)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(record)
            if on_episode is not None:
                on_episode(1)
    return written


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
    """Two bars, tables and videos, counting episodes (tqdm shows episodes/s and ETA).

    Args:
        pending: each task to run with the episodes it has left to write.
        quiet: no bars.
    """

    def __init__(self, pending: list[tuple[Task, int]], *, quiet: bool) -> None:
        self.bars: dict[type, tqdm] = {}
        for position, (kind, desc) in enumerate(((DataTask, "tables"), (VideoTask, "videos"))):
            of_kind = [(task, left) for task, left in pending if isinstance(task, kind)]
            total = sum(task.size for task, _ in of_kind)
            if total:
                self.bars[kind] = progress_bar(
                    total=total,
                    initial=total - sum(left for _, left in of_kind),
                    desc=desc,
                    unit="ep",
                    disable=quiet,
                    position=position,
                    leave=True,
                )

    def callback(self, task: Task) -> Callable[[int], None]:
        """What counts `task`'s episodes on its bar as they are written."""
        return self.bars[type(task)].update

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _episodes_left(task: Task, ws: Workspace) -> int:
    """Episodes of `task` whose outputs have no completion record yet."""
    if isinstance(task, DataTask):
        return 0 if ws.is_done(task.path) else len(task.episodes)
    return sum(1 for v in task.videos if not ws.is_done(v.path))


def run_tasks(tasks: list[Task], ctx: TaskContext, *, workers: int, quiet: bool) -> list[VideoRecord]:
    """Run tasks inline (`workers == 1`) or in a pool of processes; stops at the first failure.

    Returns:
        The records of the episode videos copy mode re-encoded (`reason` set), to warn of: the others
        are on disk for finalize, and kept here they would grow with the episodes.
    """
    ws = Workspace(ctx.work)
    # One look at the completion records serves the skip, the bars and the pool's progress.
    pending = [(task, left) for task in tasks if (left := _episodes_left(task, ws))]
    progress = _ReshardProgress(pending, quiet=quiet)
    written: list[VideoRecord] = []
    try:
        if workers <= 1 or len(pending) <= 1:
            for task, _ in pending:
                written += _reencoded(run_task(task, ctx, progress.callback(task)))
        else:
            written = _run_pool(pending, ctx, workers, progress)
    finally:
        progress.close()
    return written


def _run_pool(
    pending: list[tuple[Task, int]], ctx: TaskContext, workers: int, progress: _ReshardProgress
) -> list[VideoRecord]:
    written: list[VideoRecord] = []
    counted = [0] * len(pending)  # episodes of each task on the bars, at most its `left`
    lock = threading.Lock()  # reports arrive on the pool's progress thread, results on this one

    def count(position: int, episodes: int) -> None:
        task, left = pending[position]
        with lock:
            more = min(episodes, left - counted[position])
            counted[position] += more
            progress.callback(task)(more)

    def finished(position: int, records: list[VideoRecord]) -> None:
        nonlocal written
        written += records
        count(position, pending[position][1])  # the rest, whether its reports came first or not

    run_in_pool(
        list(enumerate(task for task, _ in pending)),
        _run_in_worker,
        ctx,
        workers=workers,
        tmp_dir=Workspace(ctx.work).tmp_dir,
        on_result=finished,
        rerun=f"rerun the same command to resume (finished outputs are kept in {ctx.work})",
        on_progress=lambda item: count(*item),
    )
    return written


def _run_in_worker(ctx: TaskContext, job: tuple[int, Task]) -> list[VideoRecord]:
    """A task in a worker: each episode it writes moves the parent's bar as it is written, not when the
    task (a whole source file of episodes) ends."""
    position, task = job
    return _reencoded(run_task(task, ctx, lambda episodes: report_progress((position, episodes))))


def _reencoded(records: list[VideoRecord]) -> list[VideoRecord]:
    return [record for record in records if record.reason is not None]
