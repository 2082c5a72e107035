"""Kill `lrs reshard` with SIGKILL at any point, rerun it: the result is the uninterrupted run's, byte for byte.

A subprocess SIGKILLs itself at the n-th time it reaches a point of the protocol (`LRS_TEST_KILL_AT`):
after an output is staged but before its completion record, after a record, in the middle of
publishing, with meta staged but not published, after `layout.json` but before cleanup. Another test
kills the whole process group (a parent with two pool workers) from outside, mid-download. At the
moment of the kill nothing under --out may be half-written; after the rerun every file finished
before the kill must still be the same inode with the same mtime (never rewritten).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reader.format.index import FILES_INDEX, LAYOUT_JSON
from reshard.job.execute import KILL_ENV
from reshard.job.run import default_work_dir, reshard
from tests.servers import RangeServer

RESHARD = "from reshard.cli import main; main()"


def reshard_argv(source: Path | str, out: Path, *args: str) -> list[str]:
    """The command line of `lrs reshard SOURCE --out OUT ARGS` in a new Python process."""
    return [sys.executable, "-c", RESHARD, "reshard", str(source), "--out", str(out), *args]


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def finished_files(out: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every output that has a completion record, wherever it is (staged or published)."""
    work = default_work_dir(out)
    found = {}
    for record in (work / "done").rglob("*.json"):
        rel = str(record.relative_to(work / "done"))[: -len(".json")]
        path = work / "stage" / rel if (work / "stage" / rel).exists() else out / rel
        found[rel] = (path.stat().st_ino, path.stat().st_mtime_ns)
    return found


def assert_nothing_half_written(
    out: Path, expected: dict[str, bytes], ignore: set[str] = frozenset()
) -> None:
    if not out.exists():
        return
    for rel, data in files_of(out).items():
        if rel not in ignore:
            assert expected.get(rel) == data, f"{rel} is visible under --out but not complete"


@pytest.mark.parametrize(
    "point",
    ["staged:1", "recorded:1", "recorded:9", "published:3", "meta:1", "published:21", "published:24"],
    ids=lambda p: p.replace(":", "-"),
)
def test_sigkill_then_rerun_gives_identical_bytes(
    point: str, sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    expected = files_of(sample_resharded_ds)
    killed = subprocess.run(
        reshard_argv(sample_ds, out, "--quiet"),
        env={**os.environ, KILL_ENV: point},
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert_nothing_half_written(out, expected)
    finished = finished_files(out)
    assert finished or point in ("staged:1", "published:24")

    monkeypatch.delenv(KILL_ENV, raising=False)
    reshard(str(sample_ds), out, quiet=True)
    assert files_of(out) == expected
    for rel, (inode, mtime) in finished.items():
        assert ((out / rel).stat().st_ino, (out / rel).stat().st_mtime_ns) == (inode, mtime), rel
    assert not default_work_dir(out).exists()


@pytest.mark.integration
def test_sigkill_of_parent_and_workers_mid_download(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    expected = files_of(sample_resharded_ds)
    with RangeServer(sample_ds) as server:
        job = subprocess.Popen(
            reshard_argv(server.url, out, "--quiet", "--workers", "2"),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # Kill once the workers have downloaded a few source videos: tasks are then in flight.
            server.wait_for(
                lambda s: (
                    sum(1 for r in s.requests if r.path.startswith("videos/") and r.byte_range is None) >= 9
                ),
                timeout_s=60,
            )
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
        # The URL differs from the local reference's: layout.json and files.parquet record it.
        assert_nothing_half_written(out, expected, ignore={LAYOUT_JSON, FILES_INDEX})
        finished = finished_files(out)
        reshard(server.url, out, workers=2, quiet=True)
    got = files_of(out)
    assert {rel for rel in expected if got.get(rel) != expected[rel]} == {LAYOUT_JSON, FILES_INDEX}
    for rel, (inode, mtime) in finished.items():
        assert ((out / rel).stat().st_ino, (out / rel).stat().st_mtime_ns) == (inode, mtime), rel


@pytest.mark.integration
def test_hevc_reencodes_are_byte_identical_across_runs_and_resumes(sample_ds: Path, tmp_path: Path) -> None:
    """Two `--video hevc` runs in separate processes, and a run killed after a few videos then rerun, give
    the same bytes: x265's sliced lookahead and weighted-prediction analysis made outputs differ (46 of
    80 MP4s, and so the index, before they were turned off)."""

    def run(out: Path, workers: int = 2, **env: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            reshard_argv(sample_ds, out, "--video", "hevc", "--quiet", "--workers", str(workers)),
            env={**os.environ, **env},
            capture_output=True,
            timeout=300,
        )

    for name in ("a", "b"):
        assert run(tmp_path / name).returncode == 0
    first = files_of(tmp_path / "a")
    assert sum(rel.endswith(".mp4") for rel in first) >= 8
    assert files_of(tmp_path / "b") == first
    # Killed in the main process (with one worker), resumed with two: still the same bytes.
    killed = run(tmp_path / "c", workers=1, **{KILL_ENV: "recorded:5"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert run(tmp_path / "c").returncode == 0
    assert files_of(tmp_path / "c") == first


@pytest.mark.integration
@pytest.mark.parametrize("point", ["staged:1", "recorded:2", "staged:3"], ids=lambda p: p.replace(":", "-"))
def test_a_worker_killed_is_one_error_line_then_a_rerun_finishes(
    point: str, sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    """A pool worker SIGKILLed (the OOM killer): exit 3 with one line, promptly (CPython 3.11 could start a
    worker after terminating the others and wait for it forever), its finished work kept for the rerun."""
    out = tmp_path / "out"
    args = reshard_argv(sample_ds, out, "--quiet", "--workers", "2")
    killed = subprocess.run(
        args, env={**os.environ, KILL_ENV: point}, capture_output=True, text=True, timeout=60
    )
    assert killed.returncode == 3, killed.stderr[-2000:]
    assert killed.stderr.startswith("Error: A worker process ended abruptly (killed, or out of memory)")
    assert len(killed.stderr.strip().splitlines()) == 1, killed.stderr
    assert default_work_dir(out).exists()
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert files_of(out) == files_of(sample_resharded_ds)
