"""Bad input cases of the fault suite: malformed metadata, bad videos, corrupt lrs/1 indexes.

A source case mutates a copy of the sample, runs `lrs reshard` on it and expects exit 3 with one
`Error:` line, nothing under `--out` and no work directory. An index case mutates a copy of the
resharded sample and expects `lrs verify` and a reader epoch to fail clearly (exit 3, or 1 for a verify
check that fails), never a traceback or wrong samples.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from harness import (
    Case,
    Ctx,
    Verdict,
    both,
    epoch_options,
    error_verdict,
    probe_error_verdict,
    register_many,
)

INFO = "meta/info.json"
STATS = "meta/stats.json"
TASKS = "meta/tasks.parquet"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
DATA1 = "data/chunk-000/file-001.parquet"
CAM1_FILE1 = "videos/observation.images.cam1/chunk-000/file-001.mp4"
CAM0_FILE2 = "videos/observation.images.cam0/chunk-000/file-002.mp4"


def edit_json(rel: str, fn: Callable[[Any], Any]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / rel
        path.write_text(json.dumps(fn(json.loads(path.read_text()))))

    return mutate


def set_info(**changes: Any) -> Callable[[Path], None]:
    return edit_json(INFO, lambda doc: {**doc, **changes})


def drop_info(*keys: str) -> Callable[[Path], None]:
    return edit_json(INFO, lambda doc: {k: v for k, v in doc.items() if k not in keys})


def write_bytes(rel: str, data: bytes) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        (root / rel).write_bytes(data)

    return mutate


def truncate(rel: str, keep: float = 0.5) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        data = (root / rel).read_bytes()
        (root / rel).write_bytes(data[: int(len(data) * keep)])

    return mutate


def remove(*rels: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        for rel in rels:
            path = root / rel
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    return mutate


def edit_table(rel: str, fn: Callable[[pa.Table], pa.Table]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        table = pq.read_table(root / rel)
        pq.write_table(fn(table), root / rel)

    return mutate


def set_cell(column: str, row: int, fn: Callable[[Any], Any]) -> Callable[[pa.Table], pa.Table]:
    def edit(table: pa.Table) -> pa.Table:
        values = table.column(column).to_pylist()
        values[row] = fn(values[row])
        i = table.schema.get_field_index(column)
        return table.set_column(i, column, pa.array(values, table.schema.field(column).type))

    return edit


def flip_byte(rel: str, where: float = 0.5) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        data = bytearray((root / rel).read_bytes())
        data[int(len(data) * where)] ^= 0xFF
        (root / rel).write_bytes(bytes(data))

    return mutate


def shorten_video(rel: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        from tests.reshard.defects import shorten

        shorten(root / rel, drop=5)

    return mutate


# name -> (mutation of a v3 source, regex the one-line error must match)
# Path templates in meta/info.json that lead outside the dataset root: (kind, where, template).
_ESCAPING_TEMPLATES = (
    ("data", "parent", "../data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
    ("data", "absolute", "/etc/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
    ("video", "parent", "videos/../../{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"),
    ("video", "absolute", "/tmp/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"),
)

SOURCE_CASES: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "info-not-json": (write_bytes(INFO, b'{"codebase_version": "v3.0", '), r"meta/info\.json"),
    "info-not-an-object": (write_bytes(INFO, b"[1, 2, 3]"), r"meta/info\.json"),
    "info-missing-fps": (drop_info("fps"), r"meta/info\.json.*fps"),
    "info-missing-features": (drop_info("features"), r"meta/info\.json.*features"),
    "info-fps-string": (set_info(fps="30"), r"meta/info\.json.*fps"),
    "info-fps-zero": (set_info(fps=0), r"meta/info\.json.*fps"),
    "info-fps-negative": (set_info(fps=-30), r"meta/info\.json.*fps"),
    "info-total-frames-string": (set_info(total_frames="244"), r"meta/info\.json.*total_frames"),
    "info-features-a-list": (set_info(features=[]), r"meta/info\.json.*features"),
    "info-feature-no-dtype": (
        edit_json(INFO, lambda d: {**d, "features": {**d["features"], "action": {"shape": [6]}}}),
        r"meta/info\.json.*action",
    ),
    "info-chunks-size-zero": (set_info(chunks_size=0), r"meta/info\.json.*chunks_size"),
    **{
        f"template-{kind}-{where}": (
            set_info(**{f"{kind}_path": template}),
            rf"{kind}_path.*Expected a relative path inside the dataset root",
        )
        for kind, where, template in _ESCAPING_TEMPLATES
    },
    "episodes-missing-data-pointer": (
        edit_table(EPISODES, lambda t: t.drop(["data/file_index"])),
        r"meta/episodes.*data/file_index",
    ),
    "episodes-gap": (
        edit_table(EPISODES, set_cell("dataset_from_index", 4, lambda v: v + 1)),
        r"meta/episodes.*episode 4",
    ),
    "episodes-wrong-length": (
        edit_table(EPISODES, set_cell("length", 2, lambda v: v + 3)),
        r"meta/episodes.*episode 2",
    ),
    "episodes-negative-index": (
        edit_table(EPISODES, set_cell("episode_index", 0, lambda v: -1)),
        r"meta/episodes",
    ),
    "episodes-missing": (remove("meta/episodes"), r"meta/episodes"),
    "episodes-not-parquet": (write_bytes(EPISODES, b"PAR1 not really"), r"meta/episodes"),
    "tasks-missing": (remove(TASKS), r"meta/tasks\.parquet"),
    "tasks-not-parquet": (write_bytes(TASKS, b"garbage"), r"meta/tasks\.parquet"),
    "stats-not-json": (write_bytes(STATS, b"{nope"), r"meta/stats\.json"),
    "stats-not-an-object": (write_bytes(STATS, b"[]"), r"meta/stats\.json"),
    "stats-wrong-values": (
        edit_json(STATS, lambda d: {**d, "action": {"mean": "abc", "std": None}}),
        r"meta/stats\.json",
    ),
    "data-truncated": (truncate(DATA1), rf"{DATA1}.*not a readable parquet file"),
    "video-empty": (write_bytes(CAM1_FILE1, b""), rf"{CAM1_FILE1}"),
    "video-missing": (remove(CAM1_FILE1), rf"{CAM1_FILE1}.*missing file"),
    "video-garbage": (write_bytes(CAM1_FILE1, bytes(range(256)) * 64), rf"{CAM1_FILE1}"),
    "video-short": (shorten_video(CAM0_FILE2), rf"{CAM0_FILE2}"),
    "not-a-dataset": (remove("meta", "data", "videos"), r"meta/info\.json"),
}


def stale(root: Path) -> None:
    from tests.reshard.defects import make_stale

    make_stale(root)


# name -> mutation of a v3 source that lerobot reads, and lrs too: reshard and verify --against pass
READABLE_CASES: dict[str, Callable[[Path], None]] = {
    "info-missing-data-path": drop_info("data_path"),
    "episodes-missing-length": edit_table(EPISODES, lambda t: t.drop(["length"])),
    "episodes-missing-tasks": edit_table(EPISODES, lambda t: t.drop(["tasks"])),
    "episodes-stale-data-pointers": stale,
}


def readable_case(mutation: Callable[[Path], None]) -> Callable[[Ctx, Case], Verdict]:
    def run(ctx: Ctx, case: Case) -> Verdict:
        src = ctx.copy(ctx.sample, case.dir / "src")
        mutation(src)
        case.watch(case.dir)
        out = str(case.dir / "out")
        done = case.lrs("reshard", str(src), "--out", out, "-q")
        checked = case.lrs("verify", out, "--against", str(src), "-q") if done.rc == 0 else done
        shutil.rmtree(out, ignore_errors=True)  # the output is the result, not a leftover
        return Verdict(
            done.rc == checked.rc == 0,
            f"reshard exit {done.rc}, verify --against exit {checked.rc}: {checked.first_line or 'ok'}",
        )

    return run


def source_case(mutation: Callable[[Path], None], match: str | None) -> Callable[[Ctx, Case], Verdict]:
    def run(ctx: Ctx, case: Case) -> Verdict:
        src = ctx.copy(ctx.sample, case.dir / "src")
        mutation(src)
        case.watch(case.dir)
        return error_verdict(case.lrs("reshard", str(src), "--out", str(case.dir / "out"), "-q"), match=match)

    return run


def truncated_video_loop(ctx: Ctx, case: Case) -> Verdict:
    """The truncated source MP4 (once a SIGABRT at exit in 1 run of 27): N runs, copy and hevc, 2 workers."""
    src = ctx.copy(ctx.sample, case.dir / "src")
    truncate(CAM1_FILE1)(src)
    case.watch(case.dir)
    runs = 4 if ctx.quick else 30
    codes: dict[int, int] = {}
    first = None
    for i in range(runs):
        video = "hevc" if i % 2 else "copy"
        proc = case.lrs(
            "reshard", str(src), "--out", str(case.dir / "out"), "-q", "--workers", "2", "--video", video
        )
        codes[proc.rc] = codes.get(proc.rc, 0) + 1
        aborted = "terminate called" in proc.stderr
        if proc.rc != 3 or aborted:
            first = first or error_verdict(proc, match=r"not a readable video")
        first = first or (None if error_verdict(proc).ok else error_verdict(proc))
    bad = runs - codes.get(3, 0)
    outcome = f"exit 3 in {codes.get(3, 0)} of {runs} runs; exit codes {dict(sorted(codes.items()))}"
    verdict = error_verdict(case.procs[-1], match=r"not a readable video")
    return Verdict(
        bad == 0 and verdict.ok,
        f"{outcome}; {verdict.outcome}",
        verdict.note if bad == 0 else f"{bad} runs did not exit 3",
        {"truncated_mp4_runs": runs, "truncated_mp4_non_3_exits": bad},
    )


# -- datasets written the way third-party writers do (reshard.demo.sample.THIRD_PARTY) -----------------

# name -> (THIRD_PARTY kind, --video, regex of the one-line refusal or None where it must reshard and verify)
THIRD_PARTY_CASES: dict[str, tuple[str, str, str | None]] = {
    "full-range-h264-to-hevc": ("full-range-h264", "hevc", None),
    "full-range-h264-to-h264": ("full-range-h264", "h264", None),
    "odd-size-yuv444p-to-hevc": ("odd-size-yuv444p", "hevc", None),
    "odd-size-yuv444p-to-h264": (
        "odd-size-yuv444p",
        "h264",
        r"camera 'observation\.images\.cam0': Invalid frame size \(101x75\) for --video h264",
    ),
    "audio-track-copy": ("audio-track", "copy", None),
}


def third_party_case(kind: str, video: str, refusal: str | None) -> Callable[[Ctx, Case], Verdict]:
    def run(ctx: Ctx, case: Case) -> Verdict:
        from reshard.demo.sample import THIRD_PARTY, write_sample

        shared = ctx.once(kind, lambda: write_sample(ctx.base / "shared" / kind, **THIRD_PARTY[kind]))
        src, out = ctx.copy(shared, case.dir / "src"), case.dir / "out"
        case.watch(case.dir)
        proc = case.lrs("reshard", str(src), "--out", str(out), "-q", "--video", video)
        if refusal is not None:
            return error_verdict(proc, match=refusal)
        case.allow(r"out(/.*)?")
        if proc.rc != 0:
            return Verdict(False, f"reshard exit {proc.rc}: {proc.first_line}", "expected exit 0")
        return _verified(case.lrs("verify", str(out), "--against", str(src), "--json"))

    return run


def _verified(proc: Any) -> Verdict:
    """`verify --against` passed; the outcome gives the re-encodes' worst PSNR and colour fit."""
    if proc.rc != 0:
        return Verdict(False, f"verify exit {proc.rc}", "expected verify --against to pass")
    videos = json.loads(proc.stdout)["videos"]
    reencoded = [v for v in videos if v["reencoded"]]
    if not reencoded:
        return Verdict(True, f"reshard exit 0, verify exit 0: {len(videos)} episode videos identical")
    gains, offsets = [v["gain"] for v in reencoded], [v["offset"] for v in reencoded]
    worst = min(v["psnr_min_db"] for v in reencoded)
    return Verdict(
        True,
        f"reshard exit 0, verify exit 0: {len(reencoded)} re-encoded, worst frame {worst:.1f} dB, colour "
        f"gain {min(gains):.3f} to {max(gains):.3f}, offset {min(offsets):+.4f} to {max(offsets):+.4f}",
        figures={"gain_min": min(gains), "gain_max": max(gains), "psnr_min_db": worst},
    )


