"""A re-encode as a job: cut into runs of episodes that keep every CPU busy, counted in frames as they are
encoded, and estimated before it starts (`--dry-run`, and the first lines of a real run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.job import ReshardOptions, estimate_reshard
from reshard.job.estimate import CALIBRATION_FRAMES
from reshard.job.execute import ABORT_ENV, Workspace, _runs, available_cpus, reencode_jobs
from reshard.job.plan import DataTask, VideoOutput, VideoTask
from reshard.job.run import default_work_dir
from reshard.source.model import open_source
from reshard.video.write import write_episode_video
from tests.reshard.test_reshard import files_of


def _video(episode: int, length: int) -> VideoOutput:
    return VideoOutput(episode, "cam", f"videos/cam/episode_{episode:06d}.mp4", 0, episode, 0.0, length)


@pytest.mark.parametrize("pieces", [1, 2, 3, 7, 40])
def test_runs_cover_every_video_once_in_order_in_at_most_pieces_of_about_equal_frames(pieces: int) -> None:
    videos = [_video(e, length) for e, length in enumerate([30, 5, 60, 12, 40, 40, 8, 100, 3, 22])]
    runs = _runs(videos, pieces)
    assert [v for run in runs for v in run] == videos
    assert 1 <= len(runs) <= pieces and all(runs)
    # Each run but the last ends once the runs so far hold their share of the frames, and a run of more
    # than one episode did not hold it before its last.
    total = sum(v.length for v in videos)
    done = 0
    for n, run in enumerate(runs[:-1], start=1):
        before = done + sum(v.length for v in run[:-1])
        done += sum(v.length for v in run)
        assert done >= total * n / pieces
        assert len(run) == 1 or before < total * n / pieces


def test_reencode_jobs_cut_video_tasks_for_the_workers_and_skip_finished_outputs(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    videos = tuple(_video(e, 10) for e in range(12))
    finished = ws.record_path(videos[0].path)
    finished.parent.mkdir(parents=True)
    finished.write_text("{}")
    task = VideoTask("cam", "videos/cam/file.mp4", videos)
    data = DataTask("data/file.parquet", 0, 0, tuple(range(12)), ("data/src.parquet",), 100)
    jobs = reencode_jobs([(task, 110), (data, 12)], 2, ws)
    assert jobs[0] == (data, 12)  # tables first
    cut = [job for job, _ in jobs[1:]]
    assert len(cut) == 8 and all(isinstance(t, VideoTask) and t.source == task.source for t in cut)
    assert sorted(v.episode for t in cut for v in t.videos) == list(range(1, 12))
    assert all([v.episode for v in t.videos] == sorted(v.episode for v in t.videos) for t in cut)
    assert [left for _, left in jobs[1:]] == sorted(
        (sum(v.length for v in t.videos) for t in cut), reverse=True
    )


def test_available_cpus_is_bound_by_the_affinity_and_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert 1 <= available_cpus() <= len(__import__("os").sched_getaffinity(0))
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert available_cpus() == 1
    # taskset: a child pinned to one CPU sees one
    pinned = subprocess.run(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-c",
            "from reshard.job.execute import available_cpus as a; print(a())",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=True,
    )
    assert pinned.stdout.strip() == "1"


def test_a_reencode_counts_every_frame_as_it_goes_and_a_copy_none(sample_ds: Path, tmp_path: Path) -> None:
    source = open_source(str(sample_ds))
    episode, key = source.episodes[1], source.video_keys[0]
    src = str(sample_ds / source.video_file(episode, key))
    start = episode.video(key).from_timestamp
    for mode, expected in (("hevc", [1] * episode.length), ("copy", [])):
        counted: list[int] = []
        write_episode_video(
            src,
            str(tmp_path / f"{mode}.mp4"),
            from_timestamp=start,
            length=episode.length,
            fps=source.info.fps,
            mode=mode,  # type: ignore[arg-type]
            on_frame=counted.append,
        )
        assert counted == expected, mode


def test_an_estimate_counts_the_job_and_writes_nothing(sample_ds: Path, tmp_path: Path) -> None:
    source = open_source(str(sample_ds))
    frames = sum(e.length for e in source.episodes) * len(source.video_keys)
    out = tmp_path / "out"
    hevc = estimate_reshard(str(sample_ds), out, options=ReshardOptions(video="hevc"))
    assert (hevc.episodes, hevc.episodes_left) == (len(source.episodes), len(source.episodes))
    assert hevc.frames_left == hevc.frames_reencoded == frames
    assert hevc.source_bytes == sum(p.stat().st_size for p in sample_ds.rglob("*") if p.parent.name != "meta"
                                    and p.suffix in (".mp4", ".parquet") and "meta" not in p.parts)  # fmt: skip
    # one calibration per frame size: the sample's cameras share one
    assert [c.camera for c in hevc.calibrations] == sorted(source.video_keys)[:1]
    assert hevc.seconds is not None and hevc.seconds > 0
    assert [c.frames for c in hevc.calibrations] == [min(source.episodes[0].length, CALIBRATION_FRAMES)]
    copy = estimate_reshard(str(sample_ds), out, options=ReshardOptions())
    assert copy.frames_reencoded == 0 and copy.seconds is None and copy.calibrations == ()
    assert "no time estimated" in copy.lines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither --out nor its work directory


def test_dry_run_prints_the_plan_and_the_estimate_and_exits_0(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["reshard", str(sample_ds), "--out", str(out), "--video", "h264", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    plan, estimate = result.output.splitlines()
    assert plan.startswith("plan: 8 episodes of 8 to write, ") and "camera frames" in plan
    assert estimate.startswith("estimate: ") and "frames to re-encode (h264) in about " in estimate
    assert not out.exists() and not any(tmp_path.iterdir())
    refused = CliRunner().invoke(
        cli, ["reshard", str(sample_ds), "--out", str(out), "--dry-run", "--finalize"]
    )
    assert refused.exit_code == 2 and "--dry-run" in refused.output


@pytest.mark.integration
def test_a_reencode_logs_the_estimate_then_frames_to_a_file(sample_ds: Path, tmp_path: Path) -> None:
    """stderr a file (a SLURM log): the estimate first, then plain lines counting frames, in a pool."""
    log = tmp_path / "log"
    with log.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-c", "from reshard.cli import main; main()", "reshard", str(sample_ds), "--out",
             str(tmp_path / "out"), "--video", "hevc", "--workers", "2"],
            stderr=stderr, stdout=subprocess.PIPE, text=True, timeout=300, check=False,
        )  # fmt: skip
    lines = log.read_text().splitlines()
    assert done.returncode == 0, lines[-5:]
    assert lines[0].startswith("plan: ") and lines[1].startswith("estimate: ")
    frames = [line for line in lines if line.startswith("videos:")]
    total = sum(e.length for e in open_source(str(sample_ds)).episodes) * 2
    assert frames and all("frame" in line and "\r" not in line for line in frames)
    assert frames[-1].split("|")[2].split()[0] == f"{total}/{total}"


@pytest.mark.integration
def test_an_encoder_that_aborts_fails_its_episode_only_and_a_rerun_completes(
    sample_ds: Path, tmp_path: Path
) -> None:
    """x265 aborted the process on some frame sizes: the job's other episodes finish, the error names the
    episode and the signal in one line, and a rerun retries it to the bytes of a run that never crashed."""
    camera = open_source(str(sample_ds)).video_keys[1]

    def run(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", "from reshard.cli import main; main()", "reshard", str(sample_ds),
                "--out", str(out), "--video", "hevc", "--workers", "2", "--quiet"]  # fmt: skip
        environ = {k: v for k, v in os.environ.items() if k != ABORT_ENV}
        return subprocess.run(argv, env={**environ, **env}, capture_output=True, text=True, timeout=300)

    out = tmp_path / "out"
    crashed = run(out, **{ABORT_ENV: f"3:{camera}"})
    assert crashed.returncode == 3, crashed.stderr[-2000:]
    lines = crashed.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in crashed.stderr, crashed.stderr
    assert lines[0].startswith(
        f"Error: A worker process ended abruptly (killed by SIGABRT while writing episode 3 of camera {camera!r} ("
    ), lines[0]
    assert "every other output is finished" in lines[0] and "rerun the same command" in lines[0]
    ws = Workspace(default_work_dir(out))
    source = open_source(str(sample_ds))
    videos = [f"{e.episode_index}:{key}" for e in source.episodes for key in source.video_keys]
    done = sorted(p.name for p in (ws.root / "done" / "videos").rglob("*.json"))
    assert len(done) == len(videos) - 1 and not (out / "meta").exists()
    assert run(out).returncode == 0
    assert run(tmp_path / "clean").returncode == 0
    assert files_of(out) == files_of(tmp_path / "clean")
