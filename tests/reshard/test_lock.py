"""One job per output: a second reshard into the same --out is refused in one line naming the holder while
the first runs; parts of one job run side by side; the lock of a dead process never blocks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.errors import ReshardError
from reshard.job.lock import LOCK_NAME, job_lock
from reshard.job.run import default_work_dir, reshard
from tests.reshard.test_reshard_resume import files_of, reshard_argv

HOLD = """
import sys
from pathlib import Path
from reshard.job.lock import job_lock
part = tuple(map(int, sys.argv[3].split("/"))) if len(sys.argv) > 3 else None
with job_lock(Path(sys.argv[1]), Path(sys.argv[2]), part=part, what="reshard" if part is None else "part " + sys.argv[3]):
    print("held", flush=True)
    sys.stdin.read()
"""


def take(work: Path, out: Path, *, part: tuple[int, int] | None) -> None:
    """Take the lock and release it at once."""
    with job_lock(work, out, part=part, what="reshard" if part is None else "part"):
        pass


@pytest.fixture
def holder(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start a process that holds the lock of `work` (as a whole run, or a part) until it is ended."""
    started: list[subprocess.Popen[str]] = []

    def start(work: Path, part: str | None = None) -> subprocess.Popen[str]:
        args = [sys.executable, "-c", HOLD, str(work), str(tmp_path / "out"), *([part] if part else [])]
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_second_whole_run_is_refused_naming_the_holder(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    with job_lock(work, out, part=None, what="reshard"):
        held = json.loads((work / LOCK_NAME).read_text())
        assert (held["pid"], held["what"]) == (os.getpid(), "reshard")
        for part in (None, (0, 2)):
            with pytest.raises(
                ReshardError, match=rf"another lrs reshard is writing it \(reshard, pid {os.getpid()} on "
            ):
                take(work, out, part=part)
    assert not work.exists()  # the lock file, and the work directory it alone was in, are gone


def test_parts_run_side_by_side_but_not_twice_nor_beside_a_whole_run(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    with job_lock(work, out, part=(0, 2), what="part 0/2"), job_lock(work, out, part=(1, 2), what="part 1/2"):
        with pytest.raises(ReshardError, match=r"\(part 0/2, pid \d+ on .*; lock .*part-0-of-2\.lock\)"):
            take(work, out, part=(0, 2))
        with pytest.raises(ReshardError, match=r"\(part 0/2, pid \d+ on .*, and 1 more parts; lock "):
            take(work, out, part=None)
    with job_lock(work, out, part=None, what="finalize"):  # once the parts ended
        pass


def test_the_lock_of_a_killed_process_does_not_block(tmp_path: Path, holder) -> None:  # type: ignore[no-untyped-def]
    work = tmp_path / "work"
    proc = holder(work)
    with pytest.raises(ReshardError, match=rf"pid {proc.pid} "):
        take(work, tmp_path / "out", part=None)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert str(proc.pid) in (work / LOCK_NAME).read_text()  # left behind, naming a dead process
    with job_lock(work, tmp_path / "out", part=None, what="reshard"):
        assert json.loads((work / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_lrs_reshard_refuses_an_out_another_run_writes_then_runs(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path, holder
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    work = default_work_dir(out)
    proc = holder(work)
    for extra in ([], ["--part", "1/2"], ["--finalize"]):
        result = CliRunner().invoke(cli, ["reshard", str(sample_ds), "--out", str(out), "--quiet", *extra])
        assert result.exit_code == 3, result.output
        assert result.output.startswith(
            f"Error: Invalid --out ({out}): another lrs reshard is writing it (reshard, pid {proc.pid} on "
        )
        assert len(result.output.strip().splitlines()) == 1
    assert sorted(os.listdir(work)) == [LOCK_NAME]  # the refused runs touched nothing
    proc.kill()
    proc.wait()
    reshard(str(sample_ds), out, quiet=True)
    assert not work.exists()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in sample_resharded_ds.iterdir())


def test_a_part_does_not_clear_the_temp_files_of_a_part_beside_it(
    sample_ds: Path, tmp_path: Path, holder
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    work = default_work_dir(out)
    holder(work, "0/2")
    (work / "tmp").mkdir(parents=True)
    (work / "tmp" / "other-part.mp4").write_bytes(b"being written")
    reshard(str(sample_ds), out, part=(1, 2), quiet=True)
    assert (work / "tmp" / "other-part.mp4").read_bytes() == b"being written"


@pytest.mark.integration
def test_parts_run_at_once_then_finalize_equal_one_run(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    parts = [
        subprocess.Popen(
            reshard_argv(sample_ds, out, "-q", "--part", f"{i}/3"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    for part in parts:
        _, err = part.communicate(timeout=120)
        assert part.returncode == 0, err
    reshard(str(sample_ds), out, finalize_only=True, quiet=True)
    assert files_of(out) == files_of(sample_resharded_ds)


def test_without_file_locks_the_job_runs_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import errno
    import fcntl

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with job_lock(tmp_path / "work", tmp_path / "out", part=None, what="reshard"):
        ran = True
    assert ran and "the filesystem has no file locks" in caplog.text
