"""`lrs prewarm`: a prewarmed node cache serves the training run without a download; limits, resume,
dry run, the topology options and the errors of the command line."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from torch.utils.data import DataLoader

import reshard.cli.prewarm_command  # noqa: F401 - registers `lrs prewarm`
from cache import CacheStats, sum_cache_stats
from cache.progress import human_bytes
from reader.plan.fetch import piece_files
from reader.plan.spec import ReadSpec
from reader.stream import EpisodeStream
from reshard.cli import cli
from reshard.cli.types import ByteSize
from reshard.prewarm.fill import PrewarmSummary, prewarm
from tests.servers import RangeServer, Request

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

# The training run every test prewarms for: one rank, two DataLoader workers.
RUN = {"episode_pool_size": 3, "seed": 5}


def spec(url: object, cache_dir: Path | None = None, **options: object) -> ReadSpec:
    """The read spec of the training run (`RUN`, and `options`), prewarmed into `cache_dir`."""
    return ReadSpec.of(url, cache_dir=cache_dir, **{**RUN, **options})  # type: ignore[arg-type]


def delta(after: CacheStats, before: CacheStats) -> CacheStats:
    return CacheStats(**{k: v - getattr(before, k) for k, v in after.to_dict().items()})  # type: ignore[arg-type]


def downloads(server: RangeServer) -> list[str]:
    """Data and video files the server sent (whole or ranged), in order."""
    return [
        r.path
        for r in server.requests
        if r.method == "GET" and r.path.startswith(("data/", "videos/")) and not _locating(server, r)
    ]


def _locating(server: RangeServer, request: Request) -> bool:
    """Whether `request` is what opening a plain v3 source asks to locate each episode's rows
    (`reader.format.locate`): a data file's footer (a ranged read of its tail), or, over HTTP, which cannot
    list, the file after the last one named (absent: 404). Neither moves an episode's rows."""
    if (Path(server.root) / "meta" / "lrs").exists():
        return False  # an lrs/1 index says where the rows are
    if request.status == 404:
        return True
    if not (request.byte_range and request.path.endswith(".parquet")):
        return False
    size = (Path(server.root) / request.path).stat().st_size
    return request.byte_range.endswith(f"-{size - 1}")


def train(url: str, cache_dir: Path, **options: object) -> int:
    """One epoch of the training run through a DataLoader with 2 workers; the samples it yielded."""
    stream = EpisodeStream(url, cache_dir=cache_dir, **{**RUN, **options})
    return sum(len(b["index"]) for b in DataLoader(stream, batch_size=8, num_workers=2))


@pytest.fixture(params=["lrs", "v3"])
def root(request: pytest.FixtureRequest, sample_ds: Path, sample_resharded_ds: Path) -> Path:
    return sample_resharded_ds if request.param == "lrs" else sample_ds


