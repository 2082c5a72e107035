"""What every case of `scripts/faults/suite.py` stands on: the shared datasets, running `lrs` in a child
process, counting tracebacks, and finding files left behind.

A case is a function `fn(ctx, case) -> Verdict` registered with `@register(name, group, quick=...)`. It
works in its own directory (`case.dir`); each child process gets `TMPDIR=case.tmp`, so a temp file a
child forgets is found there. `case.watch(path)` lists a directory before the case acts; after it,
whatever appeared there and the case did not `allow` counts as left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
LRS = "from reshard.cli import main; main()"
PROBES = str(Path(__file__).resolve().with_name("probes.py"))
TRACEBACK = "Traceback (most recent call last)"
# `python -c _MEASURE USAGE_FILE ARGV...`: runs ARGV, writes its rusage (peak RSS of the largest process,
# 512-byte blocks written) to USAGE_FILE as JSON and exits with its status.
_MEASURE = (
    "import json, resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "open(sys.argv[1], 'w').write(json.dumps({'maxrss_kib': u.ru_maxrss, 'oublock': u.ru_oublock})); "
    "sys.exit(rc if rc >= 0 else 128 - rc)"
)


@dataclass(frozen=True)
class Usage:
    """What one child process used: its peak resident memory and the bytes it wrote to disk, in MiB."""

    peak_rss_mib: float
    written_mib: float


@dataclass(frozen=True)
class Proc:
    """One finished child process (`usage` where it was `Case.measured`)."""

    args: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    usage: Usage | None = None

    @property
    def first_line(self) -> str:
        """The first line of the error message (retry warnings before it skipped)."""
        lines = [line for line in self.stderr.strip().splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("Error: ")]
        return (errors or lines or [""])[0][:200]

    @property
    def tracebacks(self) -> int:
        return (self.stdout + self.stderr).count(TRACEBACK)

    def json(self) -> dict[str, Any]:
        lines = self.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            return {}


@dataclass(frozen=True)
class Verdict:
    """A case's result: whether lrs behaved right, what it did (one line), and a note."""

    ok: bool
    outcome: str
    note: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Case:
    """One case's directory, its child processes, and what it watches for leftovers."""

    name: str
    dir: Path
    procs: list[Proc] = field(default_factory=list)
    watched: dict[Path, set[str]] = field(default_factory=dict)
    allowed: list[re.Pattern[str]] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # leftovers a case found itself (e.g. on a disk now gone)

    def __post_init__(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)

    @property
    def tmp(self) -> Path:
        return self.dir / "tmp"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "LRS_TEST_KILL_AT"}
        env.update(PYTHONPATH=str(REPO), TMPDIR=str(self.tmp), PYTHONUNBUFFERED="1")
        env.update(extra or {})
        return env

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 300) -> Proc:
        """Run a child, wait for it, record it (its output is scanned for tracebacks)."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        if env and "LRS_FAULTS_FSIZE" in env:  # the full-disk fallback: writes fail with EFBIG past the limit
            argv = ["prlimit", f"--fsize={env['LRS_FAULTS_FSIZE']}", *argv]
        start = time.monotonic()
        done = subprocess.run(
            argv, env=self.env(env), capture_output=True, text=True, timeout=timeout, cwd=self.dir
        )
        proc = Proc(tuple(argv), done.returncode, done.stdout, done.stderr, time.monotonic() - start)
        self.procs.append(proc)
        return proc

    def measured(self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 300) -> Proc:
        """`run`, with the peak resident memory of the child (the largest of its processes) and the bytes
        they wrote to disk, in `Proc.usage`. A small wrapper process runs it and reads its rusage: a child
        forked from this process directly would report this process's own peak where that is larger
        (Linux keeps `maxrss` across fork and exec)."""
        with tempfile.NamedTemporaryFile("r", suffix=".json") as usage:
            proc = self.run([PYTHON, "-c", _MEASURE, usage.name, *argv], env=env, timeout=timeout)
            got = json.loads(usage.read() or "{}")
        measured = Usage(
            peak_rss_mib=got.get("maxrss_kib", 0) / 1024, written_mib=got.get("oublock", 0) / 2048
        )
        self.procs[-1] = proc = Proc(proc.args[3:], proc.rc, proc.stdout, proc.stderr, proc.seconds, measured)
        return proc

    def lrs(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> Proc:
        return self.run([PYTHON, "-c", LRS, *args], env=env, timeout=timeout)

    def probe(self, name: str, args: dict[str, Any], *, env: dict[str, str] | None = None) -> Proc:
        return self.run([PYTHON, PROBES, name, json.dumps(args)], env=env)

    def killed_run(
        self, argv: list[str], delay_s: float, *, env: dict[str, str] | None = None
    ) -> tuple[Proc, bool]:
        """Start a child in its own process group, SIGKILL the group after `delay_s` (unless it ended first).

        Returns the process and whether the kill landed (it was still running)."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        child = subprocess.Popen(
            argv,
            env=self.env(env),
            cwd=self.dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = child.communicate(timeout=delay_s)
            landed = False
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate()
            landed = True
        proc = Proc(tuple(argv), child.returncode, out, err, time.monotonic() - start)
        self.procs.append(proc)
        return proc, landed

    def watch(self, *paths: Path) -> None:
        for path in paths:
            self.watched[path] = listing(path)

    def allow(self, *patterns: str) -> None:
        """Paths (regexes over the path relative to a watched directory) that may appear."""
        self.allowed += [re.compile(p) for p in patterns]

    def leftovers(self) -> list[str]:
        """What appeared in a watched directory and was not allowed, and whatever is in TMPDIR (except
        torch's own compile cache directory, which importing torch makes)."""
        found = []
        for path, before in self.watched.items():
            for rel in sorted(listing(path) - before):
                if not any(p.fullmatch(rel) for p in [*self.allowed, _TMP]):
                    found.append(f"{path.name}/{rel}")
        found += [f"TMPDIR/{rel}" for rel in sorted(listing(self.tmp)) if not _TORCH_TMP.match(rel)]
        return found + self.extra