def video_cut_short(ctx: Ctx, case: Case) -> Verdict:
    """A source MP4 cut inside episode 1, its index first (it opens, and its header promises every frame):
    doctor names exactly the episodes that lost frames (1, 2; not 0, which is whole), with and without
    --decode; reshard refuses naming them; --skip-defective leaves out exactly those; the output verifies."""
    from tests.reshard.defects import cut_inside_episode

    src = ctx.copy(ctx.sample, case.dir / "src")
    cut_inside_episode(src, 1)
    case.watch(case.dir)
    case.allow(r"out(/.*)?")  # the --skip-defective output
    doctors = [case.lrs("doctor", str(src), "--json", "-q", *flags) for flags in ((), ("--decode",))]
    named = [json.loads(proc.stdout).get("defective_episodes") if proc.stdout else None for proc in doctors]
    refused = error_verdict(
        case.lrs("reshard", str(src), "--out", str(case.dir / "refused"), "-q"), match=r"in episodes 1-2\b"
    )
    out = case.dir / "out"
    skip = case.lrs("reshard", str(src), "--out", str(out), "--skip-defective", "-q")
    dropped = json.loads((out / "meta/lrs/dropped.json").read_text()) if skip.rc == 0 else {}
    left_out = [d["episode"] for d in dropped.get("dropped", [])]
    verify = case.lrs("verify", str(out), "--against", str(src), "-q") if skip.rc == 0 else skip
    ok = named == [[1, 2], [1, 2]] and refused.ok and left_out == [1, 2] and verify.rc == 0
    return Verdict(
        ok,
        f"doctor names episodes {named[0]} (decoded: {named[1]}); reshard refused them: {refused.ok}; "
        f"--skip-defective exit {skip.rc}, left out {left_out}; verify --against exit {verify.rc}",
        "" if ok else "expected episodes [1, 2] defective, left out, and the rest verified",
    )


