"""End to end: the `lrs demo` flow on a small sample, through `reshard.demo.pipeline`'s functions and the CLI; its
checks fail when the pipeline misbehaves; the bench chart shows what `make bench` promises."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from reshard.cli import EXIT_CHECK_FAILED, cli
from reshard.demo import pipeline as demo_module
from reshard.demo.config import DemoCheckError, DemoConfig
from reshard.demo.invariants import check_exactly_once, check_frames_shown, check_prewarm_served, check_resume
from reshard.demo.pipeline import (
    MARKER,
    SUBDIRS,
    DemoResult,
    DemoWorkdirError,
    claim_workdir,
    cleanup_workdir,
    prepare_workdir,
    render_table,
    run_demo,
)
from reshard.demo.sample_spec import SampleSpec
from reshard.demo.training_loop import Sample, StreamRun, open_stream

ROOT = Path(__file__).resolve().parents[1]
SMALL = DemoConfig(
    SampleSpec(episodes=6, cameras=2, height=64, width=80, min_length=12, max_length=30), batch_size=4
)
STEPS = ("sample", "reshard", "verify", "push", "prewarm", "stream", "resume")
TABLE_ROWS = (
    "source (v3, AV1)",
    "lrs/1 (hevc)",
    "reshard time",
    "verify",
    "push",
    "prewarm",
    "samples/s",
    "first-batch latency",
    "cache",
    "exactly once",
    "resume",
)
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoResult, list[str], Path]:
    lines: list[str] = []
    workdir = tmp_path_factory.mktemp("e2e") / "demo"
    return run_demo(workdir, SMALL, echo=lines.append), lines, workdir


# --- the flow through the library ---------------------------------------------------------------------


@pytest.mark.integration
def test_every_step_runs_and_prints_one_line(flow: tuple[DemoResult, list[str], Path]) -> None:
    _, lines, workdir = flow
    assert [line.split()[0] for line in lines] == list(STEPS)
    assert sorted(p.name for p in workdir.iterdir()) == sorted([*SUBDIRS, MARKER])


def test_the_output_verifies_and_lands_in_the_bucket(flow: tuple[DemoResult, list[str], Path]) -> None:
    result, _, workdir = flow
    assert result.verified.checks == (
        "layout", "files", "tables", "pointers", "videos", "source-tables", "source-videos",
    )  # fmt: skip
    assert result.verified.videos_reencoded == SMALL.sample.episodes * SMALL.sample.cameras
    assert result.pushed.url == (workdir / "bucket").as_uri()
    bucket = sorted(
        str(p.relative_to(workdir / "bucket")) for p in (workdir / "bucket").rglob("*") if p.is_file()
    )
    output = sorted(
        str(p.relative_to(workdir / "lrs1")) for p in (workdir / "lrs1").rglob("*") if p.is_file()
    )
    assert bucket == output and len(bucket) == result.pushed.files == result.resharded.files


def test_one_epoch_yields_every_frame_once_with_its_own_pictures(
    flow: tuple[DemoResult, list[str], Path],
) -> None:
    result, _, _ = flow
    epoch = result.epoch
    pairs = [(s.episode, s.frame) for b in epoch.batches for s in b]
    assert len(pairs) == len(set(pairs)) == result.frames == epoch.stats.samples
    assert all(len(b) <= SMALL.batch_size for b in epoch.batches)
    for sample in (s for b in epoch.batches for s in b):
        assert sample.shown == tuple((sample.episode, sample.frame, c) for c in range(SMALL.sample.cameras))
    assert epoch.stats.cache.misses == 0 and epoch.stats.cache.bytes_fetched == 0
    assert epoch.stats.cache.hits > 0
    assert result.prewarmed.files > 0


def test_the_resumed_run_continues_the_uninterrupted_one(flow: tuple[DemoResult, list[str], Path]) -> None:
    result, _, _ = flow
    cut = len(result.epoch.batches) // 2
    assert result.resumed.start_batch == cut > 0
    assert result.resumed.batches == result.epoch.batches[cut:]
    consumed = sum(len(b) for b in result.epoch.batches[:cut])
    # Skipped by arithmetic, never decoded: only the continuation's frames were.
    assert result.resumed.stats.skipped == consumed
    assert result.resumed.stats.frames_decoded == result.resumed.samples * SMALL.sample.cameras


def test_the_table_names_every_measure(flow: tuple[DemoResult, list[str], Path]) -> None:
    result, _, _ = flow
    table = render_table(result)
    lines = table.splitlines()
    assert lines[0].startswith("lrs demo: 6 episodes x 2 cameras 64x80, batch 4, 2 workers")
    rows = [line for line in lines[2:-1] if line.strip()]
    assert [r[:20].strip() for r in rows] == [*TABLE_ROWS, "total time"]
    value_column = {line.index(line.split("  ")[-1].strip()) for line in rows}
    assert len(value_column) == 1, "values are aligned in one column"
    assert f"{result.frames} samples = {result.frames} frames, each once" in table
    assert (
        f"at batch {result.resumed.start_batch}/{len(result.epoch.batches)}: continuation identical" in table
    )


# --- the checks fail when they should ----------------------------------------------------------------


def _sample(episode: int, frame: int, cameras: int = 1, digest: str = "d") -> Sample:
    return Sample(episode, frame, digest, tuple((episode, frame, c) for c in range(cameras)))


def _run(batches: list[list[Sample]], start_batch: int = 0) -> StreamRun:
    from reader import ReaderStats

    return StreamRun(tuple(tuple(b) for b in batches), start_batch, 0.1, 1.0, 100.0, ReaderStats())


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([(0, 0), (0, 1)], r"\(2 samples: 1 missing, first episode 1 frame 0\)"),
        ([(0, 0), (0, 1), (1, 0), (0, 1)], r"1 repeated, first episode 0 frame 1\)"),
        ([(0, 0), (0, 1), (1, 0), (7, 3)], r"1 not in the dataset, first episode 7 frame 3\)"),
    ],
    ids=["missing", "repeated", "foreign"],
)
def test_exactly_once_names_what_is_wrong(pairs: list[tuple[int, int]], message: str) -> None:
    check_exactly_once([(0, 0), (0, 1), (1, 0)], {0: 2, 1: 1})  # the right multiset passes
    with pytest.raises(DemoCheckError, match=rf"^Invalid epoch coverage .*{message}"):
        check_exactly_once(pairs, {0: 2, 1: 1})


def test_a_frame_showing_another_frame_fails() -> None:
    good = _sample(2, 5, cameras=2)
    check_frames_shown(_run([[good]]))
    bad = dataclasses.replace(good, shown=((2, 5, 0), (2, 6, 1)))
    with pytest.raises(DemoCheckError, match=r"episode 2, frame 5, camera 1\): it shows episode 2 frame 6"):
        check_frames_shown(_run([[good, bad]]))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda b: [b[0], [b[1][1], b[1][0]], *b[2:]],
            r"\(batch 3 of the epoch, sample 0: Sample\(episode 3, frame 1",
        ),
        (
            lambda b: [b[0], [b[1][0], dataclasses.replace(b[1][1], digest="x")], *b[2:]],
            r"\(batch 3 .* sample 1: .*, x\)\)\. Expected .*, d\)",
        ),
        (lambda b: b[1:], r"\(batch 2 of the epoch, sample 0: Sample\(episode 3, frame 0"),
        (lambda b: b[:-1], r"\(2 batches after batch 2\)\. Expected 3"),
    ],
    ids=["order", "values", "off-by-one", "short"],
)
def test_a_continuation_that_differs_fails(mutate: Callable[[Any], Any], message: str) -> None:
    batches = [[_sample(e, f) for f in range(2)] for e in range(5)]
    whole = _run(batches)
    check_resume(whole, _run(batches[2:], start_batch=2))
    with pytest.raises(DemoCheckError, match=rf"^Invalid resumed stream {message}"):
        check_resume(whole, _run(mutate(batches[2:]), start_batch=2))


@pytest.mark.parametrize("limited_by", [None, "max_bytes"], ids=["complete", "limited"])
def test_a_stream_that_still_downloads_after_a_complete_prewarm_fails(limited_by: str | None) -> None:
    from cache import CacheStats
    from reader import ReaderStats
    from reshard.prewarm.fill import PrewarmSummary

    prewarmed = PrewarmSummary(
        files=3,
        bytes=30,
        files_fetched=3,
        bytes_fetched=30,
        files_cached=0,
        seconds=0.1,
        limited_by=limited_by,
    )
    quiet = _run([[_sample(0, 0)]])
    check_prewarm_served(prewarmed, quiet)
    leaky = dataclasses.replace(quiet, stats=ReaderStats(cache=CacheStats(misses=1, bytes_fetched=10)))
    if limited_by is not None:
        check_prewarm_served(prewarmed, leaky)  # a limited prewarm leaves the rest to the stream
        return
    with pytest.raises(
        DemoCheckError, match=r"^Invalid prewarm: the stream still fetched 1 files \(10 bytes\)"
    ):
        check_prewarm_served(prewarmed, leaky)


def test_the_demo_stream_is_one_process_whatever_the_environment_says(
    sample_resharded_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run under torchrun (RANK=1, WORLD_SIZE=2), the demo must still stream the whole epoch as prewarmed.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    stream = open_stream(str(sample_resharded_ds), tmp_path / "cache", SMALL, 0)
    assert (stream.rank, stream.world_size) == (0, 1)


# --- the command line ---------------------------------------------------------------------------------


@pytest.mark.integration
def test_lrs_demo_prints_the_table_and_cleans_up_only_its_own_files(tmp_path: Path) -> None:
    """A --workdir that holds the user's files (named as the demo's subdirectories): the demo works in a
    new folder of it and removes that alone."""
    mine = {"source/notes.txt": b"notes", "cache/model.bin": b"weights"}
    for rel, data in mine.items():
        (tmp_path / rel).parent.mkdir()
        (tmp_path / rel).write_bytes(data)
    result = CliRunner().invoke(cli, ["demo", "--workdir", str(tmp_path), "--num-episodes", "3"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"lrs demo in {tmp_path}/lrs-demo-")
    assert f"({tmp_path} holds files of yours: the demo uses a new folder)\n" in result.output
    for step in STEPS:
        assert f"\n{step} " in result.output
    for row in TABLE_ROWS:
        assert f"\n{row} " in result.output
    assert "lrs demo: 3 episodes x 2 cameras 96x128, batch 8, 2 workers" in result.output
    assert {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == mine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "source"]


def test_the_demo_claims_a_new_empty_or_its_own_directory_and_removes_only_what_it_made(
    tmp_path: Path,
) -> None:
    new = claim_workdir(tmp_path / "new")
    assert new == tmp_path / "new" and (new / MARKER).is_file()
    paths = prepare_workdir(new)
    for path in paths.values():
        path.mkdir()
    assert claim_workdir(new) == new  # a rerun finds its own directory
    cleanup_workdir(new)
    assert not new.exists()  # the demo made it
    empty = tmp_path / "empty"
    empty.mkdir()
    assert claim_workdir(empty) == empty
    cleanup_workdir(empty)
    assert empty.is_dir() and list(empty.iterdir()) == []  # the user made it: kept
    (empty / "source").mkdir()
    (empty / "source" / "notes.txt").write_text("mine")
    with pytest.raises(DemoWorkdirError, match=r"Invalid demo directory \(.*\): no \.lrs-demo file\."):
        prepare_workdir(empty)
    sub = claim_workdir(empty)
    assert sub.parent == empty and sub.name.startswith("lrs-demo-")
    prepare_workdir(sub)
    cleanup_workdir(sub)
    assert [str(p.relative_to(empty)) for p in empty.rglob("*")] == ["source", "source/notes.txt"]


@pytest.mark.integration
def test_lrs_demo_exits_1_when_the_resume_check_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = demo_module.stream_epoch

    def off_by_one(url: str, cache_dir: Path, config: DemoConfig, *, start_batch: int = 0) -> StreamRun:
        # A broken resume: told k batches were consumed, it continues after k + 1.
        if not start_batch:
            return real(url, cache_dir, config)
        return dataclasses.replace(
            real(url, cache_dir, config, start_batch=start_batch + 1), start_batch=start_batch
        )

    monkeypatch.setattr(demo_module, "stream_epoch", off_by_one)
    result = CliRunner().invoke(cli, ["demo", "--workdir", str(tmp_path), "--num-episodes", "3", "--keep"])
    assert result.exit_code == EXIT_CHECK_FAILED, result.output
    assert "check failed: Invalid resumed stream (batch " in result.output
    assert "lrs demo: " not in result.output  # no table after a failed check
    assert f"files kept in {tmp_path}" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*SUBDIRS, MARKER])


@pytest.mark.integration
def test_lrs_demo_exits_1_when_verify_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reshard.verify import VerifyReport, Violation

    def failing(url: str, *, against: str | None = None, **_: Any) -> VerifyReport:
        return VerifyReport(url, against, ("layout",), (Violation("files", "sha256 differs", "data/x"),))

    monkeypatch.setattr(demo_module, "verify", failing)
    result = CliRunner().invoke(cli, ["demo", "--workdir", str(tmp_path), "--num-episodes", "2"])
    assert result.exit_code == EXIT_CHECK_FAILED, result.output
    assert "check failed: Invalid resharded dataset" in result.output
    assert "FAIL  files: 1 violation(s)" in result.output


# --- make bench's chart -------------------------------------------------------------------------------


def _script(name: str) -> Any:
    """`scripts/bench/<name>.py` as a module (its folder on the path: it imports the files beside it)."""
    if str(ROOT / "scripts" / "bench") not in sys.path:
        sys.path.append(str(ROOT / "scripts" / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / f"scripts/bench/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _bench_reader() -> Any:
    return _script("bench_reader")


def _measured(kind: str, uint8: bool, per_round: list[float], mode: str = "single") -> dict[str, Any]:
    runs = [{"round": r, "samples_per_s": x} for r, x in enumerate(per_round, 1)]
    settings = {"kind": kind, "mode": mode, "transport": "uint8" if uint8 else "float32"}
    fastest = max(per_round)
    return {"samples_per_s": fastest, "cpu_ms_per_sample": 1000 / fastest, "peak_tree_pss_mb": 1000.0,
            "runs": runs, "settings": settings}  # fmt: skip


def test_the_bench_compares_cases_only_within_one_transport() -> None:
    bench = _bench_reader()
    cases = {
        "lerobot-single": _measured("lerobot", False, [100.0, 200.0]),
        "lancedb-single": _measured("lancedb", False, [150.0, 100.0]),
        "lrs1-single": _measured("reader", False, [300.0, 400.0]),
        "lerobot-single-uint8": _measured("lerobot", True, [200.0, 250.0]),
        "lancedb-single-uint8": _measured("lancedb", True, [400.0]),
        "lrs1-single-uint8-collate": _measured("reader", True, [600.0, 1000.0]),
        "lrs1-sarm-uint8-collate": _measured("reader", True, [500.0], mode="sarm"),
        "decode-only": _measured("decode-only", True, [2000.0]),
    }
    by_lerobot = bench.same_transport_ratios(cases, "lerobot")
    assert sorted(by_lerobot) == ["single_float32", "single_uint8"]
    uint8 = by_lerobot["single_uint8"]
    assert (uint8["baseline"], uint8["transport"]) == ("lerobot-single-uint8", "uint8")
    assert sorted(uint8["cases"]) == [
        "lancedb-single-uint8",
        "lerobot-single-uint8",
        "lrs1-single-uint8-collate",
    ]
    ours = uint8["cases"]["lrs1-single-uint8-collate"]
    assert ours["samples_per_s"] == 4.0  # fastest runs: 1000 / 250
    assert ours["samples_per_s_per_round"] == [3.0, 4.0]  # 600 / 200, 1000 / 250
    assert uint8["cases"]["lancedb-single-uint8"]["samples_per_s_per_round"] == [2.0]
    assert sorted(by_lerobot["single_float32"]["cases"]) == [
        "lancedb-single",
        "lerobot-single",
        "lrs1-single",
    ]
    by_lancedb = bench.same_transport_ratios(cases, "lancedb")
    assert by_lancedb["single_float32"]["cases"]["lrs1-single"]["samples_per_s_per_round"] == [2.0, 4.0]
    across = bench.float32_baseline_ratios(cases)
    assert sorted(across["single"]) == ["lrs1-single-uint8-collate"]
    assert across["single"]["lrs1-single-uint8-collate"]["samples_per_s"] == 5.0


def test_the_bench_refuses_a_case_whose_frames_are_not_its_transport() -> None:
    bench = _bench_reader()
    case = bench.Case(argv=["x"], settings={"transport": "uint8"})
    bench.check_transport("lerobot-single-uint8", case, {"frame_dtypes": ["uint8"]})
    with pytest.raises(SystemExit, match=r"Invalid frames of case lerobot-single-uint8 \(\['float32'\]\)"):
        bench.check_transport("lerobot-single-uint8", case, {"frame_dtypes": ["float32"]})


def test_the_bench_chart_compares_cases_in_two_labelled_panels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    bench = _bench_reader()
    figures: list[Figure] = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k)))
    settings = {"cameras": 2, "height": 96, "width": 128, "batch_size": 8, "workers": 2, "latency_ms": 30.0}
    cases = {
        "lrs1-local": {"samples_per_s": 400.0, "first_batch_s": 0.5},
        "v3-http": {"samples_per_s": 90.0, "first_batch_s": 3.25},
        "decode-only": {"samples_per_s": 600.0, "first_batch_s": None},
    }
    path = tmp_path / "bench" / "reader.png"
    bench.chart({"settings": {**settings, "cpus": 7}, "cases": cases}, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = figures
    speed, latency = fig.axes
    assert "samples/s" in speed.get_xlabel() and "first batch" in latency.get_xlabel()
    assert (speed.get_title(), latency.get_title()) == ("throughput", "first-batch latency")
    assert [t.get_text() for t in speed.get_yticklabels()] == list(cases)
    assert [t.get_text() for t in speed.texts] == ["400", "90", "600"]
    assert [t.get_text() for t in latency.texts] == ["0.50 s", "3.25 s", "n/a"]
    assert "7 CPUs" in fig.get_suptitle()
    assert os.path.getsize(path) > 10_000


# --- scripts/bench/decode_cost.py ---------------------------------------------------------------------


def _bench_decode_cost() -> Any:
    return _script("decode_cost")


def test_the_decode_cost_bench_counts_jumps_per_file_and_reads_each_file_in_order() -> None:
    bench = _bench_decode_cost()
    job = [("a", 0), ("b", 5), ("a", 1), ("a", 9), ("b", 6), ("a", 2), ("b", 0)]
    # a: 0 -> 1 (next), 1 -> 9 (forward jump), 9 -> 2 (backward); b: 5 -> 6 (next), 6 -> 0 (backward)
    assert bench.jumps(job) == {"frames_after_a_jump": round(3 / 7, 4), "backward_share_of_jumps": 0.6667}
    ordered = bench.file_order(job)
    assert ordered == [("a", 0), ("a", 1), ("a", 2), ("a", 9), ("b", 0), ("b", 5), ("b", 6)]
    assert bench.jumps(ordered)["backward_share_of_jumps"] == 0.0
