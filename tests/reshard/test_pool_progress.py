"""A job in the offline tools' worker pool reports progress as it goes: the parent's `on_progress` gets
each item while the job still runs (a reshard's bar moved only when a whole source file of episodes was
done, so a re-encode sat at 0 for minutes)."""

from __future__ import annotations

import threading
from pathlib import Path

from reshard.job.process_pool import report_progress, run_in_pool


def _job(context: str, job: tuple[int, Path]) -> int:
    """Reports twice, then waits until the parent has seen both reports (the gate file) before it ends."""
    n, gate = job
    report_progress((n, 1))
    report_progress((n, 2))
    for _ in range(600):
        if gate.exists():
            return n * 10
        threading.Event().wait(0.05)
    raise TimeoutError(f"{context}: the parent never saw job {n}'s progress while it ran")


def test_progress_reaches_the_parent_while_the_job_runs(tmp_path: Path) -> None:
    gate = tmp_path / "seen"
    items: list[tuple[int, int]] = []

    def seen(item: tuple[int, int]) -> None:
        items.append(item)
        if len(items) == 4:
            gate.touch()  # both jobs reported: let them finish

    results: dict[int, int] = {}
    run_in_pool(
        [(1, gate), (2, gate)],
        _job,
        "ctx",
        workers=2,
        tmp_dir=tmp_path,
        on_result=lambda position, value: results.__setitem__(position, value),
        rerun="rerun",
        on_progress=seen,
    )
    assert sorted(items) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert results == {0: 10, 1: 20}


def _dies(context: str, job: int) -> int:
    import os
    import signal

    report_progress((job, 1))
    os.kill(os.getpid(), signal.SIGKILL)
    return job


def test_a_worker_killed_after_reporting_leaves_the_parent_free(tmp_path: Path) -> None:
    """One `WorkerDied` line, not a hang: no lock of the progress channel can be left held by the dead."""
    import pytest

    from reshard.errors import WorkerDied

    items: list[object] = []
    with pytest.raises(WorkerDied):
        run_in_pool(
            [1, 2],
            _dies,
            "ctx",
            workers=2,
            tmp_dir=tmp_path,
            on_result=lambda position, value: None,
            rerun="rerun",
            on_progress=items.append,
        )
