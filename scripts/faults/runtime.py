"""Runtime fault cases of the fault suite: a corrupt node cache, a full disk, SIGKILL then rerun, one
cache shared by 4 processes under a small budget, epochs under 5xx faults, and planted secrets.

Servers are the tests' stand-ins (`tests/servers.py`: HTTP with Range and fault injection;
`tests/s3server.py`: moto S3 and a fault-injecting proxy), run in the suite's own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from harness import (
    LRS,
    PROBES,
    PYTHON,
    Case,
    Ctx,
    Proc,
    Verdict,
    both,
    epoch_options,
    error_verdict,
    probe_error_verdict,
    register,
    tree_sha256,
)

from tests.servers import Faults, RangeServer

_STACK = contextlib.ExitStack()
BUCKET = "lrs-faults"
CAM0_VIDEO = "videos/observation.images.cam0/chunk-000/file-003.mp4"


def cleanup() -> None:
    """Stop the servers the suite started (moto)."""
    _STACK.close()


def published(cache_dir: Path) -> dict[str, str]:
    """rel -> sha256 of a node cache's published files (its `.lrs/` bookkeeping left out)."""
    return tree_sha256(cache_dir, skip=lambda rel: rel.startswith(".lrs/") or rel.endswith(".lrs-part"))


def temps(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith((".lrs-part", ".tmp")))


def epoch_verdict(ctx: Ctx, proc: Any, *, seed: int = 0, what: str = "epoch") -> Verdict:
    """An epoch probe that must equal the fault-free epoch: every sample once, same values, same order."""
    result, reference = proc.json(), ctx.reference_epoch(seed)
    if proc.rc != 0:
        return probe_error_verdict(proc)
    once = result["samples"] == result["distinct"] == result["total_frames"] and result["repeated"] == 0
    same = result["digest"] == reference["digest"]
    outcome = (
        f"{what}: {result['samples']} samples, {result['distinct']} distinct of {result['total_frames']} frames, "
        f"{'equal to' if same else 'NOT equal to'} the fault-free epoch"
    )
    return Verdict(once and same, outcome)


# -- a corrupt node cache: the reader must notice and fetch again ---------------------------------------


def _flip(path: Path, *, keep_mtime: bool = False) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _truncate(path: Path, *, keep_mtime: bool = False) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def cache_case(damage: str) -> Any:
    def run(ctx: Ctx, case: Case) -> Verdict:
        cache_dir = case.dir / "cache"
        with RangeServer(ctx.resharded) as server:
            options = epoch_options(0, cache_dir=str(cache_dir))
            first = case.probe("epoch", {"url": server.url, "options": options})
            targets = [p for p in cache_dir.rglob("*") if p.is_file() and ".lrs" not in p.parts]
            videos = [p for p in targets if p.suffix == ".mp4"]
            tables = [p for p in targets if p.suffix == ".parquet"]
            if damage == "video-flipped":
                _flip(videos[0])
            elif damage == "video-bitrot-same-mtime":
                _flip(videos[0], keep_mtime=True)
            elif damage == "video-truncated":
                _truncate(videos[0])
            elif damage == "every-file-flipped":
                for path in targets:
                    _flip(path)
            elif damage == "hash-records-garbage":
                for record in (cache_dir / ".lrs").rglob("*.sha256"):
                    record.write_text("garbage")
                _flip(videos[0])
            elif damage == "stale-part-file":
                rel = videos[0]
                (rel.parent / f".{rel.name}.{rel.stat().st_size}.0123456789ab.lrs-part").write_bytes(
                    b"x" * 10
                )
                videos[0].unlink()
            case.watch(cache_dir)
            case.allow(r".*")  # the cache may publish again what it fetches; temps are checked below
            gets_before = len(server.requests)
            second = case.probe("epoch", {"url": server.url, "options": options})
            refetched = len(server.requests) - gets_before
        check = case.probe(
            "verify_cache", {"cache_dir": str(cache_dir), "dataset": str(ctx.resharded)}
        ).json()
        consistent = not check.get("bad") and not check.get("temps")
        verdict = both(
            epoch_verdict(ctx, first, what="fill"), epoch_verdict(ctx, second, what="after damage")
        )
        note = f"{len(tables)} tables and {len(videos)} videos cached; {refetched} requests after the damage"
        if not consistent:
            note += f"; cache inconsistent: bad {check.get('bad')}, temps {check.get('temps')}"
        return Verdict(
            verdict.ok and consistent, verdict.outcome, "; ".join(filter(None, [verdict.note, note]))
        )

    return run


