"""Prove an lrs/1 dataset: every invariant of the layout, and with a source, equality with it.

Checks run in classes, in this order, and stop after the first class that finds violations (a broken
index makes every later check noise):

A stale index (`reader.format.fresh`: the dataset edited after its reshard, or any `files` violation) is
named in the report's first line, with the command that rebuilds it; the classes run as always.
1. `layout`   meta/lrs/ is present, well-formed and agrees with meta/info.json; the dataset opens as v3.
2. `files`    every file of files.parquet exists with its size and sha256; no file is unlisted.
3. `tables`   one row group per episode, rows in index order, frame indices 0..length-1, page index and
              statistics written, the index's row-group byte range exact.
4. `pointers` every meta/episodes pointer is true: data file, rows, video file, timestamps 0..length/fps.
5. `videos`   each episode video has `length` frames at i / fps, starting on a keyframe, as info.json says.
6. `source-tables` (with a source) schema, metadata, tasks, stats and every row equal the source's.
7. `source-videos` (with a source) decoded frames identical (copied) or above a PSNR floor, with the
              source's colours (re-encoded).

Classes 2 to 5 are in `reshard.verify.output_checks`, 6 and 7 in `reshard.verify.against_source`; what
they share in `reshard.verify.context`. `files`, `tables` and `videos` run as jobs in `workers` processes
(`reshard.verify.jobs`), judged in order, so the report does not depend on their number; each episode
video is read once, for `videos` and `source-videos` both (`reshard.verify.episode_videos`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cache.arguments import check_int
from cache.redaction import redact
from cache.remote import Remote, resolve
from reader.errors import DatasetError, LayoutError
from reader.format.catalog import check_fresh
from reader.format.index import FILES_INDEX, LAYOUT_JSON
from reader.format.layout import Layout, read_files_index
from reader.format.parquet import parquet_limits
from reader.format.v3 import INFO_PATH
from reshard.job.lock import running_job
from reshard.job.process_pool import WorkerPool
from reshard.job.run import default_work_dir
from reshard.source.dropped import DROPPED_JSON
from reshard.source.fingerprint import SourceFingerprint, describe_change
from reshard.source.model import V3Source, check_files_exist, open_source
from reshard.verify.against_source import as_resharded, check_source_tables
from reshard.verify.context import VerifyRun, Violation
from reshard.verify.episode_videos import RangeOutcome, judge_source_videos, judge_videos
from reshard.verify.jobs import JobResult, file_jobs, record, run_jobs, table_jobs, video_jobs, worker_pool
from reshard.verify.output_checks import check_pointers, fail_unlisted, files_to_check, tables_to_check
from reshard.verify.report import VerifyReport
from reshard.verify.report_frames import ReportLook, VideoCost, WorstFrames, camera_looks
from reshard.video.compare import DEFAULT_MIN_PSNR_DB


def verify(
    url: str,
    *,
    against: str | None = None,
    min_psnr: float = DEFAULT_MIN_PSNR_DB,
    storage_options: dict[str, Any] | None = None,
    workers: int = 1,
    worst_frames: int = 0,
) -> VerifyReport:
    """Check every lrs/1 invariant of the dataset at `url`, and with `against` its equality with the source.

    Args:
        url: the lrs/1 dataset (path or URL).
        against: the v3 source it was resharded from.
        min_psnr: the lowest per-frame PSNR (dB) accepted for a re-encoded episode video.
        storage_options: passed to the fsspec filesystems.
        workers: processes checking files, tables and videos at once (the report is the same whatever
            their number).
        worst_frames: with `against`, also keep each camera's worst frames (one per episode, at most
            this many) and what its videos cost, in the report's `look`, for `lrs verify --report`
            (`reshard.verify.report_page`); 0 keeps none.

    Returns:
        The checks passed and the violations of the first failing class.

    Raises:
        DatasetError: `against` is not a readable v3 dataset, or `url` holds no dataset at all (no
            `meta/info.json`): nothing to check, which is an input error, not a failed check.
        WorkerDied: a worker process ended abruptly.
    """
    check_int("workers", workers, 1)
    check_int("worst_frames", worst_frames, 0)
    # The files are checked for the episodes the output kept (`_as_resharded`).
    source = open_source(against, storage_options=storage_options, check_files=False) if against else None
    remote = resolve(url, storage_options=storage_options)
    if not remote.exists(INFO_PATH):
        raise DatasetError(_not_a_dataset(remote), file=remote.display(INFO_PATH))
    stale = _stale(remote)
    try:
        layout = Layout.load(remote)
        # Missing files are the next class's business, reported there with the rest.
        # Its pointers as they are, for `pointers` to check (and no footer read: a data file of N row groups
        # takes about 5 KB per row group to parse); its per-episode stats only to compare with the source's.
        dataset = open_source(
            remote.url,
            storage_options=storage_options,
            check_files=False,
            locate_rows=False,
            all_columns=source is not None,
        )
    except (LayoutError, DatasetError) as exc:
        violation = Violation("layout", str(exc))
        return VerifyReport(remote.url, source.url if source else None, (), (violation,), stale=stale)
    changed = _source_change(layout, source) if source is not None else None
    checks = _Checks(workers, compare=source is not None and changed is None, keep=worst_frames)
    classes: list[tuple[str, Callable[[VerifyRun], None]]] = [
        ("files", checks.files),
        ("tables", checks.tables),
        ("pointers", check_pointers),
        ("videos", checks.videos),
    ]
    if changed is not None:
        classes.append(("source-tables", lambda run: run.fail("source-tables", changed, LAYOUT_JSON)))
    elif source is not None:
        classes += [("source-tables", check_source_tables), ("source-videos", checks.source_videos)]
        try:
            source = as_resharded(source, remote)
        except (DatasetError, ValueError) as exc:
            violation = Violation("source-tables", str(exc), DROPPED_JSON)
            return VerifyReport(remote.url, source.url, ("layout",), (violation,), stale=stale)
        check_files_exist(source)
    passed = ["layout"]
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="lrs-verify-"))
        run = VerifyRun(remote, Path(tmp), min_psnr, layout, dataset, source, keep_worst=worst_frames)
        checks.pool = stack.enter_context(worker_pool(run, workers))
        for name, check in classes:
            check(run)
            if run.violations:
                break
            passed.append(name)
    look = None
    if worst_frames and source is not None:
        look = ReportLook(min_psnr, camera_looks(source, checks.costs(), checks.worst, run.colours))
    return VerifyReport(
        url=remote.url,
        against=source.url if source else None,
        passed=tuple(passed),
        violations=tuple(run.violations),
        videos=tuple(run.videos),
        stale=stale or _files_differ(remote, run.violations),
        look=look,
    )


def _stale(remote: Remote) -> str | None:
    """Why the index is stale (`reader.format.fresh`), or None where it is fresh or cannot be read (a
    broken index is the `layout` class's to report)."""
    try:
        files = read_files_index(remote, remote.bounded(parquet_limits(FILES_INDEX)).cat)
    except (LayoutError, FileNotFoundError):
        return None
    stale = check_fresh(remote, files)
    return None if stale is None else stale.describe(remote)


def _files_differ(remote: Remote, violations: list[Violation]) -> str | None:
    """Where the `files` class failed, the headline that says so: the index no longer describes the
    files (a same-size edit, which only hashing them shows, or damage)."""
    if not violations or violations[0].check != "files":
        return None
    return (
        f"stale lrs index: files are not those meta/lrs/files.parquet lists ({violations[0]}). Expected "
        f"the files meta/lrs/ indexes: rebuild it with `lrs reshard {remote.shown} --out NEW`, or restore "
        "them."
    )


class _Checks:
    """The classes that run as jobs (`reshard.verify.jobs`), in `workers` processes; the episode videos
    are read once, for both `videos` and `source-videos` (with `compare`); with `keep`, each camera's
    `keep` worst frames are merged as the jobs return them (`lrs verify --report`)."""

    def __init__(self, workers: int, *, compare: bool, keep: int = 0) -> None:
        self.workers, self.compare = workers, compare
        self.ranges: list[RangeOutcome] = []
        self.pool: WorkerPool | None = None  # set once the run exists (`worker_pool`)
        self.worst = WorstFrames(keep)

    def _take_worst(self, result: JobResult) -> JobResult:
        if result.videos is None or not result.videos.worst:
            return result
        self.worst.add(result.videos.worst)
        return dataclasses.replace(result, videos=dataclasses.replace(result.videos, worst=()))

    def costs(self) -> list[tuple[str, VideoCost]]:
        """Each compared episode video's camera and cost, in episode order."""
        return [(c.key, c.cost) for r in self.ranges for c in r.cameras if c.cost is not None]

    def files(self, run: VerifyRun) -> None:
        listed, unlisted = files_to_check(run)
        record(run, run_jobs(run, file_jobs(listed, self.workers), self.pool))
        fail_unlisted(run, unlisted)

    def tables(self, run: VerifyRun) -> None:
        record(run, run_jobs(run, table_jobs(tables_to_check(run)), self.pool))

    def videos(self, run: VerifyRun) -> None:
        jobs = video_jobs(len(run.layout.episodes), self.workers, compare=self.compare)
        results = run_jobs(run, jobs, self.pool, take=self._take_worst)
        # A job that raised outside the reading of a video (a fetch) stops the class at its turn too.
        self.ranges = [r.videos if r.videos is not None else RangeOutcome((), r.error) for r in results]
        judge_videos(run, self.ranges)

    def source_videos(self, run: VerifyRun) -> None:
        judge_source_videos(run, self.ranges)


def _source_change(layout: Layout, source: V3Source) -> str | None:
    """Where the output records the fingerprint of the source it was made from and `source` has another,
    the violation saying so (its checks would only find the consequences: other lengths, other rows)."""
    recorded = SourceFingerprint.from_json(layout.layout.get("source", {}).get("fingerprint"))
    if recorded is None or source.fingerprint is None or recorded == source.fingerprint:
        return None
    return (
        f"{redact(layout.url)} was resharded from another version of {redact(source.url)}: "
        f"{describe_change(recorded, source.fingerprint)}. Expected the source it was resharded from, whose "
        "metadata fingerprint meta/lrs/layout.json records."
    )


def _not_a_dataset(remote: Remote) -> str:
    """Why a local `url` holds no dataset: a reshard still writing it (its work directory's lock is held),
    or none at all."""
    local = remote.local_path("")
    if local is not None:
        holder = running_job(default_work_dir(Path(local.rstrip("/"))))
        if holder is not None:
            return (
                f"missing: not a LeRobot dataset root yet: a reshard is writing it ({holder}). Expected it "
                "finished: rerun verify when that reshard has ended"
            )
    return "missing: not a LeRobot dataset root"