def exit_134_loop(ctx: Ctx, case: Case) -> Verdict:
    """The abort at exit (`terminate called without an active exception`, exit 134): doctor, reshard and
    verify, N runs each, over a source whose video is cut to 3,000 bytes and one cut inside an episode."""
    from tests.reshard.defects import cut_inside_episode

    src = ctx.copy(ctx.sample, case.dir / "src")
    cut_inside_episode(src, 1)
    (src / CAM1_FILE1).write_bytes((src / CAM1_FILE1).read_bytes()[:3000])
    case.watch(case.dir)
    runs = 2 if ctx.quick else 20
    commands = {
        "doctor": (("doctor", str(src), "-q"), 1),
        "reshard": (("reshard", str(src), "--out", str(case.dir / "out"), "-q"), 3),
        "verify": (("verify", str(ctx.resharded), "--against", str(src), "-q"), 3),
    }
    codes: dict[str, dict[int, int]] = {name: {} for name in commands}
    for _ in range(runs):
        for name, (args, _) in commands.items():
            rc = case.lrs(*args).rc
            codes[name][rc] = codes[name].get(rc, 0) + 1
    aborted = sum(proc.rc == 134 or "terminate called" in proc.stderr for proc in case.procs)
    bad = sum(n for name, (_, rc) in commands.items() for code, n in codes[name].items() if code != rc)
    return Verdict(
        bad == 0 and aborted == 0,
        f"{runs} runs each; exit codes {codes}; {aborted} aborts",
        "" if bad == 0 else f"{bad} runs ended with another exit code",
        {"exit_134_runs": runs * len(commands), "exit_134_aborts": aborted},
    )