for _damage, _quick in [
    ("video-flipped", True),
    ("video-bitrot-same-mtime", False),
    ("video-truncated", False),
    ("every-file-flipped", False),
    ("hash-records-garbage", False),
    ("stale-part-file", False),
]:
    register(f"cache-{_damage}", "cache", quick=_quick)(cache_case(_damage))


# -- a full disk -----------------------------------------------------------------------------------------

FULL_DISK: dict[str, str | None] = {"method": None}


@contextlib.contextmanager
def full_disk(path: Path, size: str = "200k") -> Iterator[dict[str, str]]:
    """A small tmpfs mounted at `path` (root in this container); else children run under RLIMIT_FSIZE
    (writes past the limit fail with EFBIG instead of ENOSPC). Yields env additions for the children."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode == 0:
        FULL_DISK["method"] = f"tmpfs size={size} (ENOSPC)"
        try:
            yield {}
        finally:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
    else:
        FULL_DISK["method"] = "RLIMIT_FSIZE (EFBIG)"
        yield {"LRS_FAULTS_FSIZE": "200000"}


DISK_FULL = r"No space left|EFBIG|too large"


def disk_verdict(proc: Any) -> Verdict:
    verdict = error_verdict(proc, match=DISK_FULL)
    return Verdict(verdict.ok, verdict.outcome, verdict.note, {"full_disk_method": FULL_DISK["method"]})


def _disk_leftovers(case: Case, disk: Path) -> None:
    """What lies on the full disk now (before it is unmounted), as leftovers of the case."""
    case.extra += [f"disk/{rel}" for rel in sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))]


@register("disk-full-reshard-out", "disk", quick=True)
def disk_full_reshard(ctx: Ctx, case: Case) -> Verdict:
    disk = case.dir / "disk"
    with full_disk(disk) as env:
        proc = case.lrs("reshard", str(ctx.sample), "--out", str(disk / "out"), "-q", env=env)
        _disk_leftovers(case, disk)
    return disk_verdict(proc)


@register("disk-full-prewarm-cache", "disk")
def disk_full_prewarm(ctx: Ctx, case: Case) -> Verdict:
    disk = case.dir / "disk"
    with full_disk(disk) as env:
        # A folder of its own on the small disk: a mount point is world-writable, which lrs refuses.
        proc = case.lrs(
            "prewarm", f"file://{ctx.resharded}", "--cache-dir", str(disk / "cache"), "-q", env=env
        )
        case.extra += [f"disk/{t}" for t in temps(disk)]
    return disk_verdict(proc)


@register("disk-full-reader-cache", "disk")
def disk_full_reader(ctx: Ctx, case: Case) -> Verdict:
    disk = case.dir / "disk"
    with full_disk(disk) as env, RangeServer(ctx.resharded) as server:
        proc = case.probe(
            "epoch", {"url": server.url, "options": epoch_options(0, cache_dir=str(disk / "cache"))}, env=env
        )
        case.extra += [f"disk/{t}" for t in temps(disk)]
    if proc.rc == 0:
        return epoch_verdict(ctx, proc)
    verdict = probe_error_verdict(proc, match=DISK_FULL)
    return Verdict(verdict.ok, verdict.outcome, verdict.note, {"full_disk_method": FULL_DISK["method"]})


@register("disk-full-push-target", "disk")
def disk_full_push(ctx: Ctx, case: Case) -> Verdict:
    disk = case.dir / "disk"
    with full_disk(disk) as env:
        proc = case.lrs("push", str(ctx.resharded), f"file://{disk / 'target'}", "-q", env=env)
        case.extra += [f"disk/{t}" for t in temps(disk)]
        if (disk / "target" / "meta" / "lrs" / "layout.json").exists():
            case.extra.append("disk/target/meta/lrs/layout.json (an index over a partial push)")
    return disk_verdict(proc)


# -- SIGKILL at 20 random points, then a rerun: byte-identical to an uninterrupted run -----------------

KILLS = 20
HOOK_POINTS = [("staged", 17), ("recorded", 17), ("published", 24), ("meta", 6)]


def _kill_figures(job: str, identical: int, runs: int, landed: int, half_written: int) -> dict[str, Any]:
    return {
        f"kill_{job}": f"{identical} of {runs} identical",
        f"kill_{job}_landed": landed,
        f"kill_{job}_half_written": half_written,
    }


@register("kill-reshard-x20", "kill", quick=True)
def kill_reshard(ctx: Ctx, case: Case) -> Verdict:
    """Half the kills at the hook's protocol points (LRS_TEST_KILL_AT), half by a timer from outside
    (the whole process group, 2 workers); then the same command again."""
    expected = tree_sha256(ctx.resharded)
    runs = 3 if ctx.quick else KILLS
    identical = landed = half_written = 0
    for i in range(runs):
        rng = random.Random(i)
        out = case.dir / f"out{i}"
        argv = [PYTHON, "-c", LRS, "reshard", str(ctx.sample), "--out", str(out), "-q", "--workers", "2"]
        if i % 2 == 0:
            point, most = rng.choice(HOOK_POINTS)
            proc = case.run(argv, env={"LRS_TEST_KILL_AT": f"{point}:{rng.randint(1, most)}"})
            hit = proc.rc != 0  # -9: the parent killed itself; 3: a worker did, the parent said so
        else:
            proc, hit = case.killed_run(argv, rng.uniform(0.6, 2.5))
        landed += hit
        if out.exists():  # whatever is visible under --out right after the kill must be complete
            half_written += sum(1 for rel, sha in tree_sha256(out).items() if expected.get(rel) != sha)
        rerun = case.run(argv)
        same = (
            rerun.rc == 0 and tree_sha256(out) == expected and not (case.dir / f".out{i}.lrs-work").exists()
        )
        identical += same
    return Verdict(
        identical == runs and half_written == 0,
        f"{identical} of {runs} identical after SIGKILL + rerun ({landed} kills landed mid-run)",
        "" if half_written == 0 else f"{half_written} half-written files visible under --out",
        _kill_figures("reshard", identical, runs, landed, half_written),
    )


def _moto(ctx: Ctx) -> str:
    from tests.s3server import moto_server

    return ctx.once("moto", lambda: _STACK.enter_context(moto_server()))


def _aws_env(endpoint: str, **extra: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        **extra,
    }


def _objects(endpoint: str, prefix: str) -> dict[str, str]:
    import hashlib

    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing", skip_instance_cache=True)
    root = f"{BUCKET}/{prefix}"
    return {path[len(root) + 1 :]: hashlib.sha256(fs.cat_file(path)).hexdigest() for path in fs.find(root)}


@register("kill-push-x20", "kill")
def kill_push(ctx: Ctx, case: Case) -> Verdict:
    """`lrs push` to S3 (moto behind a proxy adding 30 ms a request), SIGKILLed after a random delay."""
    from tests.s3server import FaultProxy

    endpoint = _moto(ctx)
    expected = tree_sha256(ctx.resharded)
    runs = 3 if ctx.quick else KILLS
    identical = landed = 0
    with FaultProxy(endpoint, latency_s=0.03) as proxy:
        env = _aws_env(proxy.endpoint)
        for i in range(runs):
            argv = [
                PYTHON,
                "-c",
                LRS,
                "push",
                str(ctx.resharded),
                f"s3://{BUCKET}/kill/{i}",
                "--create",
                "-q",
                "--workers",
                "2",
            ]
            _, hit = case.killed_run(argv, random.Random(i).uniform(0.6, 2.0), env=env)
            landed += hit
            rerun = case.run(argv, env=env)
            identical += rerun.rc == 0 and _objects(endpoint, f"kill/{i}") == expected
    return Verdict(
        identical == runs,
        f"{identical} of {runs} identical after SIGKILL + rerun ({landed} kills landed mid-run)",
        "",
        _kill_figures("push", identical, runs, landed, 0),
    )


@register("kill-prewarm-x20", "kill")
def kill_prewarm(ctx: Ctx, case: Case) -> Verdict:
    """`lrs prewarm` over HTTP (30 ms a request), SIGKILLed after a random delay, then run again."""
    runs = 3 if ctx.quick else KILLS
    identical = landed = 0
    stale = []
    with RangeServer(ctx.resharded, faults=Faults(latency_s=0.03)) as server:
        reference = case.dir / "reference"
        case.lrs("prewarm", server.url, "--cache-dir", str(reference), "-q")
        expected = published(reference)
        for i in range(runs):
            cache_dir = case.dir / f"cache{i}"
            argv = [PYTHON, "-c", LRS, "prewarm", server.url, "--cache-dir", str(cache_dir), "-q"]
            _, hit = case.killed_run(argv, random.Random(i).uniform(0.4, 1.2))
            landed += hit
            rerun = case.run(argv)
            identical += rerun.rc == 0 and published(cache_dir) == expected
            stale += [f"cache{i}/{t}" for t in temps(cache_dir)]
    case.extra += stale
    return Verdict(
        identical == runs and bool(expected),
        f"{identical} of {runs} identical after SIGKILL + rerun ({landed} kills landed mid-run)",
        "",
        _kill_figures("prewarm", identical, runs, landed, 0),
    )


# -- one node cache, 4 processes, a budget below the working set, one killed ------------------------------


@register("cache-4-processes-small-budget-1-killed", "cache")
def shared_cache(ctx: Ctx, case: Case) -> Verdict:
    cache_dir = case.dir / "cache"
    total = sum(p.stat().st_size for p in (ctx.resharded / "videos").rglob("*.mp4"))
    budget = total // 2
    with RangeServer(ctx.resharded, faults=Faults(latency_s=0.01, jitter_s=0.02)) as server:
        procs = []
        for seed in range(4):
            options = epoch_options(
                seed, cache_dir=str(cache_dir), cache_max_bytes=budget, prefetch_episodes=1
            )
            argv = [PYTHON, PROBES, "epoch", json.dumps({"url": server.url, "options": options})]
            procs.append(
                subprocess.Popen(
                    argv,
                    env=case.env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            )
        time.sleep(random.Random(4).uniform(1.5, 3.0))
        os.killpg(procs[3].pid, 9)
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            case.procs.append(Proc(tuple(cast("list[str]", proc.args)), proc.returncode, out, err, 0.0))
            results.append(case.procs[-1])
    verdicts = [epoch_verdict(ctx, results[seed], seed=seed, what=f"reader {seed}") for seed in range(3)]
    check = case.probe("verify_cache", {"cache_dir": str(cache_dir), "dataset": str(ctx.resharded)}).json()
    within = check.get("bytes", 1 << 60) <= budget
    consistent = not check.get("bad")
    verdict = both(*verdicts)
    note = (
        f"budget {budget} B (half the videos); cache holds {check.get('bytes')} B in {check.get('good')} files, "
        f"{len(check.get('bad', []))} bad, {len(check.get('temps', []))} temps of the killed reader; reader 3 killed: "
        f"exit {results[3].rc}"
    )
    ok = verdict.ok and within and consistent and results[3].rc == -9
    return Verdict(
        ok,
        verdict.outcome,
        note,
        {"shared_cache_within_budget": within, "shared_cache_consistent": consistent},
    )


# -- a full epoch under 10 % 5xx and latency jitter: every sample once, equal to the fault-free epoch ---------


@register("epoch-http-10pct-5xx", "epoch", quick=True)
def epoch_http(ctx: Ctx, case: Case) -> Verdict:
    with RangeServer(
        ctx.resharded, faults=Faults(seed=11, fail_rate=0.1, latency_s=0.002, jitter_s=0.02)
    ) as server:
        proc = case.probe(
            "epoch", {"url": server.url, "options": epoch_options(0, cache_dir=str(case.dir / "cache"))}
        )
        injected = sum(r.fault == "fail" for r in server.requests)
        total = len(server.requests)
    return _epoch_under_500s(ctx, proc, injected, total, "exactly_once_http")


@register("epoch-s3-10pct-5xx", "epoch")
def epoch_s3(ctx: Ctx, case: Case) -> Verdict:
    from tests.s3server import FaultProxy

    endpoint = _moto(ctx)
    push = case.lrs(
        "push", str(ctx.resharded), f"s3://{BUCKET}/epoch", "--create", "-q", env=_aws_env(endpoint)
    )
    if push.rc != 0:
        return Verdict(False, f"setup push failed: exit {push.rc}: {push.first_line}")
    with FaultProxy(endpoint, fail_fraction=0.1, seed=5, latency_s=0.002, jitter_s=0.02) as proxy:
        proc = case.probe(
            "epoch",
            {"url": f"s3://{BUCKET}/epoch", "options": epoch_options(0, cache_dir=str(case.dir / "cache"))},
            env=_aws_env(proxy.endpoint),
        )
        injected, total = proxy.injected, len(proxy.requests)
    return _epoch_under_500s(ctx, proc, injected, total, "exactly_once_s3")


def _epoch_under_500s(ctx: Ctx, proc: Any, injected: int, total: int, measure: str) -> Verdict:
    """An epoch's verdict where some requests were answered 500: exactly once, and some were."""
    verdict = epoch_verdict(ctx, proc)
    return Verdict(
        verdict.ok and injected > 0,
        verdict.outcome,
        f"{injected} of {total} requests answered 500",
        {measure: verdict.ok},
    )


