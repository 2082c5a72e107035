"""How lrs ends when it cannot go on: a missing filesystem package, an offline Hub, Ctrl-C and SIGTERM,
a crf the codec does not take. One line, the documented exit code, nothing left behind."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from cache.errors import FetchError, LocationError, MissingBackend
from cache.exits import Terminated
from cache.remote import lerobot_root, resolve
from reshard.cli import cli, main
from reshard.job.execute import ReshardOptions

COMMANDS = [["describe"], ["inspect"], ["doctor"], ["verify"], ["reshard", "--out", "OUT"],
            ["prewarm", "--cache-dir", "OUT"], ["push", "DIR"], ["show", "--out", "OUT.png"]]  # fmt: skip


def lrs(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    return result.exit_code, lines[-1] if lines else ""


def _args(command: list[str], url: str, tmp_path: Path) -> list[str]:
    out = str(tmp_path / "out")
    if command[0] == "push":  # push DIR URL: the URL is the target
        (tmp_path / "dir").mkdir(exist_ok=True)
        return ["push", str(tmp_path / "dir"), url]
    places = {"OUT": out, "OUT.png": f"{out}.png"}
    return [command[0], url, *[places.get(a, a) for a in command[1:]]]


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_missing_filesystem_package_is_one_line_naming_it(command: list[str], tmp_path: Path) -> None:
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    code, line = lrs(*_args(command, "gs://bucket/ds", tmp_path))
    if command[0] == "push":  # push first checks that DIR is a dataset; the target's rule is resolve's
        with pytest.raises(MissingBackend, match="gcsfs"):
            resolve("gs://bucket/ds")
        return
    assert code == 3, line
    assert line == (
        "Error: Invalid dataset location (gs://bucket/ds): gs:// needs the package gcsfs, which is not "
        "installed. Expected it installed: pip install gcsfs."
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.png").exists()


def test_a_stream_without_s3fs_raises_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from reader import EpisodeStream

    monkeypatch.setitem(sys.modules, "s3fs", None)  # `import s3fs` fails as if not installed
    monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, "s3", raising=False)
    with pytest.raises(MissingBackend, match=r"s3:// needs the package s3fs.*pip install s3fs") as caught:
        EpisodeStream("s3://bucket/ds")
    assert caught.value.package == "s3fs" and isinstance(caught.value, ImportError)


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        ("foo://x", LocationError, r"Invalid dataset location \(foo://x\): Protocol not known: foo"),
        (
            "ftp://127.0.0.1:1/x",
            FetchError,
            r"Could not connect to ftp://127\.0\.0\.1:1/x: ConnectionRefused",
        ),
        ("hf://models/a/b", LocationError, r"Invalid Hugging Face URL"),
    ],
    ids=["unknown-scheme", "ftp-unreachable", "hf-kind"],
)
def test_bad_locations_are_lrs_errors(url: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        resolve(url)
    code, line = lrs("describe", url)
    assert code == 3 and line.startswith("Error: "), line


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_offline_a_hub_id_fails_at_once(variable: str, tmp_path: Path) -> None:
    env = {variable: "1", "HF_LEROBOT_HOME": str(tmp_path / "home")}
    started = time.monotonic()
    code, line = lrs("describe", "lerobot/pusht", env=env)
    assert code == 3 and time.monotonic() - started < 2, line
    assert line == (
        f"Error: Invalid dataset location (hf://datasets/lerobot/pusht): {variable}=1 and it is not on this "
        f"machine nor in lerobot's local root ({tmp_path / 'home' / 'lerobot' / 'pusht'}). Expected a local "
        f"copy (a path, or the dataset in lerobot's root), or {variable} unset."
    )


def test_a_repo_id_is_found_in_lerobots_root_first(
    sample_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "hf"
    (home / "lerobot" / "me").mkdir(parents=True)
    os.symlink(sample_ds, home / "lerobot" / "me" / "toy")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    monkeypatch.setenv("HF_HOME", str(home))  # lerobot's default: $HF_HOME/lerobot
    assert lerobot_root("me/toy") == str(home / "lerobot" / "me" / "toy")
    code, line = lrs("describe", "me/toy", env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(home)})
    assert code == 0, line
    assert resolve("me/toy").url == str(home / "lerobot" / "me" / "toy")
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "elsewhere"))
    assert resolve("me/toy").url == "hf://datasets/me/toy"


@pytest.mark.parametrize(
    ("video", "crf", "expected"),
    [("hevc", "60", "Expected 0..51."), ("h264", "52", "Expected 0..51."), ("copy", "64", "0<=x<=63")],
    ids=["hevc", "h264", "copy"],
)
def test_a_crf_the_codec_does_not_take_is_refused_before_any_work(
    sample_ds: Path, tmp_path: Path, video: str, crf: str, expected: str
) -> None:
    out = tmp_path / "out"
    code, line = lrs("reshard", str(sample_ds), "--out", str(out), "--video", video, "--crf", crf, "-q")
    assert code == 2 and expected in line, line
    assert os.listdir(tmp_path) == []


def test_a_default_and_the_same_value_given_are_the_same_options() -> None:
    assert ReshardOptions(video="hevc", crf=21, preset="fast") == ReshardOptions(video="hevc")
    assert ReshardOptions(video="h264", crf=18) == ReshardOptions(video="h264")
    assert ReshardOptions(video="hevc", crf=22) != ReshardOptions(video="hevc")


def _interrupted(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def _main_with(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> int:
    """`lrs ARGV`'s exit code."""
    monkeypatch.setattr(sys, "argv", ["lrs", *argv])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as caught:
            main()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return int(caught.value.code or 0)


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (KeyboardInterrupt, 130, "Interrupted (SIGINT)."),
        (Terminated, 143, "Terminated (SIGTERM)."),
    ],
    ids=["sigint", "sigterm"],
)
def test_an_interrupt_exits_128_plus_the_signal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raised: type, code: int, message: str
) -> None:
    """describe changes nothing: the line says what stopped it and promises no resume."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise raised()

    monkeypatch.setattr(sys.modules["reshard.cli.describe_command"], "open_source", interrupted)
    assert _main_with(monkeypatch, ["describe", "x"]) == code
    assert capsys.readouterr().err.strip().splitlines()[-1] == message


def test_an_interrupted_reshard_says_a_rerun_resumes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(sys.modules["reshard.cli.reshard_command"], "reshard", _interrupted)
    assert _main_with(monkeypatch, ["reshard", str(tmp_path), "--out", str(tmp_path / "out")]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "Interrupted (SIGINT); rerun the same command to resume."
    )


@pytest.mark.parametrize("saved", [False, True], ids=["before-a-checkpoint", "after-a-checkpoint"])
def test_an_interrupted_train_says_what_resumes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, saved: bool
) -> None:
    """lerobot refuses to rerun into its output directory without --resume: after a checkpoint the line gives
    lerobot's resume flags with that checkpoint's config, before one it says to clear the directory."""
    import reshard.train

    out = tmp_path / "outputs" / "act"
    config = out / "checkpoints/last/pretrained_model/train_config.json"
    if saved:
        config.parent.mkdir(parents=True)
        config.write_text("{}")

    def run(args: list[str], options: object, *, on_output_dir: Callable[[Path], None]) -> None:
        on_output_dir(out)
        raise KeyboardInterrupt

    monkeypatch.setattr(reshard.train, "run", run, raising=False)
    assert _main_with(monkeypatch, ["train", "--policy.type=act"]) == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    if saved:
        assert line == (
            f"Interrupted (SIGINT); resume from the last checkpoint with `lrs train --resume=true "
            f"--config_path={config}` (and the same lrs options)."
        ), line
    else:
        assert line == (
            f"Interrupted (SIGINT); no checkpoint was saved yet: remove {out} (or give another --output_dir) "
            "and rerun."
        ), line


def test_debug_prints_the_traceback_and_keeps_the_exit_code(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--debug", "describe", str(tmp_path / "nothing")])
    assert result.exit_code == 3 and "Traceback" in result.output


def test_an_interrupted_reshard_removes_its_temporaries_and_resumes(
    sample_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reshard.job.run import reshard

    run_module = sys.modules["reshard.job.run"]
    real = run_module.run_tasks

    def half_then_sigterm(tasks, ctx, **kwargs):  # type: ignore[no-untyped-def]
        real(tasks[:1], ctx, **kwargs)
        (ctx.work / "tmp").mkdir(exist_ok=True)
        (ctx.work / "tmp" / "half-written.mp4").write_bytes(b"x")
        raise Terminated("signal 15")

    out = tmp_path / "out"
    monkeypatch.setattr(run_module, "run_tasks", half_then_sigterm)
    with pytest.raises(Terminated):
        reshard(str(sample_ds), out, quiet=True)
    work = tmp_path / ".out.lrs-work"
    assert (work / "options.json").exists() and not (work / "tmp").exists()
    monkeypatch.setattr(run_module, "run_tasks", real)
    assert reshard(str(sample_ds), out, quiet=True).finalized
    assert not work.exists()


_STREAM = """
import sys, time
from reader import EpisodeStream
stream = EpisodeStream(sys.argv[1])
print(stream.cache.cache_dir, flush=True)
time.sleep(60)
"""


@pytest.mark.integration
def test_sigterm_removes_a_streams_temporary_cache(sample_resharded_ds: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _STREAM, str(sample_resharded_ds)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    cache_dir = child.stdout.readline().strip()
    assert cache_dir and os.path.isdir(cache_dir)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM  # still "killed by SIGTERM" to its parent
    assert not os.path.exists(cache_dir)


_LRS = "from reshard.cli import main; main()"


def _wait_for_a_child(child: subprocess.Popen[str], *, timeout_s: float = 120.0) -> None:
    """Until `child` has started a process of its pool (its resource tracker, then the workers), or has
    ended. Other children do not count: an import may run one (trio, when installed, runs `ldconfig -p`
    as httpcore imports it), before the job has begun."""
    deadline = time.monotonic() + timeout_s
    while child.poll() is None and not _pool_started(child.pid) and time.monotonic() < deadline:
        time.sleep(0.005)


def _pool_started(pid: int) -> bool:
    for process in psutil.Process(pid).children():
        try:
            if any("multiprocessing" in arg for arg in process.cmdline()):
                return True
        except psutil.Error:  # ended, or a zombie: not the pool's, which lives as long as the job
            continue
    return False


def _survivors(pgid: int) -> list[psutil.Process]:
    """Processes of group `pgid` still running 10 s on (zombies, which only wait for init, do not count)."""
    group = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                group.append(process)
        except (OSError, psutil.Error):
            continue
    return psutil.wait_procs(group, timeout=10)[1]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_a_signal_while_the_workers_start_is_one_line_and_resumable(
    sample_ds: Path, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """Ctrl-C or SLURM's SIGTERM to every process of the job while the pool's workers start (they
    import for a second or more): no worker prints a traceback, the job exits 128 + the signal, nothing
    of it keeps running, and the rerun finishes it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for delay_s in (0.0, 0.2, 0.6):
        out = tmp_path / f"out{delay_s}"
        argv = [sys.executable, "-c", _LRS, "reshard", str(sample_ds), "--out", str(out), "-q",
                "--workers", "2", "--video", "hevc"]  # fmt: skip
        child = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        _wait_for_a_child(child)
        time.sleep(delay_s)
        os.killpg(child.pid, sig)
        _, stderr = child.communicate(timeout=120)
        assert (child.returncode, "Traceback" in stderr) == (code, False), (delay_s, stderr)
        assert not _survivors(child.pid)
        work = tmp_path / f".{out.name}.lrs-work"
        assert not any((work / "tmp").glob("*")) and (work / "options.json").exists()
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and not work.exists(), rerun.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_a_signal_while_verify_workers_start_is_one_line(
    sample_resharded_ds: Path, sample_ds: Path, sig: signal.Signals, code: int
) -> None:
    """`lrs verify --workers 2` starts its workers as reshard does (`reshard.job.process_pool`): a signal
    meanwhile ends the command by the signal, with no worker's traceback and nothing of it left running."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", _LRS, "verify", str(sample_resharded_ds), "--against", str(sample_ds),
            "--workers", "2"]  # fmt: skip
    for delay_s in (0.0, 0.2, 0.6):
        child = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        _wait_for_a_child(child)
        time.sleep(delay_s)
        if delay_s and child.poll() is not None:  # this verify takes about a second: it may be done by then
            assert child.returncode == 0 and not _survivors(child.pid)
            continue
        os.killpg(child.pid, sig)
        stdout, stderr = child.communicate(timeout=120)
        if delay_s and child.returncode == 0:  # done between the poll and the signal: its report is out
            assert stdout.strip() and not stderr and not _survivors(child.pid), (delay_s, stdout, stderr)
            continue
        # -sig: the signal came as the process was exiting (Python's handlers are gone by then), which a
        # shell reports as 128 + sig too.
        assert child.returncode in (code, -sig) and "Traceback" not in stderr, (delay_s, stderr)
        assert not _survivors(child.pid)