def test_training_after_prewarm_downloads_nothing(root: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with RangeServer(root) as server:
        summary = prewarm(spec(server.url, cache_dir, num_workers=2), progress=False)
        prewarmed = downloads(server)
        before = sum_cache_stats(cache_dir)
        assert train(server.url, cache_dir) == 244
        reader = delta(sum_cache_stats(cache_dir), before)
        assert downloads(server) == prewarmed  # the training run sent no data or video request
    assert summary.files == summary.files_fetched == len(prewarmed) > 0
    assert summary.bytes == summary.bytes_fetched > 0 and summary.files_cached == 0
    assert summary.needed_files == summary.files and summary.limited_by is None
    assert (reader.misses, reader.bytes_fetched, reader.range_reads) == (0, 0, 0)
    assert reader.hits > 0


@pytest.mark.integration
def test_training_downloads_only_what_a_limited_prewarm_left(
    sample_resharded_ds: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    with RangeServer(sample_resharded_ds) as server:
        summary = prewarm(spec(server.url, cache_dir, num_workers=2), episodes_per_consumer=1, progress=False)
        prewarmed = set(downloads(server))
        train(server.url, cache_dir)
        trained = downloads(server)[len(prewarmed) :]
    stream = EpisodeStream(sample_resharded_ds, **RUN)
    firsts = [stream.schedule(2).emission(0, 0, w).pieces[0] for w in range(2)]
    expected = {p for piece in firsts for _, p in piece_files(stream.catalog.episodes[piece.episode])}
    assert prewarmed == {f.request.path for f in summary.plan.files} == expected
    assert (summary.pieces, summary.consumers) == (2, 2)
    videos = [p for p in trained if p.startswith("videos/")]
    # The workers share their rank's pieces, so both start with the same episode: 2 of the 16 videos.
    assert len({p.episode for p in firsts}) == 1
    assert not prewarmed.intersection(videos) and len(videos) == len(set(videos)) == 16 - 2


def full_plan(url: str) -> list[str]:
    summary = prewarm(spec(url, num_workers=2), dry_run=True, progress=False)
    return [f.request.path for f in summary.plan.files]


@pytest.mark.parametrize("limit", ["max_bytes", "cache_max_bytes"])
def test_byte_limits_fetch_a_prefix_of_the_plan(
    sample_resharded_ds: Path, tmp_path: Path, limit: str
) -> None:
    cache_dir = tmp_path / "cache"
    with RangeServer(sample_resharded_ds) as server:
        everything = full_plan(server.url)
        limits = {"max_bytes": 100_000} if limit == "max_bytes" else {}
        options = {"cache_max_bytes": 100_000} if limit == "cache_max_bytes" else {}
        summary = prewarm(spec(server.url, cache_dir, num_workers=2, **options), progress=False, **limits)
    fetched = [f.request.path for f in summary.plan.files]
    sizes = EpisodeStream(sample_resharded_ds).catalog.file_sizes
    assert fetched == everything[: len(fetched)] and 0 < len(fetched) < len(everything)
    assert summary.bytes <= 100_000 < summary.bytes + sizes[everything[len(fetched)]]
    assert summary.limited_by == limit and summary.files_fetched == len(fetched)
    assert sum_cache_stats(cache_dir).evictions == 0


def test_rerun_resumes_and_then_fetches_nothing(sample_resharded_ds: Path, tmp_path: Path) -> None:
    cache_dir = str(tmp_path / "cache")
    with RangeServer(sample_resharded_ds) as server:
        run = spec(server.url, cache_dir, num_workers=2)
        part = prewarm(run, max_bytes=60_000, progress=False)
        rest = prewarm(run, progress=False)
        again = prewarm(run, progress=False)
        assert sorted(downloads(server)) == sorted(set(downloads(server)))  # each file sent once
    assert part.files_fetched == part.files > 0
    assert (rest.files_cached, rest.files_fetched) == (part.files, rest.files - part.files)
    assert rest.bytes_fetched == rest.bytes - part.bytes
    assert (again.files_fetched, again.bytes_fetched, again.files_cached) == (0, 0, again.files)


@pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
def test_a_local_path_is_read_in_place_a_file_url_is_copied(
    sample_resharded_ds: Path, tmp_path: Path, as_url: bool
) -> None:
    source = f"file://{sample_resharded_ds}" if as_url else str(sample_resharded_ds)
    summary = prewarm(ReadSpec.of(source, cache_dir=tmp_path / "cache"), progress=False)
    assert summary.files > 0 and summary.in_place is not as_url
    assert summary.files_fetched == (summary.files if as_url else 0)
    assert ("local source: the reader reads it in place" in summary.describe()) is not as_url


def test_a_source_read_in_place_is_not_cut_by_the_cache_budget(
    sample_resharded_ds: Path, tmp_path: Path
) -> None:
    # Nothing of a local path lands in the cache, so its budget cannot be what limits the plan.
    summary = prewarm(
        ReadSpec.of(sample_resharded_ds, cache_dir=tmp_path / "cache", cache_max_bytes=1), progress=False
    )
    assert summary.in_place and summary.limited_by is None
    assert summary.files == summary.needed_files > 0 and summary.files_fetched == 0
    assert "already cached" not in summary.describe() and "cut by" not in summary.describe()


def test_dry_run_fetches_nothing_and_leaves_the_cache_alone(
    sample_resharded_ds: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    with RangeServer(sample_resharded_ds) as server:
        summary = prewarm(spec(server.url, cache_dir), dry_run=True, progress=False)
        assert downloads(server) == []
    assert not cache_dir.exists()
    assert summary.dry_run and summary.files == len(summary.plan.files) > 0 and summary.files_fetched == 0
    assert summary.describe().startswith("prewarm dry run: ") and summary.files_cached == 0
    assert f": would fetch {summary.files} files (" in summary.describe()


def test_dry_run_counts_what_the_cache_holds_already(sample_resharded_ds: Path, tmp_path: Path) -> None:
    """After a prewarm of the first admissions, a dry run of the epoch would fetch only the rest: what
    the real run then fetches (it said "would fetch" every planned file before)."""
    cache_dir = tmp_path / "cache"
    with RangeServer(sample_resharded_ds) as server:
        first = prewarm(spec(server.url, cache_dir), episodes_per_consumer=1, progress=False)
        dry = prewarm(spec(server.url, cache_dir), dry_run=True, progress=False)
        real = prewarm(spec(server.url, cache_dir), progress=False)
    assert first.files_fetched > 0 and dry.files_cached == first.files_fetched
    assert (dry.files - dry.files_cached, dry.files_cached) == (real.files_fetched, real.files_cached)
    assert f"would fetch {real.files_fetched} files" in dry.describe(), dry.describe()
    assert f"{first.files_fetched} already cached; nothing fetched" in dry.describe()


def test_summary_describes_the_run() -> None:
    summary = PrewarmSummary(
        files=3, bytes=3072, files_fetched=2, bytes_fetched=2048, files_cached=1, seconds=2.0,
        consumers=2, pieces=2, episodes=2, needed_files=9, needed_bytes=9 * 1024**2, limited_by="max_bytes",
    )  # fmt: skip
    assert summary.describe() == (
        "prewarm: 3 files, 3.0 KiB for 2 consumers (2 admissions, 2 episodes): 2 fetched (2.0 KiB), "
        "1 already cached, in 2.0 s (1.0 KiB/s); cut by --max-bytes at 3 of 9 needed files (9.0 MiB)."
    )
    assert dataclasses.replace(summary, limited_by=None, files_fetched=0).describe().endswith("in 2.0 s.")
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 TiB",
    ]


# (the spec's arguments, prewarm's own), the error.
@pytest.mark.parametrize(
    ("kwargs", "options", "message"),
    [
        ({"world_size": 0}, {}, r"Invalid world_size \(0\)\. Expected an integer >= 1\."),
        ({"num_workers": -1}, {}, r"Invalid num_workers \(-1\)"),
        ({"world_size": 2}, {"ranks": [2]}, r"Invalid ranks \(\[2\]\)\. Expected distinct ranks in \[0, 2\)"),
        ({}, {"max_bytes": 0}, r"Invalid max_bytes \(0\)"),
        ({}, {"episodes_per_consumer": 0}, r"Invalid episodes_per_consumer \(0\)"),
        ({"episode_pool_size": 0}, {}, r"Invalid episode_pool_size \(0\)"),
        ({"episodes": [99]}, {}, r"Invalid episode index \(99\)"),
        ({}, {"epoch": -1}, r"Invalid epoch \(-1\)"),
    ],
    ids=["world", "workers", "ranks", "max-bytes", "episodes", "pool", "selection", "epoch"],
)
def test_invalid_arguments_raise(
    sample_resharded_ds: Path, tmp_path: Path, kwargs: dict, options: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        prewarm(
            ReadSpec.of(sample_resharded_ds, cache_dir=tmp_path / "cache", **kwargs),
            progress=False,
            **options,
        )


def test_a_spec_without_a_cache_dir_is_refused(sample_resharded_ds: Path) -> None:
    with pytest.raises(ValueError, match=r"Invalid cache_dir \(None\)\. Expected the node cache directory"):
        prewarm(ReadSpec.of(sample_resharded_ds), progress=False)


# --- command line ---------------------------------------------------------------------------------------


def lrs(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(autouse=True)
def no_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def test_cli_prewarms_and_prints_a_summary(sample_resharded_ds: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with RangeServer(sample_resharded_ds) as server:
        result = lrs("prewarm", server.url, "--cache-dir", str(cache_dir), "--num-workers", "2",
                     "--episode-pool-size", "3", "--seed", "5", "--num-episodes", "1", "--quiet")  # fmt: skip
        assert result.exit_code == 0, result.output
        assert len(downloads(server)) == 3  # a data file and one episode of two cameras, both workers' first
    assert (
        result.output.startswith("prewarm: 3 files, ")
        and "for 2 consumers (2 admissions, 1 episode)" in result.output
    )


def test_cli_dry_run_prints_the_plan(sample_resharded_ds: Path, tmp_path: Path) -> None:
    with RangeServer(sample_resharded_ds) as server:
        result = lrs("prewarm", server.url, "--cache-dir", str(tmp_path / "cache"), "--dry-run",
                     "--num-workers", "2", "--episode-pool-size", "3", "--seed", "5", "--max-bytes", "60K")  # fmt: skip
        assert downloads(server) == []
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    plan = prewarm(spec(sample_resharded_ds, num_workers=2), max_bytes=60 * 1024, dry_run=True).plan
    assert lines[0] == "consumers: 2 = ranks 0 (world size 1) x 2 worker(s) each; episode pool 3"
    assert lines[2].startswith(f"files: {len(plan.files)} (") and f"of {plan.needed_files} needed" in lines[2]
    assert [line.split()[1] for line in lines[3 : 3 + len(plan.files)]] == [
        f.request.path for f in plan.files
    ]
    assert "cut by --max-bytes" in lines[-1] and "nothing fetched" in lines[-1]
    assert not (tmp_path / "cache").exists()


def test_cli_batch_size_plans_the_pool_training_gets(sample_resharded_ds: Path, tmp_path: Path) -> None:
    result = lrs("prewarm", str(sample_resharded_ds), "--cache-dir", str(tmp_path / "cache"), "--dry-run",
                 "--batch-size", "40")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("episode pool 50")


@pytest.mark.parametrize(
    ("args", "env", "consumers"),
    [
        ([], None, "consumers: 1 = ranks 0 (world size 1)"),
        ([], "3", "consumers: 3 = ranks 0-2 (world size 3)"),
        (["--world-size", "4", "--ranks", "1,3"], None, "consumers: 2 = ranks 1,3 (world size 4)"),
        (
            ["--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "1"],
            None,
            "consumers: 2 = ranks 2-3 (world size 4)",
        ),
        (
            ["--world-size", "6", "--nnodes", "3", "--node-rank", "2"],
            None,
            "consumers: 2 = ranks 4-5 (world size 6)",
        ),
        (["--world-size", "4", "--nproc-per-node", "4"], None, "consumers: 4 = ranks 0-3 (world size 4)"),
    ],
    ids=["default", "env", "ranks", "torchrun", "nnodes", "one-node"],
)
def test_cli_topology_options(
    sample_resharded_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], env: str | None,
    consumers: str,
) -> None:  # fmt: skip
    if env is not None:
        monkeypatch.setenv("WORLD_SIZE", env)
    result = lrs("prewarm", str(sample_resharded_ds), "--cache-dir", str(tmp_path / "c"), "--dry-run", *args)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith(consumers + " x 1 worker(s)")


@pytest.mark.parametrize(
    ("text", "count"),
    [("1048576", 1048576), ("500M", 500 * 1024**2), ("50G", 50 * 1024**3), ("1.5K", 1536), ("2GiB", 2 * 1024**3),
     ("10gb", 10 * 1000**3), ("50GB", 50 * 1000**3), ("500MB", 500 * 1000**2), ("50GiB", 50 * 1024**3),
     (" 3 t ", 3 * 1024**4), ("100B", 100)],
    ids=["bytes", "mega", "giga", "fraction", "gib", "lower-gb", "gb", "mb", "50gib", "spaces", "b"],
)  # fmt: skip
def test_byte_sizes(text: str, count: int) -> None:
    assert ByteSize().convert(text, None, None) == count


@pytest.mark.parametrize(
    "text",
    ["0", "-1", "12X", "", "G", "0.1"],
    ids=["zero", "negative", "unit", "empty", "no-number", "sub-byte"],
)
def test_bad_byte_sizes(text: str) -> None:
    with pytest.raises(
        click.BadParameter, match=rf"Invalid size \({text}\)\. Expected a positive byte count"
    ):
        ByteSize().convert(text, None, None)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--world-size", "2", "--ranks", "0,2"],
            2,
            r"Invalid ranks \(\[0, 2\]\)\. Expected distinct ranks in \[0, 2\)",
        ),
        (["--max-bytes", "12X"], 2, r"Invalid size \(12X\)"),
        (["--ranks", "1-"], 2, r"Invalid list \(1-\)"),
        (["--node-rank", "1"], 2, r"Invalid --node-rank without --nproc-per-node"),
        (["--num-episodes", "0"], 2, r"Invalid value for '--num-episodes'"),
        (["--episodes", "0,99"], 2, r"Invalid episode index \(99\)\. Expected < 8"),
    ],
    ids=["ranks", "size", "list", "node-rank", "episodes", "selection"],
)
def test_cli_bad_options(
    sample_resharded_ds: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    result = lrs("prewarm", str(sample_resharded_ds), "--cache-dir", str(tmp_path / "c"), "--dry-run", *args)
    assert result.exit_code == code
    assert re.search(message, result.output), result.output


def test_cli_missing_dataset_is_a_one_line_error(tmp_path: Path) -> None:
    result = lrs("prewarm", str(tmp_path / "nope"), "--cache-dir", str(tmp_path / "c"))
    assert result.exit_code == 3
    assert result.output.strip().endswith("meta/info.json: missing: not a LeRobot v3 dataset root")


def test_a_prewarmed_mixture_trains_without_a_download(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    mixture = {"weights": [2, 1], "samples_per_epoch": 300}
    with RangeServer(sample_resharded_ds) as one, RangeServer(sample_ds) as two:
        urls = [one.url, two.url]
        summary = prewarm(spec(urls, cache_dir, num_workers=2, **mixture), progress=False)
        prewarmed = (downloads(one), downloads(two))
        assert all(prewarmed) and summary.plan is not None and summary.plan.sources == 2
        assert summary.files == summary.files_fetched == len(prewarmed[0]) + len(prewarmed[1])
        stream = EpisodeStream(urls, cache_dir=cache_dir, **RUN, **mixture)
        batches = list(DataLoader(stream, batch_size=8, num_workers=2))
        assert sum(len(b["index"]) for b in batches) == 300
        assert (downloads(one), downloads(two)) == prewarmed  # training sent no data or video request
        for source in stream.sources:
            source.cache.close()


def test_cli_prewarms_a_mixture(sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    with RangeServer(sample_resharded_ds) as one, RangeServer(sample_ds) as two:
        result = lrs("prewarm", one.url, two.url, "--weights", "1,3", "--cache-dir", cache, "--dry-run",
                     "--num-workers", "2", "--episode-pool-size", "3", "--seed", "5")  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "(dataset 0, rank 0" in result.output and "(dataset 1, rank 0" in result.output
        for args, message in [
            ((one.url, "--weights", "1,3"), "for one URL"),
            ((one.url, two.url, "--episodes", "0-2"), "several URLs"),
            ((one.url, two.url, "--weights", "1,x"), "Expected numbers separated by commas"),
            ((one.url, two.url, "--weights", "1,-1"), "Invalid weight of source 1"),
            ((one.url, two.url, "--weights", "1,2,3"), "Expected one per source"),
        ]:
            result = lrs("prewarm", *args, "--cache-dir", cache, "--dry-run")
            assert result.exit_code == 2 and message in result.output, result.output


def test_a_dry_run_plans_without_torch(sample_resharded_ds: Path, tmp_path: Path) -> None:
    """The plan is the reader's own (`reader.plan.read_plan.ReadPlan`), built without importing torch."""
    code = (
        "import sys\n"
        "from reshard.cli import main\n"
        f"sys.argv = ['lrs', 'prewarm', {str(sample_resharded_ds)!r}, '--cache-dir', {str(tmp_path / 'c')!r}, "
        "'--dry-run', '--num-workers', '2']\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert exit.code in (0, None), exit.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "prewarm dry run: " in done.stdout and "would fetch" not in done.stdout  # local: read in place
    assert not (tmp_path / "c").exists()


def test_a_run_resumed_on_a_new_topology_after_prewarm_downloads_nothing(
    sample_resharded_ds: Path, tmp_path: Path
) -> None:
    cache_dir, state_file = tmp_path / "cache", tmp_path / "state.json"
    with RangeServer(sample_resharded_ds) as server:
        # Saved by a one-rank job with 2 workers, after 20 batches of 4; resumed by 2 ranks of 1 worker.
        saved = EpisodeStream(server.url, cache_dir=tmp_path / "old", **RUN).state_dict(
            batches_consumed=20, batch_size=4, num_workers=2
        )
        state_file.write_text(json.dumps({"data": saved, "model": "..."}))
        result = lrs("prewarm", server.url, "--cache-dir", str(cache_dir), "--world-size", "2",
                     "--num-workers", "1", "--episode-pool-size", "3", "--resume-state", str(state_file), "-q")  # fmt: skip
        assert result.exit_code == 0, result.output
        prewarmed = downloads(server)
        samples = 0
        for rank in range(2):
            stream = EpisodeStream(server.url, cache_dir=cache_dir, rank=rank, world_size=2, **RUN)
            stream.load_state_dict(saved)
            samples += sum(len(b["index"]) for b in DataLoader(stream, batch_size=4, num_workers=1))
        assert downloads(server) == prewarmed
    assert samples == 244 - 80 - (244 - 80) % 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**saved, "shuffle": False}))
    result = lrs(
        "prewarm",
        str(sample_resharded_ds),
        "--cache-dir",
        str(cache_dir),
        "--resume-state",
        str(bad),
        "--dry-run",
    )
    assert result.exit_code == 3 and "Invalid state shuffle (False)" in result.output, result.output


def test_a_torch_checkpoint_is_a_resume_state_and_its_pool_is_planned(
    sample_resharded_ds: Path, tmp_path: Path
) -> None:
    import torch

    # The training loop of docs/training-loop.md: torch.save({"model": ..., "data": loader.state_dict()}); pool 5 (not
    # the default 16) is what the state records, and what training loads it into.
    stream = EpisodeStream(sample_resharded_ds, cache_dir=tmp_path / "c", episode_pool_size=5)
    saved = stream.state_dict(batches_consumed=2, batch_size=4, num_workers=0)
    torch.save({"model": {"w": torch.zeros(2)}, "data": saved}, tmp_path / "ckpt.pt")
    result = lrs("prewarm", str(sample_resharded_ds), "--cache-dir", str(tmp_path / "c"), "--dry-run",
                 "--resume-state", str(tmp_path / "ckpt.pt"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("episode pool 5"), result.output
    (tmp_path / "junk.pt").write_bytes(b"\x00garbage")
    result = lrs("prewarm", str(sample_resharded_ds), "--cache-dir", str(tmp_path / "c"), "--dry-run",
                 "--resume-state", str(tmp_path / "junk.pt"))  # fmt: skip
    assert result.exit_code == 2 and "Expected JSON or a torch.save checkpoint" in result.output, (
        result.output
    )


@pytest.mark.integration
def test_a_training_spec_file_prewarm_and_the_stream_agree(sample_resharded_ds: Path, tmp_path: Path) -> None:
    """The spec a training job writes, `lrs prewarm --spec` and `EpisodeStream(spec)` fetch the same files:
    prewarm fetches what a cold run of the spec downloads, and a run after it downloads nothing."""
    spec_file, cache_dir = tmp_path / "spec.json", tmp_path / "cache"
    with RangeServer(sample_resharded_ds) as server:
        training = EpisodeStream(server.url, cache_dir=cache_dir, num_workers=2, **RUN)
        spec_file.write_text(training.spec.to_json())  # what that training loop writes
        result = lrs("prewarm", "--spec", str(spec_file), "--quiet")
        assert result.exit_code == 0, result.output
        prewarmed = downloads(server)
        spec = ReadSpec.from_json(spec_file.read_text())
        warm = sum(len(b["index"]) for b in DataLoader(EpisodeStream(spec), batch_size=8, num_workers=2))
        assert downloads(server) == prewarmed  # the run after prewarm sent no data or video request
        cold = EpisodeStream(dataclasses.replace(spec, cache_dir=str(tmp_path / "cold")))
        assert sum(len(b["index"]) for b in DataLoader(cold, batch_size=8, num_workers=2)) == warm == 244
        read = downloads(server)[len(prewarmed) :]
        # A cold run reads each episode's rows by ranged reads of its data file, prewarm fetches the file whole.
        assert set(read) == set(prewarmed) and len(set(prewarmed)) == len(prewarmed) > 0
        # The plan, in its order (the fetch runs it on several threads): the command's and the library's agree.
        planned = [f.request.path for f in prewarm(spec, dry_run=True, progress=False).plan.files]
        shown = lrs("prewarm", "--spec", str(spec_file), "--dry-run").output.splitlines()[3:13]
        assert set(planned) == set(prewarmed) and [line.split()[1] for line in shown] == planned[:10]


def test_cli_spec_options_must_agree_with_the_file(sample_resharded_ds: Path, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec(sample_resharded_ds, tmp_path / "c", world_size=2).to_json())
    agreeing = ["--seed", "5", "--episode-pool-size", "3", "--cache-dir", str(tmp_path / "c"), "--ranks", "1"]
    result = lrs("prewarm", "--spec", str(spec_file), "--dry-run", *agreeing)
    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[0]
        == "consumers: 1 = ranks 1 (world size 2) x 1 worker(s) each; episode pool 3"
    )
    for args, message in [
        (
            ["--seed", "6"],
            rf"Invalid --seed \(6\) with --spec {spec_file} \(5 there\)\. Expected the spec's value",
        ),
        (["--no-shuffle"], r"Invalid --shuffle/--no-shuffle \(False\) with --spec"),
        (["--batch-size", "64"], r"Invalid --batch-size \(80\) with --spec"),
        (["--world-size", "4"], r"Invalid --world-size \(4\) with --spec"),
        ([str(tmp_path)], r"Invalid URL \(.*\) with --spec"),
        (["--cache-dir", str(tmp_path / "other")], r"Invalid --cache-dir \(.*other\) with --spec"),
    ]:
        result = lrs("prewarm", "--spec", str(spec_file), "--dry-run", *args)
        assert result.exit_code == 2 and re.search(message, result.output), (args, result.output)
    (tmp_path / "bad.json").write_text("{}")
    result = lrs("prewarm", "--spec", str(tmp_path / "bad.json"), "--dry-run")
    assert result.exit_code == 2 and "Invalid read spec version (None). Expected 1." in result.output
    result = lrs("prewarm", "--cache-dir", str(tmp_path / "c"), "--dry-run")
    assert (
        result.exit_code == 2
        and "Missing argument 'DATASET...'. Expected the dataset(s), or --spec FILE." in result.output
    )
