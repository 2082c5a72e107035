"""Hostile cases of the fault suite (docs/security.md): another user's cache or work
directory, a planted ledger row, a link out of a source, and metadata built to exhaust time or memory.

Cases that give a directory to another uid (4321) need root; elsewhere they report that they did not run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from harness import Case, Ctx, Verdict, both, error_verdict, probe_error_verdict, register

OTHER_UID = 4321


def _others(path: Path) -> Path:
    """A directory as another user leaves it for us: theirs, open to all."""
    path.mkdir(parents=True)
    path.chmod(0o777)
    os.chown(path, OTHER_UID, OTHER_UID)
    return path


def _not_root() -> Verdict | None:
    if os.geteuid() == 0:
        return None
    return Verdict(False, "not run: giving a directory to another uid needs root")


def _empty(path: Path) -> Verdict:
    left = sorted(os.listdir(path))
    return Verdict(not left, f"{path.name}/ {'untouched' if not left else f'holds {left[:3]}'}")


@register("hostile-others-cache-dir", "hostile")
def others_cache_dir(ctx: Ctx, case: Case) -> Verdict:
    """A cache dir made by another user (0777): prewarm and a stream refuse it before writing anything."""
    skipped = _not_root()
    if skipped:
        return skipped
    shared = _others(case.dir / "shared")
    url = f"file://{ctx.resharded}"
    prewarm = case.lrs("prewarm", url, "--cache-dir", "shared", "-q")
    stream = case.probe("epoch", {"url": url, "options": {"cache_dir": str(shared)}})
    owned = r"Invalid cache directory \(.*shared\): owned by another user \(owner uid 4321"
    return both(
        error_verdict(prewarm, match=owned),
        probe_error_verdict(stream, match="owned by another user"),
        _empty(shared),
    )


@register("hostile-others-work-dir", "hostile")
def others_work_dir(ctx: Ctx, case: Case) -> Verdict:
    """A work dir pre-created by another user (where they would swap the worker context for their pickle):
    reshard with 2 workers refuses it, writes nothing there and runs nothing."""
    skipped = _not_root()
    if skipped:
        return skipped
    work = _others(case.dir / ".out.lrs-work")
    proc = case.lrs("reshard", str(ctx.sample), "--out", "out", "--workers", "2", "-q")
    made = Verdict(
        not (case.dir / "out").exists(), "no output" if not (case.dir / "out").exists() else "output made"
    )
    return both(
        error_verdict(proc, match=r"Invalid work directory .*: owned by another user"), _empty(work), made
    )


@register("hostile-planted-ledger-row", "hostile")
def planted_ledger_row(ctx: Ctx, case: Case) -> Verdict:
    """Ledger rows naming a file outside the cache (as a planted or damaged ledger has them), the least
    recently used and far over budget: eviction drops them and deletes or locks nothing outside."""
    from cache.ledger import ledger_of

    victim = case.dir / "victim" / "file"
    victim.parent.mkdir()
    victim.write_bytes(b"mine")
    url = f"file://{ctx.resharded}"
    first = case.lrs("prewarm", url, "--cache-dir", "c", "--num-episodes", "1", "-q")
    with ledger_of(str(case.dir / "c")).transaction() as tx:
        tx.record(str(victim), 10**12, 0)
        tx.record("x/../../victim/file", 10**12, 0)
    ledger_of(str(case.dir / "c")).close()
    second = case.lrs("prewarm", url, "--cache-dir", "c", "--seed", "3", "--cache-max-bytes", "64KiB", "-q")
    case.allow(r"c(/.*)?")
    intact = victim.read_bytes() == b"mine" and os.listdir(victim.parent) == ["file"]
    return both(
        Verdict(first.rc == 0 and second.rc == 0, f"prewarm exit {first.rc}, {second.rc} (budget 64 KiB)"),
        Verdict(intact, "victim intact, no lock beside it" if intact else "victim touched"),
    )


@register("hostile-link-out-of-source", "hostile")
def link_out_of_source(ctx: Ctx, case: Case) -> Verdict:
    """A source whose video is a symbolic link to a file outside it: a doctor defect, a reshard refusal."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    video = sorted((src / "videos").rglob("*.mp4"))[0]
    outside = case.dir / "elsewhere.mp4"
    video.rename(outside)
    video.symlink_to(outside)
    doctor = case.lrs("doctor", "src", "-q")
    reshard = case.lrs("reshard", "src", "--out", "out", "-q")
    named = doctor.rc == 1 and "a symbolic link to" in doctor.stdout
    return both(
        Verdict(named, f"doctor exit {doctor.rc}" + (": names the link" if named else "")),
        error_verdict(reshard, match=r"Invalid file \(a symbolic link to .*, outside the dataset\)"),
    )


def _edit_info(root: Path, **changes: object) -> None:
    path = root / "meta/info.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@register("hostile-template-format-width", "hostile")
def template_format_width(ctx: Ctx, case: Case) -> Verdict:
    """`{chunk_index:>400000000}` in data_path (was: 2.5 GB and over 60 s): one line, exit 3, in seconds."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    _edit_info(src, data_path="data/chunk-{chunk_index:>400000000}/file-{file_index:03d}.parquet")
    proc = case.lrs("describe", "src", timeout=60)
    verdict = error_verdict(proc, match=r"data_path")
    fast = proc.seconds < 10 and len(proc.stderr) < 2000
    return both(verdict, Verdict(fast, f"{proc.seconds:.1f} s, {len(proc.stderr)} bytes of stderr"))


@register("hostile-nested-json", "hostile")
def nested_json(ctx: Ctx, case: Case) -> Verdict:
    """200,000 nested brackets in stats.json (was: RecursionError traceback): one line, exit 3."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    (src / "meta/stats.json").write_text("[" * 200_000 + "]" * 200_000)
    proc = case.lrs("describe", "src", timeout=60)
    return both(
        error_verdict(proc, match=r"stats\.json"), Verdict(proc.seconds < 10, f"{proc.seconds:.1f} s")
    )


@register("hostile-video-other-size", "hostile")
def video_other_size(ctx: Ctx, case: Case) -> Verdict:
    """A camera's video at 128x96 where info.json declares 96x64 (was: no defect, the reader returned the
    big frames): a doctor defect and a reshard refusal."""
    from tests.reshard.defects import CAM1, resize, video

    src = ctx.copy(ctx.sample, case.dir / "src")
    resize(video(src, CAM1, 1), 128, 96)
    doctor = case.lrs("doctor", "src", "-q")
    reshard = case.lrs("reshard", "src", "--out", "out", "-q")
    named = doctor.rc == 1 and "Invalid frame size (128x96)" in doctor.stdout
    shutil.rmtree(case.dir / ".out.lrs-work", ignore_errors=True)
    return both(
        Verdict(named, f"doctor exit {doctor.rc}" + (": names the size" if named else "")),
        error_verdict(reshard, match=r"Invalid frame size \(128x96\)"),
    )