# -- planted secrets: no output, log or written file may hold them --------------------------------------------

SECRETS = {
    "HF_TOKEN": "hf_PlantedFakeToken0123456789abcdef",
    "AWS_SECRET_ACCESS_KEY": "PlantedFakeSecretKey/0123456789abcdefXYZ",
    "AWS_SESSION_TOKEN": "PlantedFakeSessionToken0123456789",
}
PASSWORD = "PlantedPassw0rd42"
QUERY_TOKEN = "PlantedQueryToken42"
ALL_SECRETS = [*SECRETS.values(), PASSWORD, QUERY_TOKEN]


def leaks(case: Case, *roots: Path) -> list[str]:
    """Where a planted secret appears: a child's stdout/stderr, or a file under `roots`."""
    found = []
    for i, proc in enumerate(case.procs):
        for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            found += [f"child {i} {name}: {s[:12]}..." for s in ALL_SECRETS if s in text]
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                found += [f"{path.relative_to(root)}: {s[:12]}..." for s in ALL_SECRETS if s.encode() in data]
    return found


def token_verdict(case: Case, found: list[str], outcome: str, ok: bool = True) -> Verdict:
    return Verdict(ok and not found, outcome, "; ".join(found[:4]), {f"token_leaks_{case.name}": len(found)})