# -- corrupt lrs/1 indexes and outputs: verify and the reader ------------------------------------------

LAYOUT = "meta/lrs/layout.json"
INDEX = "meta/lrs/episodes.parquet"
FILES = "meta/lrs/files.parquet"
OUT_DATA = "data/chunk-000/file-000.parquet"
OUT_VIDEO = "videos/observation.images.cam0/chunk-000/file-003.mp4"

# name -> (mutation of a resharded copy, whether the reader must refuse it); verify must report it (exit 1)
INDEX_CASES: dict[str, tuple[Callable[[Path], None], bool]] = {
    "index-layout-not-json": (write_bytes(LAYOUT, b'{"layout": "lrs/1",'), True),
    "index-layout-missing-source": (
        edit_json(LAYOUT, lambda d: {k: v for k, v in d.items() if k != "source"}),
        False,
    ),
    "index-layout-wrong-version": (edit_json(LAYOUT, lambda d: {**d, "layout": "lrs/9"}), True),
    "index-episodes-truncated": (truncate(INDEX), True),
    "index-files-garbage": (write_bytes(FILES, b"garbage"), False),
    "index-byte-range-shifted": (edit_table(INDEX, set_cell("row_group_offset", 1, lambda v: v + 7)), True),
    "index-row-count-wrong": (edit_table(INDEX, set_cell("length", 3, lambda v: v + 1)), True),
    "output-data-flipped-byte": (flip_byte(OUT_DATA, 0.3), True),
    "output-video-flipped-byte": (flip_byte(OUT_VIDEO, 0.6), False),
}


