"""Trust cases of the fault suite (what no input may do: choose a path outside its root, run code, or exhaust memory): a source that grows after a
reshard or during an interrupted one, two reshards into one --out at once, the lock of a killed run, URLs
where a local directory goes, and `lrs demo --workdir` over a directory of the user's files.

A source grows as lerobot leaves it after `save_episode` + `finalize` (more episodes, rewritten
metadata), simulated by writing a sample with one more episode over the same path.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from harness import LRS, PYTHON, Case, Ctx, Proc, Verdict, both, error_verdict, register

from reshard.demo.sample import write_sample

GROW: dict[str, Any] = {"episodes": 5, "cameras": 1, "episodes_per_data_file": 2}
CHANGED = r"Invalid source \(.*\): changed since .*\(episodes: 5 -> 6, frames: \d+ -> \d+; "


def _grow(src: Path) -> None:
    shutil.rmtree(src)
    write_sample(src, **{**GROW, "episodes": GROW["episodes"] + 1})


def _refused(procs: dict[str, Proc], *, code: int = 3, match: str) -> Verdict:
    """Each command refused with a one-line error: one outcome for all (the first one's line)."""
    verdicts = {what: error_verdict(proc, code=code, match=match) for what, proc in procs.items()}
    first = next(iter(procs.values()))
    if all(v.ok for v in verdicts.values()):
        return Verdict(True, f"{', '.join(procs)}: exit {code}: {first.first_line}")
    notes = "; ".join(f"{what}: {v.outcome} ({v.note})" for what, v in verdicts.items() if not v.ok)
    return Verdict(False, f"{', '.join(procs)}: not all refused", notes[:300])


def _ok(proc: Proc, what: str, code: int = 0, match: str | None = None) -> Verdict:
    ok = proc.rc == code and (match is None or match in proc.stdout + proc.stderr)
    return Verdict(
        ok, f"{what} exit {proc.rc}", "" if ok else f"{what}: expected exit {code}: {proc.first_line}"
    )


# Each case passes paths relative to its directory (the children's working directory): shorter lines.


@register("source-grew-after-reshard", "trust")
def source_grew_after(ctx: Ctx, case: Case) -> Verdict:
    """Reshard, add an episode to the source, rerun: refused (was: "already complete", exit 0, stale)."""
    src = write_sample(case.dir / "src", **GROW)
    first = case.lrs("reshard", "src", "--out", "out", "-q")
    _grow(src)
    case.watch(case.dir)
    case.allow(r"src(/.*)?")
    rerun = case.lrs("reshard", "src", "--out", "out", "-q")
    verify = case.lrs("verify", "out", "--against", "src")
    return both(
        _ok(first, "reshard"),
        error_verdict(rerun, match=CHANGED + r".*remove .* \(or choose another --out\)"),
        _ok(verify, "verify --against", 1, "was resharded from another version of"),
    )


@register("source-grew-mid-reshard", "trust")
def source_grew_mid(ctx: Ctx, case: Case) -> Verdict:
    """Kill a reshard, add an episode, then rerun, run a part and finalize: each refused (was: KeyError: 5
    on every rerun); removing the work directory, as the message says, starts over."""
    src, out, work = write_sample(case.dir / "src", **GROW), case.dir / "out", case.dir / ".out.lrs-work"
    killed = case.lrs("reshard", "src", "--out", "out", "-q", env={"LRS_TEST_KILL_AT": "recorded:3"})
    _grow(src)
    runs = {
        what: case.lrs("reshard", "src", "--out", "out", "-q", *extra)
        for what, extra in (("rerun", []), ("--part 0/2", ["--part", "0/2"]), ("--finalize", ["--finalize"]))
    }
    refused = _refused(runs, match=CHANGED + rf".*remove {work} \(and {out}\) to start over")
    shutil.rmtree(work)
    shutil.rmtree(out, ignore_errors=True)
    again = case.lrs("reshard", "src", "--out", "out", "-q")
    return both(
        _ok(killed, "killed reshard", -signal.SIGKILL),
        refused,
        _ok(again, "work directory removed: reshard", 0, "resharded 6 episodes"),
    )


def _lock_holder(work: Path) -> int | None:
    try:
        return int(json.loads((work / "lock").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


@register("two-reshards-one-out", "trust")
def two_reshards(ctx: Ctx, case: Case) -> Verdict:
    """A second reshard (and a part, and a finalize) into the --out a first one writes: refused in one
    line naming it (was: the second cleared the first's temp files and the first died); the first,
    stopped meanwhile (SIGSTOP) then continued, finishes and verifies."""
    work = case.dir / ".out.lrs-work"
    argv = [PYTHON, "-c", LRS, "reshard", str(ctx.sample), "--out", "out", "--video", "hevc", "-q"]
    first = subprocess.Popen(
        argv, env=case.env(), cwd=case.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    started = time.monotonic()
    try:
        while _lock_holder(work) != first.pid and first.poll() is None and time.monotonic() - started < 120:
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)
        if first.poll() is not None or _lock_holder(work) != first.pid:
            return Verdict(False, "the first reshard ended before a second could start", "suite timing")
        runs = {
            what: case.lrs(*argv[3:], *extra)
            for what, extra in (
                ("reshard", []),
                ("--part 0/2", ["--part", "0/2"]),
                ("--finalize", ["--finalize"]),
            )
        }
    finally:
        first.send_signal(signal.SIGCONT)
        out_text, err_text = first.communicate(timeout=600)
    first_proc = Proc(tuple(argv), first.returncode, out_text, err_text, time.monotonic() - started)
    case.procs.append(first_proc)
    verify = case.lrs("verify", "out", "--against", str(ctx.sample))
    held = rf"another lrs reshard is writing it \(reshard, pid {first.pid} on "
    return both(_refused(runs, match=held), _ok(first_proc, "first reshard"), _ok(verify, "verify --against"))


@register("stale-lock-after-sigkill", "trust", quick=True)
def stale_lock(ctx: Ctx, case: Case) -> Verdict:
    """A reshard SIGKILLed leaves its lock file naming a dead process: the rerun takes the lock and ends."""
    work = case.dir / ".out.lrs-work"
    killed = case.lrs(
        "reshard", str(ctx.sample), "--out", "out", "-q", env={"LRS_TEST_KILL_AT": "recorded:2"}
    )
    left = _lock_holder(work)
    rerun = case.lrs("reshard", str(ctx.sample), "--out", "out", "-q")
    stale = Verdict(left is not None, f"lock left naming pid {left}", "" if left else "no lock file left")
    return both(_ok(killed, "killed", -signal.SIGKILL), stale, _ok(rerun, "rerun", 0, "resharded 8 episodes"))


URL_ARGS = {
    "reshard --out s3://": ["reshard", "SRC", "--out", "s3://my-bucket/direct"],
    "--out hf://": ["reshard", "SRC", "--out", "hf://buckets/me/direct"],
    "--work-dir gs://": ["reshard", "SRC", "--out", "out", "--work-dir", "gs://b/work"],
    "prewarm --cache-dir s3://": ["prewarm", "SRC", "--cache-dir", "s3://x/cache"],
    "sample s3://": ["sample", "s3://x/ds"],
    "demo --workdir s3://": ["demo", "--workdir", "s3://x/demo"],
}


@register("url-as-local-dir", "trust", quick=True)
def url_as_local_dir(ctx: Ctx, case: Case) -> Verdict:
    """URLs where a command writes a local directory: refused in one line pointing at push, and no folder
    named after the scheme appears (was: ./s3:/my-bucket/direct); a file:// URL is the path it names."""
    case.watch(case.dir)
    runs = {
        what: case.lrs(*[str(ctx.sample) if a == "SRC" else a for a in args])
        for what, args in URL_ARGS.items()
    }
    refused = _refused(runs, code=2, match=r"a URL\. Expected a local directory; ")
    out = case.dir / "file-url-out"
    case.allow(r"file-url-out(/.*)?")
    proc = case.lrs("reshard", str(ctx.sample), "--out", out.as_uri(), "-q")
    written = (out / "meta/lrs/layout.json").exists()
    return both(
        refused, _ok(proc, f"reshard --out file:///DIR: {'DIR written' if written else 'DIR MISSING'},")
    )


@register("demo-workdir-user-files", "trust")
def demo_user_files(ctx: Ctx, case: Case) -> Verdict:
    """`lrs demo --workdir DIR` where DIR/source/notes.txt and DIR/cache/model.bin are the user's: both kept
    (was: both deleted, exit 0); the demo works in a new folder of DIR and removes it."""
    mine = {"source/notes.txt": b"notes", "cache/model.bin": b"weights"}
    workdir = case.dir / "mine"
    for rel, data in mine.items():
        (workdir / rel).parent.mkdir(parents=True)
        (workdir / rel).write_bytes(data)
    case.watch(case.dir)
    proc = case.lrs("demo", "--workdir", "mine", "--num-episodes", "2")
    kept = {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    verdict = Verdict(kept == mine, f"user files {'kept' if kept == mine else 'CHANGED'}: {sorted(kept)}")
    return both(_ok(proc, "demo", 0, "holds files of yours: the demo uses a new folder"), verdict)