def _userinfo(url: str) -> str:
    return url.replace("http://", f"http://lrs:{PASSWORD}@")


@register("tokens-reshard-verify-http", "tokens", quick=True)
def tokens_reshard(ctx: Ctx, case: Case) -> Verdict:
    """reshard from http://user:password@..., killed once before meta is published (its work directory,
    options.json and completion records, is scanned), finished, verified --against; HF/AWS secrets in env."""
    env = {**SECRETS, "AWS_ACCESS_KEY_ID": "AKIAPLANTEDFAKE0000"}
    out = case.dir / "out"
    with RangeServer(ctx.sample) as server:
        url = _userinfo(server.url)
        killed = case.lrs("reshard", url, "--out", str(out), "-q", env={**env, "LRS_TEST_KILL_AT": "meta:1"})
        in_work = leaks(case, case.dir)
        done = case.lrs("reshard", url, "--out", str(out), "-q", env=env)
        verify = case.lrs("verify", str(out), "--against", url, "-q", env=env)
        doctor = case.lrs("doctor", url, "--json", env=env)
    found = in_work + leaks(case, case.dir)
    outcome = f"reshard killed exit {killed.rc}, rerun exit {done.rc}, verify --against exit {verify.rc}, doctor exit {doctor.rc}"
    return token_verdict(
        case, sorted(set(found)), outcome, killed.rc == -9 and done.rc == verify.rc == doctor.rc == 0
    )


