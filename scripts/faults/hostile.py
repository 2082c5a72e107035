"""Hostile cases of the fault suite (docs/security.md): another user's cache or work
directory, a cache under a directory others may write, a planted ledger row or link in a cache, a link
out of a source, metadata built to exhaust time or memory, names that hold control characters, a declared
feature no data file holds, and a video swapped under an index.

Cases that give a directory to another uid (4321) need root; elsewhere they report that they did not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

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
)

from tests.servers import Faults, RangeServer

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


def _victim(case: Case) -> Path:
    """A file of another user's that an attacker wants lrs to delete: big, and the least recently used."""
    victim = case.dir / "victim"
    victim.mkdir()
    (victim / "important.txt").write_bytes(b"mine" * 250_000)
    os.utime(victim / "important.txt", (0, 0))
    return victim


def _intact(victim: Path) -> Verdict:
    ok = (
        os.listdir(victim) == ["important.txt"]
        and (victim / "important.txt").read_bytes() == b"mine" * 250_000
    )
    return Verdict(ok, "victim intact" if ok else f"victim touched: {sorted(os.listdir(victim))}")


def _swapped_cache(case: Case, parent: Path) -> Path:
    """The cache as an attacker who may rename entries of `parent` leaves it: theirs in place of ours, a
    dataset folder linked to the victim's directory (`zz -> victim`)."""
    cache = parent / "cache"
    cache.mkdir(mode=0o700)
    (cache / "zz").symlink_to(_victim(case))
    return cache


def _refused_before_work(case: Case, ctx: Ctx, parent: Path, ancestor: Path, who: str) -> Verdict:
    cache = _swapped_cache(case, parent)
    before = sorted(os.listdir(cache))
    url = f"file://{ctx.resharded}"
    proc = case.lrs("prewarm", url, "--cache-dir", str(cache), "--cache-max-bytes", "64KiB", "-q")
    named = rf"Invalid cache directory \({cache}\): its ancestor {ancestor} \(.*\) is writable by {who}"
    untouched = sorted(os.listdir(cache)) == before
    return both(
        error_verdict(proc, match=named),
        _intact(case.dir / "victim"),
        Verdict(untouched, "cache untouched" if untouched else f"cache holds {sorted(os.listdir(cache))}"),
    )


@register("hostile-group-writable-parent", "hostile")
def group_writable_parent(ctx: Ctx, case: Case) -> Verdict:
    """A cache in a group's project directory (setgid 2775, not sticky), where a member can swap it for
    theirs holding `zz -> victim` mid-prewarm: prewarm refuses the path in one line, exit 3, before any
    work, and nothing outside the cache is deleted."""
    group = case.dir / "projects" / "g"
    group.mkdir(parents=True)
    group.chmod(0o2775)
    return _refused_before_work(case, ctx, group, group, "its group")


@register("hostile-writable-grandparent", "hostile")
def writable_grandparent(ctx: Ctx, case: Case) -> Verdict:
    """/scratch/alice/cache with /scratch 0777 and not sticky: anyone can rename `alice` away and make the
    path again with their cache in it. Prewarm refuses in one line, exit 3; nothing outside is deleted."""
    scratch = case.dir / "scratch"
    (scratch / "alice").mkdir(parents=True, mode=0o755)
    scratch.chmod(0o777)
    return _refused_before_work(case, ctx, scratch / "alice", scratch, "every user")


