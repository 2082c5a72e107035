"""The jobs of `verify --workers N`: the per-file and per-episode check classes split into parts that run
in `reshard.job.process_pool`'s workers (or one after another with one worker), judged in order.

`files` splits into runs of files, `tables` into data files, `videos` (with `source-videos`' comparisons)
into ranges of episodes. A job records what it finds in a fresh `VerifyRun` and returns it; what it
raises comes back as a value, so that the parent raises the error of the first job in order, as one pass
would. A job returns only what the parent needs (violations; video outcomes with a problem or a
comparison), so the parent's memory grows with what is wrong, not with the episodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from reshard.job.execute import maybe_die
from reshard.job.process_pool import WorkerPool
from reshard.verify.context import VerifyRun, Violation
from reshard.verify.episode_videos import RangeOutcome, episode_ranges, read_episode_videos
from reshard.verify.output_checks import check_files, check_table

T = TypeVar("T")

# Jobs per worker: enough that a slow part does not leave the other workers idle for long.
_JOBS_PER_WORKER = 4


@dataclass(frozen=True)
class VerifyJob:
    """One part of a check class.

    Attributes:
        check: the class.
        files: `files`: the files checked, with whether the store lists them.
        table: `tables`: the data file and the positions of its episodes in the index.
        episodes: `videos`: the episodes whose videos are read.
        compare: `videos`: also compare them with the source.
    """

    check: Literal["files", "tables", "videos"]
    files: tuple[tuple[str, bool], ...] = ()
    table: tuple[str, tuple[int, ...]] = ("", ())
    episodes: range = range(0)
    compare: bool = False


@dataclass(frozen=True)
class JobResult:
    """What a job found: violations, video outcomes, and what it raised (None: it ran to the end)."""

    violations: tuple[Violation, ...] = ()
    videos: RangeOutcome | None = None
    error: Exception | None = None


def run_job(context: VerifyRun, job: VerifyJob) -> JobResult:
    """Run one job against the shared run's dataset and source (in a worker, or in this process)."""
    maybe_die("verify-job")
    run = dataclasses.replace(context, violations=[], videos=[])
    try:
        if job.check == "videos":
            return JobResult(videos=read_episode_videos(run, job.episodes, compare=job.compare))
        if job.check == "files":
            check_files(run, job.files)
        else:
            check_table(run, *job.table)
    except Exception as exc:  # noqa: BLE001  raised by the parent when the job's turn comes
        return JobResult(tuple(run.violations), error=exc)
    return JobResult(tuple(run.violations))


def file_jobs(files: Sequence[tuple[str, bool]], workers: int) -> list[VerifyJob]:
    return [VerifyJob("files", files=tuple(part)) for part in _split(files, workers)]


def table_jobs(tables: Sequence[tuple[str, tuple[int, ...]]]) -> list[VerifyJob]:
    return [VerifyJob("tables", table=table) for table in tables]


def video_jobs(episodes: int, workers: int, *, compare: bool) -> list[VerifyJob]:
    ranges = episode_ranges(episodes, _parts(workers))
    return [VerifyJob("videos", episodes=r, compare=compare) for r in ranges]


def _split(items: Sequence[T], workers: int) -> list[Sequence[T]]:
    return [items[r.start : r.stop] for r in episode_ranges(len(items), _parts(workers))]


def _parts(workers: int) -> int:
    """Parts a class splits into: one without workers, else `_JOBS_PER_WORKER` per worker."""
    return 1 if workers <= 1 else workers * _JOBS_PER_WORKER


def run_jobs(
    run: VerifyRun,
    jobs: Sequence[VerifyJob],
    pool: WorkerPool | None,
    *,
    take: Callable[[JobResult], JobResult] | None = None,
) -> list[JobResult]:
    """Every job's result, in the jobs' order: in `pool`'s processes, or in this one without a pool.
    `take`, if given, sees each result as it comes back and returns what is kept of it (the worst frames
    of `lrs verify --report`, merged as they come, are not kept with the results).

    Raises:
        WorkerDied: a worker process ended abruptly.
    """
    results: list[JobResult] = [JobResult()] * len(jobs)

    def keep(position: int, result: JobResult) -> None:
        results[position] = result if take is None else take(result)

    if pool is None or len(jobs) <= 1:
        for position, job in enumerate(jobs):
            keep(position, run_job(run, job))
    else:
        pool.run(jobs, run_job, keep)
    return results


def worker_pool(run: VerifyRun, workers: int) -> contextlib.AbstractContextManager[WorkerPool | None]:
    """The pool of `workers` processes the jobs of `run` share (None, the jobs run here, for one)."""
    if workers <= 1:
        return contextlib.nullcontext()
    return WorkerPool(run, workers=workers, tmp_dir=run.tmp, rerun="rerun the same command")


def record(run: VerifyRun, results: Sequence[JobResult]) -> None:
    """The jobs' violations in order, into `run`; the first job that raised raises here.

    Raises:
        Exception: what that job raised.
    """
    for result in results:
        run.violations.extend(result.violations)
        if result.error is not None:
            raise result.error
