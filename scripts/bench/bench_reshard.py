"""Benchmark the table step of `lrs reshard`: throughput against DuckDB, and peak memory against dataset size.

Two camera-less sample datasets (tables only), the second 10x the episodes of the first, with the
same data-file size, are generated once under --workdir. Then, in this one run:

- throughput: `reshard()` in-process on the large dataset (MB of source parquet per second, best of
  --repeat), against DuckDB rewriting the same files in one statement,
  `COPY (SELECT * FROM read_parquet([...]) ORDER BY index) TO ...`, also best of --repeat, the runs
  interleaved so that load from other processes hits both alike. The figure
  of merit is the ratio (target >= 0.5): DuckDB writes neither one row group per episode, nor page
  index, nor the metadata and index lrs does, and uses every core, so the ratio is conservative.
- memory: `reshard()` in a subprocess on each dataset. Importing lrs (torch, av) alone peaks higher
  than any reshard of these sizes, so the child resets its peak-RSS counter after its imports: the
  peak it then reports (VmHWM) is the reshard's own (target: large / small <= 1.2), also given net of
  the RSS after imports; the whole process's `ru_maxrss` (from `os.wait4`) is reported beside it.

Prints and writes a JSON report (--out). Takes about 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
from _json_report import emit  # this folder

from reshard.demo.sample import write_sample
from reshard.job.run import reshard


def dataset(workdir: Path, episodes: int) -> Path:
    """A camera-less sample of `episodes` episodes (reused when already generated)."""
    root = workdir / f"tables-{episodes}"
    if not (root / "meta/info.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        write_sample(
            root, cameras=0, episodes=episodes, min_length=1000, max_length=2000, episodes_per_data_file=40
        )
    return root


def parquet_files(root: Path) -> list[Path]:
    return sorted((root / "data").rglob("*.parquet"))


def megabytes(files: list[Path]) -> float:
    return sum(f.stat().st_size for f in files) / 1e6


def seconds(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def lrs_run(src: Path, scratch: Path, workers: int) -> Callable[[], None]:
    out = scratch / f"lrs-out-{workers}"

    def run() -> None:
        shutil.rmtree(out, ignore_errors=True)
        reshard(str(src), out, workers=workers, quiet=True)

    return run


def duckdb_run(src: Path, scratch: Path) -> Callable[[], None]:
    files = ", ".join(f"'{f}'" for f in parquet_files(src))
    target = scratch / "duckdb-out.parquet"

    def run() -> None:
        target.unlink(missing_ok=True)
        with duckdb.connect() as con:
            con.execute(
                f"COPY (SELECT * FROM read_parquet([{files}]) ORDER BY index) TO '{target}' (FORMAT parquet)"
            )

    return run


def best_interleaved(runs: dict[str, Callable[[], None]], repeat: int) -> dict[str, float]:
    """Best wall time of each run, the runs interleaved so that a load spike hits them alike."""
    best = {name: float("inf") for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            best[name] = min(best[name], seconds(run))
    return best


# The child imports lrs (torch, av, pyarrow: the import alone peaks far above what a reshard adds),
# then resets its peak-RSS counter (`clear_refs` 5) so that the peak it reports is the reshard's own.
CHILD = """
import sys
from pathlib import Path
from reshard.job.run import reshard
src, out = sys.argv[1:3]
Path(out + ".before").write_text(Path("/proc/self/status").read_text())
Path("/proc/self/clear_refs").write_text("5")
reshard(src, out, quiet=True)
Path(out + ".after").write_text(Path("/proc/self/status").read_text())
"""


def _status_mb(path: Path, field: str) -> float:
    fields = dict(line.split(":", 1) for line in path.read_text().splitlines() if ":" in line)
    return int(fields[field].split()[0]) / 1024


def peak_rss_mb(src: Path, out: Path) -> dict[str, float]:
    """Memory of one child resharding `src`, in MB.

    Returns:
        after_imports: RSS once lrs is imported; reshard_peak: peak RSS during the reshard;
        reshard_growth: the difference; process_peak: the child's own `ru_maxrss` (imports included).
    """
    shutil.rmtree(out, ignore_errors=True)
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(out)])
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"reshard of {src} failed with status {status}")
    before = _status_mb(Path(f"{out}.before"), "VmRSS")
    peak = _status_mb(Path(f"{out}.after"), "VmHWM")
    return {
        "after_imports": round(before, 1),
        "reshard_peak": round(peak, 1),
        "reshard_growth": round(peak - before, 1),
        "process_peak": round(usage.ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Write the JSON report here too.")
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/lrs-bench-reshard"), help="Datasets and outputs."
    )
    parser.add_argument(
        "--episodes", type=int, default=60, help="Episodes of the small dataset (large: 10x)."
    )
    parser.add_argument("--repeat", type=int, default=3, help="Timed runs per tool (best kept).")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    small, large = dataset(args.workdir, args.episodes), dataset(args.workdir, 10 * args.episodes)
    scratch = args.workdir / "scratch"
    scratch.mkdir(exist_ok=True)

    mb = megabytes(parquet_files(large))
    runs = {
        "lrs": lrs_run(large, scratch, 1),
        "duckdb": duckdb_run(large, scratch),
        "lrs2": lrs_run(large, scratch, 2),
    }
    best = best_interleaved(runs, args.repeat)
    lrs_s, duck_s, lrs2_s = best["lrs"], best["duckdb"], best["lrs2"]
    rss = {
        name: peak_rss_mb(src, scratch / f"rss-{name}") for name, src in (("small", small), ("large", large))
    }

    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "duckdb": duckdb.__version__,
        },
        "throughput": {
            "dataset": {
                "episodes": 10 * args.episodes,
                "parquet_mb": round(mb, 2),
                "files": len(parquet_files(large)),
            },
            "lrs_mb_s": round(mb / lrs_s, 1),
            "lrs_workers2_mb_s": round(mb / lrs2_s, 1),
            "duckdb_mb_s": round(mb / duck_s, 1),
            "ratio_vs_duckdb": round(duck_s / lrs_s, 2),
            "target_ratio": 0.5,
        },
        "peak_rss_mb": {
            "parquet_mb": {"small": round(megabytes(parquet_files(small)), 2), "large": round(mb, 2)},
            **rss,
            "ratio_large_small": round(rss["large"]["reshard_peak"] / rss["small"]["reshard_peak"], 3),
            "growth_ratio_large_small": round(
                rss["large"]["reshard_growth"] / rss["small"]["reshard_growth"], 3
            ),
            "target_ratio": 1.2,
        },
    }
    emit(report, args.out)


if __name__ == "__main__":
    main()