@register("hostile-symlinked-dataset-folder", "hostile")
def symlinked_dataset_folder(ctx: Ctx, case: Case) -> Verdict:
    """`zz -> victim` planted as a cache's dataset folder and in one, its file the least recently used; the ledger
    lost (a rebuild), then a prewarm under a small budget that evicts: the rebuild records nothing behind
    the link and eviction deletes nothing through it."""
    url = f"file://{ctx.resharded}"
    first = case.lrs("prewarm", url, "--cache-dir", "c", "--num-episodes", "1", "-q")
    cache = case.dir / "c"
    folders = [p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")]
    victim = _victim(case)
    for folder in [cache, *folders]:  # a linked dataset folder, and a linked folder inside one
        (folder / "zz").symlink_to(victim)
    for suffix in ("", "-wal", "-shm"):
        (cache / ".lrs" / f"ledger.sqlite{suffix}").unlink(missing_ok=True)
    second = case.lrs("prewarm", url, "--cache-dir", "c", "--seed", "3", "--cache-max-bytes", "64KiB", "-q")
    case.allow(r"c(/.*)?")
    return both(
        Verdict(
            first.rc == 0 and second.rc == 0 and bool(folders),
            f"prewarm exit {first.rc}, {second.rc} (budget 64 KiB, {len(folders)} dataset folder)",
        ),
        _intact(victim),
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
    big frames): a doctor defect and a reshard refusal. In a reshard, another camera's video (another
    size) in place of one meta/lrs/files.parquet lists, meta/ untouched (was: a "stale lrs index" warning,
    then the replaced frames, exit 0): refused in one line naming the file, exit 3, read in place (`lrs
    show`, a stream) and over a URL alike."""
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
        *_swapped_camera(ctx, case),
    )


def _swapped_camera(ctx: Ctx, case: Case) -> list[Verdict]:
    """The resharded sample with camera 0's episode 1 replaced by camera 1's, read in place and by URL."""
    from tests.reshard.defects import CAM0, CAM1, video

    out = ctx.copy(ctx.resharded, case.dir / "lrs")
    swapped = video(out, CAM0, 1)
    swapped.write_bytes(video(out, CAM1, 1).read_bytes())
    refused = rf"Invalid file \({re.escape(str(swapped))}\): has \d+ bytes, not the \d+ meta/lrs/files\.parquet lists"
    shown = case.lrs("show", "lrs", "--episode", "1", "--out", "e.png")
    in_place = case.probe("epoch", {"url": str(out), "options": epoch_options(0)})
    url = {"url": f"file://{out}", "options": epoch_options(0, cache_dir=str(case.dir / "cache"))}
    fetched = case.probe("epoch", url)
    return [
        error_verdict(shown, match=refused),
        probe_error_verdict(in_place, match=refused),
        probe_error_verdict(fetched, match=rf"{re.escape(CAM0)}/chunk-000/file-001\.mp4.*size \d+"),
    ]


# A feature name that retitles the terminal (OSC 0 ... BEL), then forges a line of a report.
_HOSTILE_NAME = "obs\x1b]0;pwned\x07\nverify: OK - FORGED LINE"


@register("hostile-control-chars-in-names", "hostile")
def control_chars_in_names(ctx: Ctx, case: Case) -> Verdict:
    """A feature named with an escape sequence and a newline, and a task that clears the screen (was:
    printed raw by describe, no doctor defect): describe prints them escaped, doctor names each as a
    defect, escaped."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    features = json.loads((src / "meta/info.json").read_text())["features"]
    _edit_info(src, features={**features, _HOSTILE_NAME: {"dtype": "float32", "shape": [1]}})
    _edit_task(src, 0, lambda task: f"pick\x1b[2J{task}")
    describe = case.lrs("describe", "src")
    doctor = case.lrs("doctor", "src", "-q")
    escaped = repr(_HOSTILE_NAME)[1:-1]
    raw = [p for p in (describe, doctor) if _raw_control(p.stdout + p.stderr) or "\nverify: OK" in p.stdout]
    shown = describe.rc == 0 and escaped in describe.stdout and not raw
    names = [f"Invalid feature name ('{escaped}')", r"Invalid task 0 ('pick\x1b[2J"]
    named = doctor.rc == 1 and all(name in doctor.stdout for name in names)
    return both(
        Verdict(shown, f"describe exit {describe.rc}: " + ("escaped" if shown else "raw control characters")),
        Verdict(named, f"doctor exit {doctor.rc}: " + ("names both" if named else "misses a name")),
    )