_TMP = re.compile(r"tmp(/.*)?")
_TORCH_TMP = re.compile(r"torchinductor_[^/]*(/.*)?")


def listing(path: Path) -> set[str]:
    """Every file and directory under `path`, relative (empty if it does not exist)."""
    if not path.exists():
        return set()
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def tree_sha256(root: Path, *, skip: Callable[[str], bool] = lambda rel: False) -> dict[str, str]:
    """rel -> sha256 of every file under `root`."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not skip(str(p.relative_to(root)))
    }


def error_verdict(proc: Proc, *, code: int = 3, match: str | None = None) -> Verdict:
    """A clear error: the expected exit code, one `Error:` line on stderr, the message matching `match`."""
    outcome = f"exit {proc.rc}: {proc.first_line}"
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    problems = []
    if proc.rc != code:
        problems.append(f"expected exit {code}")
    # One Error line, after at most the retry warnings (one per retry).
    errors = [line for line in lines if line.startswith("Error: ")]
    if len(errors) != 1 or any(not line.startswith(("Error: ", "WARNING ")) for line in lines):
        problems.append("not one Error: line")
    if match and not re.search(match, proc.stderr):
        problems.append(f"message does not match {match!r}")
    return Verdict(not problems, outcome, "; ".join(problems))


def probe_error_verdict(proc: Proc, *, match: str | None = None) -> Verdict:
    """A reader probe that must end in a deliberate lrs error (exit 3, its class and message in JSON)."""
    result = proc.json()
    outcome = f"exit {proc.rc}: {result.get('error', '?')}: {result.get('message', proc.first_line)}"[:220]
    ok = proc.rc == 3 and "error" in result and (not match or re.search(match, result.get("message", "")))
    return Verdict(bool(ok), outcome, "" if ok else "expected a clear lrs error")


def both(*verdicts: Verdict) -> Verdict:
    """Several checks of one case: ok when all are; outcomes joined."""
    return Verdict(
        all(v.ok for v in verdicts),
        " | ".join(v.outcome for v in verdicts),
        "; ".join(v.note for v in verdicts if v.note),
        {k: v for verdict in verdicts for k, v in verdict.figures.items()},
    )


@dataclass
class Ctx:
    """The suite's working directory and the datasets every case copies."""

    base: Path
    quick: bool = False
    _cache: dict[str, Any] = field(default_factory=dict)

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def sample(self) -> Path:
        """`lrs sample` defaults: 8 episodes, 2 AV1 cameras, 3 episodes per data and video file."""

        def make() -> Path:
            from reshard.demo.sample import write_sample

            path = self.base / "shared" / "sample"
            return path if (path / "meta/info.json").exists() else write_sample(path)

        return self.once("sample", make)

    @property
    def resharded(self) -> Path:
        def make() -> Path:
            from reshard.job.run import reshard

            out = self.base / "shared" / "resharded"
            reshard(str(self.sample), out, quiet=True)  # does nothing where a --keep run made it already
            return out

        return self.once("resharded", make)

    def reference_epoch(self, seed: int = 0, **options: Any) -> dict[str, Any]:
        """A fault-free epoch of the resharded sample read in place (probe JSON)."""
        key = f"epoch-{seed}-{sorted(options.items())}"

        def make() -> dict[str, Any]:
            case = Case("reference", self.base / "shared" / key.replace(" ", "").replace("'", ""))
            proc = case.probe(
                "epoch", {"url": str(self.resharded), "options": epoch_options(seed, **options)}
            )
            if proc.rc != 0:
                raise RuntimeError(f"reference epoch failed: {proc.stderr[-2000:]}")
            return proc.json()

        return self.once(key, make)

    def copy(self, src: Path, dst: Path) -> Path:
        return Path(shutil.copytree(src, dst))


def epoch_options(seed: int, **options: Any) -> dict[str, Any]:
    return {"seed": seed, "episode_pool_size": 2, "return_uint8": True, **options}


CaseFn = Callable[[Ctx, Case], Verdict]


@dataclass(frozen=True)
class Registered:
    name: str
    group: str
    fn: CaseFn
    quick: bool


REGISTRY: list[Registered] = []


def register(name: str, group: str, *, quick: bool = False) -> Callable[[CaseFn], CaseFn]:
    def add(fn: CaseFn) -> CaseFn:
        REGISTRY.append(Registered(name, group, fn, quick))
        return fn

    return add


def register_many(entries: Iterable[tuple[str, str, CaseFn, bool]]) -> None:
    REGISTRY.extend(Registered(*entry) for entry in entries)
