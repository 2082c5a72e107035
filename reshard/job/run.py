"""The reshard job: open the source, plan, run this call's tasks, then finalize and publish.

Every output is written in a work directory beside `--out` (by default `<parent>/.<name>.lrs-work`):

    options.json       the source and parameters of the job; a rerun with others is refused
    source.json        the fingerprint of the source's metadata (`reshard.source.fingerprint`); a rerun, a
                       part or a finalize against a source changed since is refused
    lock               held by the run (exclusively) or its parts (shared): one job per output
                       (`reshard.job.lock`)
    stage/<path>       finished output files, waiting to be published
    done/<path>.json   one completion record per finished output (datatrove style)
    tmp/               files being written, and source files fetched from a remote

A task skips the outputs that have a record, so a rerun after a crash (SIGKILL included) redoes only
unfinished files and never rewrites a finished one. Finalize builds `meta/` from the records, then
publishes by renames: data and videos first, `meta/`, then `meta/lrs/layout.json` last, so nothing
half-written is ever visible under `--out` and a dataset with `layout.json` is complete. The work
directory is removed at the end. A fresh run that finds bad input removes what it created.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import av
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cache.arguments import local_dir
from cache.exits import Terminated
from cache.redaction import redact
from cache.store import atomic_write
from cache.trust import owned_dir
from reader.decode.depth import is_depth
from reader.errors import DatasetError
from reader.format.index import EPISODES_INDEX, LAYOUT_JSON, parse_layout_json
from reader.format.jsonfile import read_json_file
from reader.format.locate import read_footer
from reshard.errors import ReshardError, WorkerDied
from reshard.job.estimate import JobEstimate, estimate_job
from reshard.job.execute import (
    DEFAULT_OPTIONS,
    ReshardOptions,
    TaskContext,
    Workspace,
    list_files,
    maybe_die,
    run_tasks,
)
from reshard.job.lock import job_lock
from reshard.job.meta import Record, build_meta, reencoded_videos
from reshard.job.plan import ReshardPlan, Task, VideoTask, make_plan
from reshard.source.checks import absent_feature, iter_video_defects
from reshard.source.defects import defects_error, describe_defect, raise_defects
from reshard.source.diagnosis import Defect, examine
from reshard.source.dropped import SKIPPED_BY_USER, Dropped, Selection, make_selection, parse_episode_list
from reshard.source.fingerprint import SourceFingerprint, describe_change
from reshard.source.model import V3Source, check_files_exist, open_source
from reshard.source.selection import select
from reshard.video.encode import size_refusal, target_pix_fmt
from reshard.video.resize import Resize

log = logging.getLogger(__name__)

# The selection of a job that leaves episodes out, in its work directory (published as meta/lrs/dropped.json).
DROPPED_JSON_NAME = "dropped.json"
# The fingerprint of the source a job began with, in its work directory.
SOURCE_JSON_NAME = "source.json"


@dataclass(frozen=True)
class ReshardResult:
    """What one `reshard` call did.

    Attributes:
        out: the output directory.
        episodes: episodes of the source.
        tasks_run: tasks this call ran (the others were done before, or belong to other parts).
        finalized: whether the output is complete (meta written and published).
        already_complete: the output was complete before this call.
        reencoded: (episode, camera, reason) of the episodes re-encoded in copy mode.
        seconds: wall time.
        part: the part run, `(index, count)`, when only one part was.
        dropped: the source episodes left out and why (`--skip-defective`, `--skip-episodes`); `episodes`
            counts the ones written.
    """

    out: Path
    episodes: int
    tasks_run: int
    finalized: bool
    already_complete: bool = False
    reencoded: tuple[tuple[int, str, str], ...] = ()
    seconds: float = 0.0
    part: tuple[int, int] | None = None
    dropped: tuple[Dropped, ...] = ()


def default_work_dir(out: Path) -> Path:
    """The work directory of an output directory: a hidden sibling, so renames stay on one filesystem."""
    out = out.absolute()
    return out.parent / f".{out.name}.lrs-work"


def slurm_part(environ: dict[str, str] | None = None) -> tuple[int, int] | None:
    """The part of a SLURM array task, `((SLURM_ARRAY_TASK_ID - MIN) / STEP, SLURM_ARRAY_TASK_COUNT)`,
    or None outside an array (`--array=0-62:2` has tasks 0, 2, ..., 62: parts 0 to 31 of 32).

    Raises:
        ReshardError: the variables do not describe a task of the array.
    """
    env = os.environ if environ is None else environ
    if "SLURM_ARRAY_TASK_ID" not in env or "SLURM_ARRAY_TASK_COUNT" not in env:
        return None
    names = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_TASK_COUNT")
    defaults = {"SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_STEP": "1"}
    raw = {n: env.get(n, defaults.get(n, "")) for n in names}
    try:
        task, low, step, count = (int(raw[n]) for n in names)
    except ValueError:
        raise ReshardError(f"Invalid SLURM array variables ({raw}). Expected integers.") from None
    index, off_step = divmod(task - low, step) if step > 0 else (-1, 0)
    if off_step or not 0 <= index < count:
        raise ReshardError(
            f"Invalid SLURM array task ({raw}). Expected a task MIN + k * STEP with 0 <= k < COUNT."
        )
    return index, count


def _check_apart(source: V3Source, out: Path, work: Path) -> None:
    """`--out` (and the work directory) may neither be nor lie inside a local source, nor hold it: the
    output would land inside the dataset it is read from, or replace it."""
    root = source.remote.local_path("")
    if root is None:
        return
    src = Path(root).resolve()
    for name, path in (("--out", out), ("work directory", work)):
        where = path.resolve()
        if where == src or src in where.parents or where in src.parents:
            raise ReshardError(
                f"Invalid {name} ({path}): {'inside' if src in where.parents else 'overlapping'} the source "
                f"dataset {src}. Expected a directory apart from the source."
            )


def _check_same_filesystem(work: Path, out: Path) -> None:
    """Outputs are published by renaming them from the work directory into `out`: both must be on one
    filesystem, checked before any work (a rename across filesystems fails only at the end)."""

    def device(path: Path) -> int:
        while not path.exists():
            path = path.parent
        return path.stat().st_dev

    if device(work) != device(out):
        raise ReshardError(
            f"Invalid work directory ({work}): on another filesystem than --out ({out}). Expected one "
            "filesystem, so that finished files are moved into place by a rename."
        )


def source_sizes(source: V3Source) -> dict[str, int]:
    """The byte size of every source data file (one listing, or one request per file where listing fails)."""
    sizes = list_files(source.remote, "data")
    return {rel: sizes.get(rel) or source.remote.size(rel) for rel in source.data_files()}


def _context(source: V3Source, work: Path, options: ReshardOptions) -> TaskContext:
    """What every task needs, from the first data file's footer (every other file must have its schema,
    `SourceFileRows`).

    Raises:
        DatasetError: the first data file lacks a feature `meta/info.json` declares (`absent_feature`).
    """
    first = source.data_files()[0]
    footer = read_footer(source.remote, first)
    absent = absent_feature(
        source.info, footer.schema.to_arrow_schema().names, file=source.remote.display(first)
    )
    if absent is not None:
        raise absent
    codec = footer.row_group(0).column(0).compression.lower() if footer.num_row_groups else "snappy"
    return TaskContext(
        source=source,
        work=work,
        options=options,
        schema_ipc=footer.schema.to_arrow_schema().serialize().to_pybytes(),
        compression="none" if codec == "uncompressed" else codec,
    )


def check_video_files(source: V3Source, tasks: list[VideoTask]) -> None:
    """The tasks' source videos are readable and hold their episodes' time ranges.

    Raises:
        DatasetError: the first defect, naming its file and episode; when there are more, the message
            counts them and names every defective episode (`lrs doctor` lists each one).
    """
    raise_defects(
        list(iter_video_defects(source, sorted({t.source for t in tasks}), per_episode=True)), source.url
    )


def check_frame_sizes(
    source: V3Source, tasks: list[VideoTask], mode: str, *, resize_width: int | None = None
) -> None:
    """Every camera's frame size fits the re-encode, read from the headers of the tasks' source videos: an
    `h264` re-encode cannot hold an odd width or height (`target_pix_fmt`; a resize, to even sizes, makes
    every size fit).

    Raises:
        ReshardError: the first camera and file whose size does not fit, in one line.
    """
    if mode != "h264" or resize_width is not None:  # copy keeps the source's format; hevc takes any size
        return
    for rel in sorted({t.source for t in tasks if not is_depth(source.info.features[t.key])}):
        where = source.remote.display(rel)
        try:
            with source.remote.open(rel) as handle, av.open(handle) as container:
                cc = container.streams.video[0].codec_context
                width, height = cc.width, cc.height
        except (av.error.FFmpegError, IndexError, OSError) as exc:
            raise DatasetError(f"not a readable video ({exc})", file=where) from exc
        if target_pix_fmt(mode, width, height) is None:
            key = next(t.key for t in tasks if t.source == rel)
            raise ReshardError(f"{where}: camera {key!r}: {size_refusal(mode, width, height)}")


def every_defect(source: V3Source, first: DatasetError, *, quiet: bool) -> DatasetError:
    """The error of a reshard stopped by the defect `first`: with every defect of the source counted and
    every defective episode named (`lrs doctor`'s checks, run once the reshard has failed)."""
    log.info("%s: checking the whole source for other defects", first.file)
    report = examine(source.whole, progress=not quiet)
    return first if len(report.defects) <= 1 else defects_error(report.defects, source.url)


# Checks whose defects outside every episode leave the output untouched: an orphan file is not copied, and
# rows no episode points at are not read.
_HARMLESS = ("orphans", "rows")


def select_episodes(
    source: V3Source, options: ReshardOptions, ws: Workspace, *, quiet: bool, record: bool = True
) -> V3Source:
    """The source with the episodes `options` leaves out dropped and the rest renumbered.

    The selection is made once per job and kept in the work directory, so that every part, a rerun and
    finalize agree on it (a part that finds it there does not check the source again).

    Raises:
        ReshardError: `--skip-episodes` names an episode the source does not have.
        DatasetError: a defect outside every episode that touches the output, or no episode left.
    """
    path = ws.root / DROPPED_JSON_NAME
    if path.exists():
        selection = Selection.from_json(read_json_file(path), file=str(path))
    else:
        try:
            skipped = (
                parse_episode_list(options.skip_episodes, len(source.episodes))
                if options.skip_episodes
                else []
            )
        except ValueError as exc:
            raise ReshardError(f"{exc} (--skip-episodes)") from None
        defects: list[Defect] = []
        if options.skip_defective:
            defects = examine(source, progress=not quiet).defects
        fatal = [d for d in defects if d.episode is None and d.check not in _HARMLESS]
        raise_defects(fatal, source.url)
        ignored = [describe_defect(d) for d in defects if d.episode is None]
        # An episode's first defect says why it is left out.
        defective = {d.episode: describe_defect(d) for d in reversed(defects) if d.episode is not None}
        selection = make_selection(len(source.episodes), skipped, defective, ignored)
        if record:
            _write_once(ws, path, selection.to_json())  # a part that loses the race computed the same
    kept = select(source, selection)
    if not options.skip_defective:  # doctor's checks, which made the selection, found every missing file
        check_files_exist(kept)
    for dropped in selection.dropped:
        if dropped.reason != SKIPPED_BY_USER:
            log.warning("episode %d left out: %s", dropped.episode, dropped.reason)
    return kept


def _plan_call(
    source: V3Source,
    options: ReshardOptions,
    ws: Workspace,
    *,
    part: tuple[int, int] | None,
    finalize_only: bool,
    quiet: bool,
    record: bool = True,
) -> tuple[V3Source, dict[str, int], ReshardPlan, list[Task]]:
    """The (selected) source, its data files' sizes, the plan, and the tasks this call runs, once the
    source's files and frame sizes are checked; `record`: keep the selection in the work directory.

    Raises:
        DatasetError: a defect of the source.
        ReshardError: a frame size the re-encode cannot make.
    """
    if options.skipping:
        source = select_episodes(source, options, ws, quiet=quiet, record=record)
    else:
        check_files_exist(source)
    sizes = source_sizes(source)
    plan = make_plan(
        source.info,
        source.episodes,
        sizes,
        data_file_mb=options.data_file_mb,
        episodes_per_file=options.episodes_per_data_file,
    )
    tasks = [] if finalize_only else (plan.tasks() if part is None else plan.part(*part))
    video_tasks = [t for t in tasks if isinstance(t, VideoTask)]
    if not options.skip_defective:  # the selection already left out every episode of a bad video
        check_video_files(source, video_tasks)
    resize_width = None if options.resize is None else Resize.parse(options.resize).width
    check_frame_sizes(source, video_tasks, options.video, resize_width=resize_width)
    return source, sizes, plan, tasks


def estimate_reshard(
    src: str,
    out: str | os.PathLike[str],
    *,
    options: ReshardOptions = DEFAULT_OPTIONS,
    workers: int | None = None,
    part: tuple[int, int] | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    quiet: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> JobEstimate:
    """What `reshard` with these arguments would do, and for a re-encode how long it would take here
    (`reshard.job.estimate`), writing nothing: `lrs reshard --dry-run`. An unfinished job's finished
    outputs count as done.

    Raises:
        DatasetError, ReshardError: what `reshard` would refuse before any work.
    """
    _, ws, source = _open_job(src, out, work_dir, storage_options)
    source, sizes, _, tasks = _plan_call(
        source, options, ws, part=part, finalize_only=False, quiet=quiet, record=False
    )
    return estimate_job(source, tasks, options, ws, workers=workers, data_sizes=sizes)


def _job_doc(source: V3Source, options: ReshardOptions) -> dict[str, Any]:
    return {"source": redact(source.url), "params": options.to_json()}


def _claim(ws: Workspace, doc: dict[str, Any], out: Path, fingerprint: SourceFingerprint | None) -> None:
    """Record the job's source, options and source fingerprint, or check that they are the recorded ones
    (the fingerprint was checked before, `_check_source`)."""
    recorded_source = ws.root / SOURCE_JSON_NAME
    if fingerprint is not None and not recorded_source.exists():  # first: options.json marks a job begun
        _write_once(ws, recorded_source, json.dumps(fingerprint.to_json(), indent=1).encode())
    path = ws.root / "options.json"
    if not path.exists():
        # A part that loses the race checks the winner's record like any other.
        _write_once(ws, path, json.dumps(doc, indent=2).encode())
    recorded = json.loads(path.read_text())
    expected = _as_recorded(recorded, doc)
    if recorded != expected:
        raise ReshardError(
            f"Invalid options ({_differences(recorded, expected)}) for {out}. Expected the "
            "options of the unfinished "
            f"reshard in {ws.root}: rerun with them, or remove that directory (and {out}) to start over."
        )


def _write_once(ws: Workspace, path: Path, data: bytes) -> None:
    """Write `path` of the work directory whole, unless another part of the job already has: the file
    is linked into place, and a link fails when the name exists."""
    owned_dir(str(ws.root), what="work directory")
    tmp = ws.temp(path.suffix)
    tmp.write_bytes(data)
    with contextlib.suppress(FileExistsError):
        os.link(tmp, path)
    tmp.unlink()


# The option an lrs before the episode cap did not record: its jobs were planned without the cap.
_CAP = "episodes_per_data_file"


def _as_recorded(recorded: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` as the lrs that wrote `recorded` records a job: without the episode cap where that lrs had
    none (whether the cap changes the plan of that job is `_check_cap`'s question)."""
    if _CAP in (recorded.get("params") or {}):
        return doc
    return {**doc, "params": {k: v for k, v in doc["params"].items() if k != _CAP}}


def _uncapped(path: Path) -> bool:
    """Whether the job recorded in `path` (options.json) was begun by an lrs without the episode cap."""
    return path.exists() and _CAP not in (json.loads(path.read_text()).get("params") or {})


def _check_cap(longest: int, cap: int, *, out: Path, what: str, remedy: str) -> None:
    """A job planned without the episode cap, whose data files hold at most `longest` episodes, is this
    job only where the cap cuts none of them (the plan is then the same file for file).

    Raises:
        ReshardError: the cap would plan other data files than the job's.
    """
    if longest > cap:
        raise ReshardError(
            f"Invalid options ({_CAP}: none -> {cap}) for {out}: {what} was planned by an lrs without that cap "
            f"and has a data file of {longest} episodes. Expected its plan: rerun with --episodes-per-data-file "
            f"{longest}, or {remedy}."
        )


def _check_begun_plan(
    ws: Workspace, out: Path, source: V3Source, options: ReshardOptions, sizes: dict[str, int]
) -> None:
    """An unfinished job begun by an lrs without the episode cap goes on only where the cap plans the same
    data files: its finished ones were written to the old plan."""
    if not _uncapped(ws.root / "options.json"):
        return
    mb = options.data_file_mb
    uncapped = make_plan(source.info, source.episodes, sizes, data_file_mb=mb, episodes_per_file=None)
    _check_cap(
        max(len(task.episodes) for task in uncapped.data),
        options.episodes_per_data_file,
        out=out,
        what=f"the unfinished reshard in {ws.root}",
        remedy=f"remove {ws.root} (and {out}) to start over",
    )


def _differences(recorded: dict[str, Any], doc: dict[str, Any]) -> str:
    old = {"source": recorded.get("source"), **recorded.get("params", {})}
    new = {"source": doc.get("source"), **doc.get("params", {})}
    return ", ".join(
        f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    )


def _completed(out: Path, doc: dict[str, Any], source: V3Source) -> bool:
    """Whether `out` holds a finished reshard of this job; refuses one of another job or of another
    version of the source."""
    path = out / LAYOUT_JSON
    if not path.exists():
        return False
    layout = parse_layout_json(read_json_file(path), file=str(path))
    recorded = {"source": layout.get("source", {}).get("url"), "params": layout.get("params")}
    expected = _as_recorded(recorded, doc)
    if recorded != expected:
        raise ReshardError(
            f"Invalid options ({_differences(recorded, expected)}) for {out}. Expected the "
            "options of the finished reshard there: choose another --out, or remove it first."
        )
    if recorded != doc:  # an output of an lrs without the episode cap
        counts = pc.value_counts(pq.read_table(out / EPISODES_INDEX, columns=["data_path"])["data_path"])
        longest = max((c.as_py() for c in counts.field("counts")), default=0)
        remedy = "choose another --out, or remove it first"
        _check_cap(longest, doc["params"][_CAP], out=out, what="the finished reshard there", remedy=remedy)
    # An output of an lrs that recorded no fingerprint is taken as it is.
    old = SourceFingerprint.from_json(layout.get("source", {}).get("fingerprint"))
    if old is not None and source.fingerprint is not None and old != source.fingerprint:
        raise ReshardError(
            f"Invalid source ({redact(source.url)}): changed since {out} was resharded from it "
            f"({describe_change(old, source.fingerprint)}). Expected the source of that reshard: remove "
            f"{out} (or choose another --out) to reshard the source as it is now."
        )
    return True


def _check_source(ws: Workspace, out: Path, source: V3Source) -> None:
    """The source is the one the unfinished job in `ws` began with (`source.json`): else its finished
    outputs, planned from the old metadata, would be published with meta built from the new."""
    path = ws.root / SOURCE_JSON_NAME
    if not path.exists() or source.fingerprint is None:
        return
    try:
        old = SourceFingerprint.from_json(json.loads(path.read_bytes()))
    except ValueError:
        old = None
    if old is None:
        raise ReshardError(
            f"Invalid work directory ({ws.root}): {SOURCE_JSON_NAME} is unreadable. Expected the source "
            f"fingerprint lrs wrote: remove {ws.root} (and {out}) to start over."
        )
    if old != source.fingerprint:
        raise ReshardError(
            f"Invalid source ({redact(source.url)}): changed since the unfinished reshard in {ws.root} began "
            f"({describe_change(old, source.fingerprint)}). Expected the source it began with: remove "
            f"{ws.root} (and {out}) to start over from the source as it is now."
        )


def _check_out(out: Path, ws: Workspace) -> None:
    if out.exists() and not out.is_dir():
        raise ReshardError(f"Invalid output directory ({out}): a file. Expected a directory.")
    if out.exists() and any(out.iterdir()) and not (ws.root / "options.json").exists():
        raise ReshardError(
            f"Invalid output directory ({out}): not empty. Expected an empty or new directory, or the output "
            "of an unfinished `lrs reshard` (with its work directory)."
        )


def reshard(
    src: str,
    out: str | os.PathLike[str],
    *,
    options: ReshardOptions = DEFAULT_OPTIONS,
    workers: int | None = None,
    part: tuple[int, int] | None = None,
    finalize_only: bool = False,
    work_dir: str | os.PathLike[str] | None = None,
    quiet: bool = False,
    storage_options: dict[str, Any] | None = None,
    on_estimate: Callable[[JobEstimate], None] | None = None,
) -> ReshardResult:
    """Rewrite the v3 dataset `src` into the lrs/1 layout in `out`, resuming an unfinished run.

    Args:
        src: the source dataset (path or URL, see `reshard.source.model.open_source`).
        out: the output directory (new, empty, or an unfinished reshard with the same options).
        options: what the output looks like.
        workers: processes running tasks at once (None: one per available CPU for a re-encode, one
            for a copy: `reshard.job.execute.default_workers`).
        part: `(index, count)`: run only this part of the tasks (a SLURM array task), not finalize.
        finalize_only: only finalize: check that every output is done, write meta, publish.
        work_dir: the work directory (default: `default_work_dir(out)`).
        quiet: no progress bars.
        storage_options: passed to the source's fsspec filesystem.
        on_estimate: given what this call will do before its tasks start (`reshard.job.estimate`; a
            re-encode's time is calibrated unless `quiet`).

    Returns:
        What was done.

    Raises:
        DatasetError: the source is malformed (nothing is published).
        ReshardError: `out` holds another job, or finalize finds outputs not done.
    """
    started = time.monotonic()
    out, ws, source = _open_job(src, out, work_dir, storage_options)
    what = "finalize" if finalize_only else "reshard" if part is None else f"part {part[0]}/{part[1]}"
    with job_lock(ws.root, out, part=part, what=what):
        result = _run_locked(
            source,
            out,
            ws,
            options,
            workers=workers,
            part=part,
            finalize_only=finalize_only,
            quiet=quiet,
            on_estimate=on_estimate,
        )
    return replace(result, seconds=time.monotonic() - started)


def _open_job(
    src: str,
    out: str | os.PathLike[str],
    work_dir: str | os.PathLike[str] | None,
    storage_options: dict[str, Any] | None,
) -> tuple[Path, Workspace, V3Source]:
    """A job's local `--out`, its workspace (the work directory on the filesystem of `--out`) and its source
    opened, its warnings logged, the three apart."""
    out = _local(out, "--out", "reshard into a local directory, then push it (`lrs push OUT URL`)")
    work = _local(work_dir, "work_dir", "the work directory is local") if work_dir else default_work_dir(out)
    if work_dir:
        _check_same_filesystem(work, out)
    # With episodes to leave out, files are checked per episode: a missing one drops its episodes.
    # The per-episode stats stay on disk until finalize rewrites them (`reshard.job.meta.episodes_files`).
    source = open_source(src, storage_options=storage_options, check_files=False, all_columns=False)
    for warning in source.warnings:
        log.warning("%s", warning)
    _check_apart(source, out, work)
    return out, Workspace(work), source


def _local(path: str | os.PathLike[str], name: str, hint: str) -> Path:
    try:
        return Path(local_dir(path, name, hint=hint)).absolute()
    except ValueError as exc:
        raise ReshardError(str(exc)) from None


def _run_locked(
    source: V3Source,
    out: Path,
    ws: Workspace,
    options: ReshardOptions,
    *,
    workers: int | None,
    part: tuple[int, int] | None,
    finalize_only: bool,
    quiet: bool,
    on_estimate: Callable[[JobEstimate], None] | None,
) -> ReshardResult:
    """`reshard` once this process holds the job's lock."""
    doc = _job_doc(source, options)
    if _completed(out, doc, source):
        shutil.rmtree(ws.root, ignore_errors=True)
        return ReshardResult(out, len(source.episodes), 0, True, already_complete=True)
    _check_source(ws, out, source)
    _check_out(out, ws)
    fresh = not (ws.root / "options.json").exists()
    if finalize_only and fresh:
        raise ReshardError(
            f"Invalid --finalize for {out}: no unfinished reshard in {ws.root}. Expected every part to have "
            "run first (--part I/N)."
        )
    try:
        if options.skipping:
            _claim(ws, doc, out, source.fingerprint)
        source, sizes, plan, tasks = _plan_call(
            source, options, ws, part=part, finalize_only=finalize_only, quiet=quiet
        )
        _claim(ws, doc, out, source.whole.fingerprint)
        _check_begun_plan(ws, out, source, options, sizes)
        if part is not None:  # what finalize names when some parts are missing
            (ws.root / "parts").mkdir(exist_ok=True)
            (ws.root / "parts" / f"of-{part[1]}").touch()
        if part is None and not finalize_only:  # this run holds the lock alone: no temp file is another's
            shutil.rmtree(ws.root / "tmp", ignore_errors=True)
        if on_estimate is not None and tasks:
            on_estimate(
                estimate_job(
                    source, tasks, options, ws, workers=workers, data_sizes=sizes, calibrate=not quiet
                )
            )
        with _disk_errors(ws, part, kept=not (fresh and part is None)):  # a fresh run's is removed below
            written = run_tasks(tasks, _context(source, ws.root, options), workers=workers, quiet=quiet)
    except (KeyboardInterrupt, Terminated):
        # Ctrl-C or SIGTERM: the workers are stopped (`process_pool._stop_workers`) and what they were writing
        # goes; finished outputs stay for the rerun, which resumes (parts share tmp/, so a part's stays).
        if part is None:
            shutil.rmtree(ws.root / "tmp", ignore_errors=True)
        raise
    except (DatasetError, ReshardError) as exc:
        # A bad source found by a fresh single run leaves nothing behind; parts share the directory. A
        # worker that died is no fault of the input: its finished work stays for the rerun.
        if fresh and part is None and not isinstance(exc, WorkerDied):
            shutil.rmtree(ws.root, ignore_errors=True)
        if isinstance(exc, DatasetError) and exc.episode is not None and not options.skipping:
            raise every_defect(source, exc, quiet=quiet) from exc
        raise
    for record in written:
        if record.reason is not None:
            log.warning("episode %d of %s re-encoded: %s", record.episode, record.key, record.reason)
    dropped = source.selection.dropped if source.selection else ()
    if part is not None:
        return ReshardResult(out, len(source.episodes), len(tasks), False, part=part, dropped=dropped)
    with _disk_errors(ws, part, kept=True):
        records = finalize(source, plan, ws, out, options)
    return ReshardResult(
        out,
        len(source.episodes),
        len(tasks),
        True,
        reencoded=tuple(reencoded_videos(records.values())),
        dropped=dropped,
    )


# A full, over-quota or read-only disk: the job's own writes failed, not its input.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


@contextlib.contextmanager
def _disk_errors(ws: Workspace, part: tuple[int, int] | None, *, kept: bool) -> Iterator[None]:
    """Turn a failed write for want of room into a `ReshardError` naming the file. This run's temp files go
    (a part's stay: parts share them); `kept`: finished outputs stay in the work directory for a rerun."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        if part is None:
            shutil.rmtree(ws.root / "tmp", ignore_errors=True)
        resume = f" (finished outputs are kept in {ws.root}: it resumes)" if kept else ""
        raise ReshardError(
            f"Could not write {exc.filename or ws.root}: {os.strerror(exc.errno)}. Expected room for --out and "
            f"its work directory: make room and rerun the same command{resume}."
        ) from exc


def finalize(
    source: V3Source, plan: ReshardPlan, ws: Workspace, out: Path, options: ReshardOptions
) -> dict[str, Record]:
    """Write meta from the completion records and publish everything into `out`, `layout.json` last.

    Raises:
        ReshardError: some outputs of the plan are not done (a part did not run or failed).
    """
    missing = [p for p in plan.outputs() if not ws.is_done(p)]
    if missing:
        raise ReshardError(
            f"Invalid finalize ({_missing_parts(plan, ws)}{len(missing)} of {len(plan.outputs())} outputs not "
            f"done, first {missing[0]!r}). Expected every part to have run to completion: rerun the missing "
            "parts, then --finalize."
        )
    records = {p: ws.load_record(p) for p in plan.outputs()}
    meta = build_meta(source, plan, records, options.to_json())
    for rel in plan.outputs():
        _publish(ws.stage(rel), out / rel, rel)
    for rel, data in meta:
        target = out / rel
        if target.exists() and target.read_bytes() == data:
            continue
        atomic_write(str(ws.stage(rel)), data)
        maybe_die("meta")
        _publish(ws.stage(rel), target, rel)
    shutil.rmtree(ws.root, ignore_errors=True)
    return records


def _missing_parts(plan: ReshardPlan, ws: Workspace) -> str:
    """'parts 1, 3 of 4 not done; ' for each part count the parts ran with (`--part I/N`), else ''."""
    said = []
    for marker in sorted((ws.root / "parts").glob("of-*")):
        count = int(marker.name.removeprefix("of-"))
        parts = [
            i for i in range(count) if any(not ws.is_done(o) for t in plan.part(i, count) for o in t.outputs)
        ]
        if parts:
            said.append(
                f"part{'s' if len(parts) > 1 else ''} {', '.join(map(str, parts))} of {count} not done; "
            )
    return "".join(said)


def _publish(staged: Path, target: Path, rel: str) -> None:
    if staged.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, target)
        maybe_die("published")
    elif not target.exists():
        raise ReshardError(
            f"Invalid work directory: {rel!r} has a completion record but no file. Expected both."
        )
