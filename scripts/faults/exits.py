"""Fault cases of how lrs ends: a URL scheme whose filesystem package is
missing, an unreachable FTP server, the Hub when offline and lerobot's local root, a crf the codec does
not take, a push into the dataset, Ctrl-C and SIGTERM during a reshard (mid-run and while its workers
start), and a stream's temporary cache on SIGTERM."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from harness import (
    LRS,
    PYTHON,
    Case,
    Ctx,
    Proc,
    Verdict,
    error_verdict,
    probe_error_verdict,
    register,
    tree_sha256,
)

COMMANDS = {
    "describe": [],
    "inspect": [],
    "doctor": [],
    "verify": [],
    "reshard": ["--out", "OUT"],
    "prewarm": ["--cache-dir", "OUT"],
}


def _all(verdicts: list[Verdict]) -> Verdict:
    bad = [v for v in verdicts if not v.ok]
    outcome = f"{len(verdicts) - len(bad)} of {len(verdicts)} behaved; " + (bad or verdicts)[0].outcome
    return Verdict(not bad, outcome, "; ".join(v.note for v in bad if v.note))


@register("backend-missing-gs-every-command", "backend")
def backend_missing(ctx: Ctx, case: Case) -> Verdict:
    if importlib.util.find_spec("gcsfs") is not None:
        return Verdict(True, "gcsfs is installed here: nothing to check")
    case.watch(case.dir)
    verdicts = []
    for command, extra in COMMANDS.items():
        args = [str(case.dir / "out") if a == "OUT" else a for a in extra]
        proc = case.lrs(command, "gs://bucket/ds", *args, "-q")
        verdicts.append(error_verdict(proc, match=r"gs:// needs the package gcsfs.*pip install gcsfs"))
    probe = case.probe("epoch", {"url": "gs://bucket/ds"})
    verdicts.append(probe_error_verdict(probe, match=r"gs:// needs the package gcsfs"))
    return _all(verdicts)


@register("ftp-unreachable", "backend")
def ftp_unreachable(ctx: Ctx, case: Case) -> Verdict:
    return error_verdict(case.lrs("describe", "ftp://127.0.0.1:1/ds"), match=r"Could not connect to ftp://")


@register("hub-offline", "hub", quick=True)
def hub_offline(ctx: Ctx, case: Case) -> Verdict:
    env = {"HF_HUB_OFFLINE": "1", "HF_LEROBOT_HOME": str(case.dir / "home")}
    start = time.monotonic()
    proc = case.lrs("describe", "lerobot/pusht", env=env)
    seconds = time.monotonic() - start
    verdict = error_verdict(proc, match=r"HF_HUB_OFFLINE=1 and it is not on this machine")
    probe = case.probe("epoch", {"url": "lerobot/pusht"}, env=env)
    stream = probe_error_verdict(probe, match=r"HF_HUB_OFFLINE=1 and it is not on this machine")
    warnings = sum("warn" in line.lower() for line in probe.stderr.splitlines())
    return Verdict(
        verdict.ok and stream.ok and warnings == 0 and seconds < 15,
        f"{verdict.outcome} (in {seconds:.1f} s with interpreter start) | EpisodeStream {stream.outcome}, "
        f"{warnings} warnings",
        "; ".join(v.note for v in (verdict, stream) if v.note),
    )


@register("lerobot-root-repo-id", "hub")
def lerobot_root(ctx: Ctx, case: Case) -> Verdict:
    home = case.dir / "home"
    (home / "me").mkdir(parents=True)
    os.symlink(ctx.sample, home / "me" / "toy")
    proc = case.lrs("describe", "me/toy", env={"HF_HUB_OFFLINE": "1", "HF_LEROBOT_HOME": str(home)})
    ok = proc.rc == 0 and str(home / "me" / "toy") in proc.stdout
    return Verdict(
        ok, f"exit {proc.rc}: {proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ''}"
    )


@register("crf-out-of-range-hevc", "options")
def crf_out_of_range(ctx: Ctx, case: Case) -> Verdict:
    case.watch(case.dir)
    proc = case.lrs(
        "reshard", str(ctx.sample), "--out", str(case.dir / "out"), "--video", "hevc", "--crf", "60"
    )
    return error_verdict(proc, code=2, match=r"Invalid crf \(60\) for --video hevc\. Expected 0\.\.51\.")


@register("push-into-the-dataset", "options")
def push_into_dataset(ctx: Ctx, case: Case) -> Verdict:
    case.watch(ctx.resharded)
    proc = case.lrs("push", str(ctx.resharded), f"file://{ctx.resharded}/sub", "-q")
    return error_verdict(proc, match=r"Expected a place outside the source directory")


def _interrupted(
    ctx: Ctx,
    case: Case,
    sig: signal.Signals,
    code: int,
    group: bool,
    waits: list[Callable[[int, float], float]],
) -> Verdict:
    """An H.265 reshard (2 workers, long enough to be caught mid-run) stopped by `sig` once per wait,
    then the same command again: equal to an uninterrupted run. A wait gets the child's pid and how
    long an uninterrupted run took, sleeps, and says how long it waited."""
    reference = case.dir / "reference"
    command = ["reshard", str(ctx.sample), "-q", "--workers", "2", "--video", "hevc"]
    took = case.run([PYTHON, "-c", LRS, *command, "--out", str(reference)]).seconds
    expected = tree_sha256(reference)
    behaved = landed = 0
    notes = []
    for i, wait in enumerate(waits):
        out = case.dir / f"out{i}"
        argv = [PYTHON, "-c", LRS, *command, "--out", str(out)]
        child = subprocess.Popen(
            argv, env=case.env(), cwd=case.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        waited = wait(child.pid, took)
        if child.poll() is None:
            landed += 1
            (os.killpg if group else os.kill)(child.pid, sig)
        stdout, stderr = child.communicate(timeout=120)
        case.procs.append(Proc(tuple(argv), child.returncode, stdout, stderr, 0.0))
        work = case.dir / f".out{i}.lrs-work"
        clean = not any((work / "tmp").glob("*"))
        rerun = case.run(argv)
        same = rerun.rc == 0 and tree_sha256(out) == expected and not work.exists()
        # -sig: the signal came before lrs had started (during imports), which a shell reports as `code` too.
        good = child.returncode in (0, code, -sig) and clean and same
        behaved += good
        if not good:
            notes.append(
                f"run {i} ({waited:.2f} s): exit {child.returncode}, tmp clean {clean}, rerun same {same}"
            )
    return Verdict(
        behaved == len(waits) and landed > 0,
        f"{behaved} of {len(waits)} exit {code} (or finished) with tmp/ empty, then identical on rerun "
        f"({landed} signals landed mid-run)",
        "; ".join(notes),
    )


def _mid_run(i: int) -> Callable[[int, float], float]:
    """Sleep 0.4 to 0.9 of an uninterrupted run's duration (seeded by `i`)."""

    def wait(pid: int, took: float) -> float:
        delay_s = random.Random(i).uniform(0.4, 0.9) * took
        time.sleep(delay_s)
        return delay_s

    return wait


