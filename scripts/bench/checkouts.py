"""The reader of this checkout beside the reader of another (`--baseline DIR`, e.g. a worktree of the commit
before a refactor): the same lrs/1 sample read by `BatchLoader` (uint8) in a new process per run, the two
checkouts alternating within each round and their order swapped every round, so that a busy machine
slows both alike. Without `--baseline` both sides are this checkout: the spread of that A/A run is the
noise a difference must exceed.

    python scripts/bench/checkouts.py --baseline /work/old --out bench/checkouts.json [--rounds 4]
        [--lrs LRS1_DATASET] [--channels-last]

`--lrs` reads a reshard already made (e.g. `bench_reader.py --recorded`'s, of data lerobot recorded)
instead of the generated sample.

Prints one JSON object: per round, each side's samples/s, CPU seconds and first-batch latency, the
ratios this/baseline of samples/s and of CPU seconds (the steadier of the two on a busy machine); their
medians and ranges; the load average per round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(ROOT))  # this checkout's lrs builds the sample, after this folder (scripts/README.md)
CHILD = Path(__file__).with_name("_checkout_child.py")


def run(checkout: Path, given: dict[str, Any]) -> dict[str, Any]:
    """One timed read in a new process whose `reader` comes from `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(given)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"checkouts.py: the run in {checkout} failed:\n{done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(report["reader"]).resolve().is_relative_to(checkout.resolve()):
        raise SystemExit(f"checkouts.py: the run meant for {checkout} imported {report['reader']}")
    return report


def main() -> None:
    from bench_reader import add_sample_options, build_dataset

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="Also write the JSON here.")
    parser.add_argument("--baseline", type=Path, default=ROOT, help="The other checkout (default: this one).")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "lrs-bench-checkouts")
    add_sample_options(parser, episodes=24)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batches", type=int, default=60, help="Timed batches per run, after the first.")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2, help="BatchLoader's decode lanes.")
    parser.add_argument("--lrs", type=Path, help="An lrs/1 dataset to read instead of the generated sample.")
    parser.add_argument("--channels-last", action="store_true", help="BatchLoader(channels_last=True).")
    args = parser.parse_args()
    from _json_report import emit

    if args.lrs is not None:
        lrs = args.lrs
    else:
        _v3, lrs = build_dataset(args.workdir / f"{args.cameras}x{args.height}x{args.width}", args)
    given = {
        "lrs": str(lrs),
        "batches": args.batches,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "channels_last": args.channels_last,
    }
    sides = {"this": ROOT, "baseline": args.baseline}
    run(ROOT, given)  # warm the page cache
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        order = ["this", "baseline"] if number % 2 == 0 else ["baseline", "this"]
        load = os.getloadavg()[0]
        result = {side: run(sides[side], given) for side in order}
        rounds.append(
            {
                "order": order,
                "load_average_1m": load,
                **{side: {k: v for k, v in result[side].items() if k != "reader"} for side in sides},
                "ratio_this_over_baseline": result["this"]["samples_per_s"]
                / result["baseline"]["samples_per_s"],
                # CPU seconds of the same work: steadier than samples/s when other jobs share the machine
                "cpu_ratio_this_over_baseline": result["this"]["cpu_s"] / result["baseline"]["cpu_s"],
            }
        )
    ratios = [r["ratio_this_over_baseline"] for r in rounds]
    cpu_ratios = [r["cpu_ratio_this_over_baseline"] for r in rounds]
    emit(
        {
            "this": str(ROOT),
            "baseline": str(args.baseline),
            "dataset": (
                {"lrs": str(lrs)}
                if args.lrs is not None
                else {
                    "episodes": args.episodes,
                    "cameras": args.cameras,
                    "frame": f"{args.height}x{args.width}",
                }
            ),
            "batch_size": args.batch_size,
            "channels_last": args.channels_last,
            "rounds": rounds,
            "median_ratio_this_over_baseline": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
            "median_cpu_ratio_this_over_baseline": statistics.median(cpu_ratios),
            "cpu_ratio_range": [min(cpu_ratios), max(cpu_ratios)],
        },
        args.out,
    )


if __name__ == "__main__":
    main()