def index_case(mutation: Callable[[Path], None], reader_refuses: bool) -> Callable[[Ctx, Case], Verdict]:
    def run(ctx: Ctx, case: Case) -> Verdict:
        root = ctx.copy(ctx.resharded, case.dir / "ds")
        mutation(root)
        case.watch(case.dir)
        verify = case.lrs("verify", str(root), "-q")
        checks = [_check_failed(verify)]
        epoch = case.probe("epoch", {"url": str(root), "options": epoch_options(0)})
        if reader_refuses:
            checks.append(probe_error_verdict(epoch))
        else:  # the reader cannot tell (a local file read in place): it must not crash, or fail clearly
            checks.append(_reader_clear(ctx, epoch))
        return both(*checks)

    return run


def _check_failed(proc: Any) -> Verdict:
    ok = proc.rc == 1 and proc.tracebacks == 0
    lines = (proc.stdout + proc.stderr).splitlines()
    at = next((i for i, line in enumerate(lines) if "FAIL" in line), 0)
    line = " ".join(part.strip() for part in lines[at : at + 2])
    return Verdict(ok, f"verify exit {proc.rc}: {line[:160]}", "" if ok else "expected verify exit 1")


def _reader_clear(ctx: Ctx, proc: Any) -> Verdict:
    if proc.rc == 3:
        return probe_error_verdict(proc)
    same = proc.rc == 0 and proc.json().get("digest") == ctx.reference_epoch()["digest"]
    return Verdict(same, f"reader exit {proc.rc}: {'same samples' if same else 'other samples'}")


register_many(
    [
        (
            name,
            "metadata" if not name.startswith(("video", "data")) else "input",
            source_case(*spec),
            name in QUICK,
        )
        for name, spec in SOURCE_CASES.items()
        for QUICK in [("info-fps-zero", "template-data-parent", "video-empty")]
    ]
)
register_many([(name, "metadata", readable_case(fn), False) for name, fn in READABLE_CASES.items()])
register_many(
    [
        ("video-truncated-x30", "input", truncated_video_loop, True),
        ("video-cut-short-index-first", "input", video_cut_short, False),
        ("exit-134-doctor-reshard-verify-x20", "input", exit_134_loop, False),
    ]
)
register_many(
    [(name, "third-party", third_party_case(*spec), False) for name, spec in THIRD_PARTY_CASES.items()]
)
register_many(
    [
        (name, "index", index_case(*spec), name == "index-byte-range-shifted")
        for name, spec in INDEX_CASES.items()
    ]
)