@register("tokens-skip-defective-http", "tokens")
def tokens_skip(ctx: Ctx, case: Case) -> Verdict:
    """--skip-defective over http://user:password@... with a token query: dropped.json and the summary."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    (src / "videos/observation.images.cam1/chunk-000/file-001.mp4").write_bytes(b"")
    with RangeServer(src) as server:
        proc = case.lrs(
            "reshard",
            _userinfo(server.url),
            "--out",
            str(case.dir / "out"),
            "--skip-defective",
            "-q",
            env=SECRETS,
        )
    return token_verdict(
        case,
        leaks(case, case.dir / "out"),
        f"exit {proc.rc}: {proc.first_line or proc.stdout.strip()[:120]}",
        proc.rc == 0,
    )


@register("tokens-errors", "tokens")
def tokens_errors(ctx: Ctx, case: Case) -> Verdict:
    """Failures whose messages carry the URL: a dead server with user:password@, a ?token= query, a
    missing file; reshard, prewarm, doctor, push to an unreachable S3 endpoint."""
    from harness import error_verdict as clear

    dead = _userinfo(f"http://127.0.0.1:{_free_port()}/ds")
    runs = [
        case.lrs("reshard", dead, "--out", str(case.dir / "out1"), "-q", env=SECRETS),
        case.lrs("prewarm", dead, "--cache-dir", str(case.dir / "cache"), "-q", env=SECRETS),
        case.lrs("doctor", f"{dead}?token={QUERY_TOKEN}", env=SECRETS),
        case.lrs(
            "push",
            str(ctx.resharded),
            "s3://lrs-faults/x",
            "-q",
            env=_aws_env(f"http://lrs:{PASSWORD}@127.0.0.1:{_free_port()}", **SECRETS),
        ),
    ]
    with RangeServer(ctx.sample) as server:
        runs.append(
            case.lrs(
                "reshard",
                f"{server.url}/nothing-here?token={QUERY_TOKEN}",
                "--out",
                str(case.dir / "out2"),
                "-q",
                env=SECRETS,
            )
        )
    verdicts = [clear(p) for p in runs]
    outcome = ", ".join(f"exit {p.rc}" for p in runs)
    return token_verdict(case, leaks(case, case.dir), outcome, all(v.ok for v in verdicts))


@register("tokens-prewarm-push-s3", "tokens")
def tokens_prewarm_push(ctx: Ctx, case: Case) -> Verdict:
    """prewarm from http://user:password@... (the cache directory scanned) and push to S3 with planted AWS
    credentials in the environment."""
    endpoint = _moto(ctx)
    with RangeServer(ctx.resharded) as server:
        pre = case.lrs("prewarm", _userinfo(server.url), "--cache-dir", str(case.dir / "cache"), env=SECRETS)
    push = case.lrs(
        "push", str(ctx.resharded), f"s3://{BUCKET}/tokens", "--create", env=_aws_env(endpoint, **SECRETS)
    )
    return token_verdict(
        case, leaks(case, case.dir), f"prewarm exit {pre.rc}, push exit {push.rc}", pre.rc == push.rc == 0
    )


def _free_port() -> int:
    from tests.s3server import free_port

    return free_port()


@register("immutable-folder-every-command", "disk")
def immutable_folder(ctx: Ctx, case: Case) -> Verdict:
    """A folder nobody can create anything in (`chattr +i`, as a read-only mount behaves) given to every
    command that writes a local folder, and to a stream's cache: one line naming it, exit 3 (was: a
    PermissionError traceback, exit 1)."""
    locked = case.dir / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        return Verdict(False, "not run: chattr +i needs root and a filesystem that has it")
    match = r"Invalid path \(.*locked/[^)]*\): Operation not permitted\. Expected a folder you can write"
    try:
        procs = [
            case.lrs("reshard", str(ctx.sample), "--out", "locked/out", "-q"),
            case.lrs("prewarm", f"file://{ctx.resharded}", "--cache-dir", "locked/c", "-q"),
            case.lrs("sample", "locked/s", "-q"),
            case.lrs("demo", "--workdir", "locked/d"),
        ]
        stream = case.probe(
            "epoch", {"url": f"file://{ctx.resharded}", "options": {"cache_dir": str(locked / "c")}}
        )
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    verdicts = [error_verdict(p, match=match) for p in procs] + [probe_error_verdict(stream, match=match)]
    ok = all(v.ok for v in verdicts)
    notes = "; ".join(v.note for v in verdicts if v.note)
    return Verdict(
        ok, f"{sum(v.ok for v in verdicts)} of {len(verdicts)} one line, exit 3: {procs[0].first_line}", notes
    )
