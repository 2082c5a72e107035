"""Runtime fault cases of the fault suite: a corrupt node cache, a full disk, SIGKILL then rerun, one
cache shared by 4 processes under a small budget, epochs under 5xx faults, and planted secrets.

Servers are the tests' stand-ins (`tests/servers.py`: HTTP with Range and fault injection;
`tests/s3server.py`: moto S3 and a fault-injecting proxy), run in the suite's own process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fault_harness import (
    Case,
    Ctx,
    Verdict,
    both,
    epoch_options,
    error_verdict,
    probe_error_verdict,
    register,
    tree_sha256,
)

from tests.servers import RangeServer

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

FULL_DISK = {"method": None}


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
        proc = case.lrs("prewarm", f"file://{ctx.resharded}", "--cache-dir", str(disk), "-q", env=env)
        case.extra += [f"disk/{t}" for t in temps(disk)]
    return disk_verdict(proc)


@register("disk-full-reader-cache", "disk")
def disk_full_reader(ctx: Ctx, case: Case) -> Verdict:
    disk = case.dir / "disk"
    with full_disk(disk) as env, RangeServer(ctx.resharded) as server:
        proc = case.probe(
            "epoch", {"url": server.url, "options": epoch_options(0, cache_dir=str(disk))}, env=env
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