@register("hostile-feature-absent", "hostile")
def feature_absent(ctx: Ctx, case: Case) -> Verdict:
    """A feature info.json declares that no data file holds (was: no defect, reshard exit 0): a doctor
    defect naming the data file and the feature, and a reshard refusal in one line, exit 3."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    features = json.loads((src / "meta/info.json").read_text())["features"]
    _edit_info(src, features={**features, "observation.extra": {"dtype": "float32", "shape": [2]}})
    doctor = case.lrs("doctor", "src", "-q")
    reshard = case.lrs("reshard", "src", "--out", "out", "-q")
    shutil.rmtree(case.dir / ".out.lrs-work", ignore_errors=True)
    named = doctor.rc == 1 and "Invalid data file (no 'observation.extra' column)" in doctor.stdout
    made = (case.dir / "out").exists()
    refused = r"data/chunk-000/file-000\.parquet, field 'observation\.extra': Invalid data file"
    return both(
        Verdict(named, f"doctor exit {doctor.rc}" + (": names the feature" if named else "")),
        error_verdict(reshard, match=refused),
        Verdict(not made, "no output" if not made else "output made"),
    )


def _raw_control(text: str) -> bool:
    """Whether `text` holds a control character other than the newlines between its lines."""
    return any(not c.isprintable() and c != "\n" for c in text)


def _edit_task(root: Path, index: int, change: Callable[[str], str]) -> None:
    """Task `index` changed in meta/tasks.parquet and in every episode's `tasks` that lists it."""
    import pyarrow.parquet as pq

    from reader.format.parquet import replace_columns

    tasks = pq.read_table(root / "meta/tasks.parquet")
    texts = tasks.column("task").to_pylist()
    old, texts[index] = texts[index], change(texts[index])
    pq.write_table(replace_columns(tasks, {"task": texts}), root / "meta/tasks.parquet")
    for path in sorted((root / "meta/episodes").rglob("*.parquet")):
        episodes = pq.read_table(path)
        column = [
            [texts[index] if t == old else t for t in ts] for ts in episodes.column("tasks").to_pylist()
        ]
        pq.write_table(replace_columns(episodes, {"tasks": column}), path)


# What a refusal of hostile metadata may cost beyond the same command on the healthy sample (DESIGN: at
# most 256 MiB over the process's baseline for metadata), and a bomb's row bytes in these cases.
OVER_BASELINE_MIB = 256
BOMB_ROW_BYTES = 16 << 20
HUGE_TASK_BYTES = 100_000_000


def _within(proc: Proc, baseline: Proc, what: str) -> Verdict:
    """`proc`'s peak memory at most `OVER_BASELINE_MIB` over `baseline`'s (both `Case.measured`)."""
    assert proc.usage is not None and baseline.usage is not None
    over = proc.usage.peak_rss_mib - baseline.usage.peak_rss_mib
    return Verdict(
        over <= OVER_BASELINE_MIB,
        f"{what}: peak {proc.usage.peak_rss_mib:.0f} MiB ({over:+.0f} over the healthy run), "
        f"{proc.usage.written_mib:.1f} MiB written, {proc.seconds:.1f} s",
        "" if over <= OVER_BASELINE_MIB else f"{what}: more than {OVER_BASELINE_MIB} MiB over its baseline",
        {f"{what}_peak_mib": round(proc.usage.peak_rss_mib), f"{what}_over_mib": round(over)},
    )


def _lrs_measured(case: Case, *args: str, timeout: float = 300) -> Proc:
    return case.measured([PYTHON, "-c", LRS, *args], timeout=timeout)