def _after_the_pool_starts(delay_s: float) -> Callable[[int, float], float]:
    """Sleep `delay_s` after the reshard started its first child process (the pool's resource tracker,
    then its workers, which import for a second or more before they can ignore Ctrl-C)."""

    def wait(pid: int, took: float) -> float:
        start = time.monotonic()
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            while (
                process.is_running() and process.status() != psutil.STATUS_ZOMBIE and not process.children()
            ):
                time.sleep(0.005)
        time.sleep(delay_s)
        return time.monotonic() - start

    return wait


@register("sigint-reshard-x5", "signal")
def sigint_reshard(ctx: Ctx, case: Case) -> Verdict:
    """Ctrl-C: SIGINT to the whole process group, as a terminal sends it."""
    return _interrupted(ctx, case, signal.SIGINT, 130, True, [_mid_run(i) for i in range(5)])


@register("sigterm-reshard-x5", "signal")
def sigterm_reshard(ctx: Ctx, case: Case) -> Verdict:
    """SIGTERM to the lrs process alone, as `kill PID` sends it."""
    return _interrupted(ctx, case, signal.SIGTERM, 143, False, [_mid_run(i) for i in range(5)])


START_DELAYS_S = (0.0, 0.1, 0.25, 0.5, 0.8, 1.2)


@register("sigint-while-workers-start-x6", "signal")
def sigint_at_start(ctx: Ctx, case: Case) -> Verdict:
    """Ctrl-C to the whole group 0 to 1.2 s after the pool starts its workers: no worker's traceback."""
    waits = [_after_the_pool_starts(d) for d in START_DELAYS_S]
    return _interrupted(ctx, case, signal.SIGINT, 130, True, waits)


@register("sigterm-while-workers-start-x6", "signal")
def sigterm_at_start(ctx: Ctx, case: Case) -> Verdict:
    """SIGTERM to the whole group (as SLURM's scancel sends it) while the pool starts its workers."""
    waits = [_after_the_pool_starts(d) for d in START_DELAYS_S]
    return _interrupted(ctx, case, signal.SIGTERM, 143, True, waits)


_STREAM = """
import sys, time
from reader import EpisodeStream
stream = EpisodeStream(sys.argv[1])
print(stream.cache.cache_dir, flush=True)
time.sleep(120)
"""


@register("stream-sigterm-temporary-cache", "signal")
def stream_sigterm(ctx: Ctx, case: Case) -> Verdict:
    child = subprocess.Popen(
        [PYTHON, "-c", _STREAM, f"file://{ctx.resharded}"], env=case.env(), cwd=case.dir,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    cache_dir = child.stdout.readline().strip()
    existed = bool(cache_dir) and Path(cache_dir).is_dir()
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=60)
    case.procs.append(Proc(("stream",), child.returncode, "", stderr, 0.0))
    gone = not Path(cache_dir).exists()
    return Verdict(
        existed and gone and child.returncode == -signal.SIGTERM,
        f"exit {child.returncode}; temporary cache {'removed' if gone else 'left behind'}",
    )