@register("hostile-endless-json", "hostile")
def endless_json(ctx: Ctx, case: Case) -> Verdict:
    """meta/info.json served as `{` and spaces without end, no Content-Length (was: 2 GB read in 9 s): the
    read stops one byte past 64 MiB, one line, exit 3, within 256 MiB of a healthy `lrs describe`."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    with RangeServer(src) as server:
        healthy = _lrs_measured(case, "describe", server.url, timeout=120)
    (src / "meta/info.json").write_bytes(b"{")
    with RangeServer(src, faults=Faults(endless={"meta/info.json": None})) as server:
        proc = _lrs_measured(case, "describe", server.url, timeout=120)
        sent = server.endless_bytes
    return both(
        error_verdict(proc, match=r"meta/info\.json: Invalid JSON file \(67108865 bytes or more\)"),
        _within(proc, healthy, "describe"),
        Verdict(True, f"server sent {sent / 2**20:.0f} MiB", figures={"sent_mib": round(sent / 2**20)}),
    )


@register("hostile-lying-length-video", "hostile")
def lying_length_video(ctx: Ctx, case: Case) -> Verdict:
    """A video the lrs/1 index lists at its size, served with `Content-Length: 10**11` and bytes without end
    (was: 15.7 GB of temp file in 60 s): each download is cut one byte past the listed size, retried as a
    bad download, then one line, exit 3; nothing is left in the cache."""
    import pyarrow.parquet as pq

    files = pq.read_table(ctx.resharded / "meta/lrs/files.parquet").to_pylist()
    video = next(f for f in sorted(files, key=lambda f: f["path"]) if f["path"].endswith(".mp4"))
    listed = sum(f["bytes"] for f in files)
    with RangeServer(ctx.resharded, faults=Faults(endless={video["path"]: 10**11})) as server:
        proc = _lrs_measured(case, "prewarm", server.url, "--cache-dir", "c", "-q", timeout=240)
        sent = server.endless_bytes
    assert proc.usage is not None
    written = proc.usage.written_mib * 2**20
    left = sorted(p.name for p in (case.dir / "c").rglob("*") if ".part" in p.name or "tmp" in p.name)
    case.allow(r"c(/.*)?")
    size = video["bytes"]
    return both(
        error_verdict(
            proc, match=rf"{re.escape(video['path'])}\): size {size + 1} or more after 3 downloads"
        ),
        Verdict(
            written <= 2 * listed + (16 << 20),
            f"{proc.usage.written_mib:.1f} MiB written (the dataset lists {listed / 2**20:.1f} MiB), peak "
            f"{proc.usage.peak_rss_mib:.0f} MiB, server sent {sent / 2**20:.1f} MiB, {proc.seconds:.1f} s",
            "" if written <= 2 * listed + (16 << 20) else "wrote more than twice the listed sizes",
            {"written_mib": round(proc.usage.written_mib, 1), "sent_mib": round(sent / 2**20, 1)},
        ),
        Verdict(not left, "no temp file left" if not left else f"left {left[:3]}"),
    )


@register("hostile-parquet-bomb", "hostile")
def parquet_bomb(ctx: Ctx, case: Case) -> Verdict:
    """Every data file with an undeclared zstd column of 16 MiB of zeros a row, a few KiB on disk (was:
    doctor "no defect found", reshard 2.5 GB, the v3 stream 1.97 GB and exit 0): a doctor defect, a
    reshard refusal and a stream error, before a row group is decompressed."""
    from tests.reshard.defects import add_bomb

    src = ctx.copy(ctx.sample, case.dir / "src")
    add_bomb(src, BOMB_ROW_BYTES)
    healthy = {cmd: _lrs_measured(case, *args) for cmd, args in _bomb_commands(ctx.sample, "healthy").items()}
    runs = {cmd: _lrs_measured(case, *args) for cmd, args in _bomb_commands(src, "out").items()}
    shutil.rmtree(case.dir / ".out.lrs-work", ignore_errors=True)
    shutil.rmtree(case.dir / ".healthy.lrs-work", ignore_errors=True)
    case.allow(r"healthy(/.*)?")
    stream = case.measured([PYTHON, PROBES, "epoch", json.dumps({"url": str(src), "options": {}})])
    healthy_stream = case.measured(
        [PYTHON, PROBES, "epoch", json.dumps({"url": str(ctx.sample), "options": {}})]
    )
    bomb = r"Invalid row group \d+ \(\d+ bytes uncompressed for \d+ rows\)"
    named = runs["doctor"].rc == 1 and re.search(bomb, runs["doctor"].stdout) is not None
    return both(
        Verdict(named, f"doctor exit {runs['doctor'].rc}" + (": names the row group" if named else "")),
        error_verdict(runs["reshard"], match=bomb),
        probe_error_verdict(stream, match=bomb),
        *(_within(runs[cmd], healthy[cmd], cmd) for cmd in runs),
        _within(stream, healthy_stream, "stream"),
    )


def _bomb_commands(src: Path, out: str) -> dict[str, tuple[str, ...]]:
    return {"doctor": ("doctor", str(src), "-q"), "reshard": ("reshard", str(src), "--out", out, "-q")}


@register("hostile-huge-task", "hostile")
def huge_task(ctx: Ctx, case: Case) -> Verdict:
    """A 100 MB task string (a few KiB of compressed meta/; was: reshard at 1.5 GB peak): describe and
    reshard refuse it in one line naming meta/tasks.parquet, before it is decompressed."""
    from tests.reshard.defects import set_task

    src = ctx.copy(ctx.sample, case.dir / "src")
    set_task(src, 0, "x" * HUGE_TASK_BYTES)
    healthy = _lrs_measured(case, "describe", str(ctx.sample))
    healthy_reshard = _lrs_measured(case, "reshard", str(ctx.sample), "--out", "healthy", "-q")
    case.allow(r"healthy(/.*)?")
    describe = _lrs_measured(case, "describe", "src")
    reshard = _lrs_measured(case, "reshard", "src", "--out", "out", "-q")
    shutil.rmtree(case.dir / ".out.lrs-work", ignore_errors=True)
    refused = r"meta/tasks\.parquet: Invalid row group 0 \(\d+ bytes uncompressed for \d+ rows\)"
    return both(
        error_verdict(describe, match=refused),
        error_verdict(reshard, match=refused),
        _within(describe, healthy, "describe"),
        _within(reshard, healthy_reshard, "reshard"),
    )
