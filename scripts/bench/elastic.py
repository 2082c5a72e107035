"""What an elastic resume costs and how its rest of the epoch mixes, from the schedule alone (no I/O).

    python scripts/bench/elastic.py --out bench/elastic.json

A job of 8 ranks x 8 workers (batch 32) is stopped halfway through an epoch and resumed as 16 ranks x
4 workers (batch 32). Reported, at several dataset sizes:

- `rest_seconds`, `rest_peak_mib`: computing the rest of the epoch (`reader.schedule.rest.rest_after`),
  which every worker of the resumed job does once when it starts (the fastest of `--repeat` rounds);
- `exactly_once`: the frames consumed before plus the rest's are every frame once, less `dropped`;
- `equal_ranks`: every new rank yields the same number of samples;
- mixing, over every batch of one new rank's first worker, against the same worker's batches in a
  normal epoch on the new topology: distinct episodes per batch / batch size.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(ROOT))  # this checkout's lrs, after this folder (see scripts/README.md)

from reader.plan.resume.loader_math import batches_per_epoch, loader_resume  # noqa: E402
from reader.schedule import Schedule  # noqa: E402
from reader.schedule.rest import RestSchedule, RunSegment, rest_after  # noqa: E402

OLD = (8, 8, 32)  # world_size, num_workers, batch_size
NEW = (16, 4, 32)
POOL = 40  # default_pool_size(32)


def distinct_per_batch(schedule: Any, batch: int) -> float:
    emission = schedule.emission(0, 0, 0)
    piece, _ = emission.arrays()
    entry = emission.entry_of(piece)
    groups = [entry[i : i + batch] for i in range(0, entry.size - batch + 1, batch)]
    return float(np.mean([len(set(g.tolist())) / batch for g in groups]))


def samples(schedule: Any, ranks: int, counts: tuple[int, ...]) -> Counter:
    """(entry, frame) of the first `counts[w]` samples of every worker of every rank."""
    seen: Counter = Counter()
    for rank in range(ranks):
        for worker, count in enumerate(counts):
            emission = schedule.emission(0, rank, worker)
            piece, frame = emission.arrays(0, count)
            seen.update(zip(emission.entry_of(piece).tolist(), frame.tolist(), strict=True))
    return seen


def measure(episodes: int, repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(episodes)
    lengths = tuple(int(n) for n in rng.integers(200, 800, size=episodes))
    base = Schedule(lengths, seed=1, world_size=OLD[0], num_workers=OLD[1], pool_size=POOL)
    stop = RunSegment(OLD[0], OLD[1], OLD[2], batches_per_epoch(base.worker_samples(), OLD[2]) // 2, POOL)
    seconds = []
    for _ in range(repeat):
        tracemalloc.start()
        started = time.perf_counter()
        rest = rest_after(base, 0, [stop])
        seconds.append(time.perf_counter() - started)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    resumed = RestSchedule(base.with_topology(NEW[0], NEW[1], POOL), 0, rest)
    normal = base.with_topology(NEW[0], NEW[1], POOL)
    per_rank = {sum(len(resumed.emission(0, r, w)) for w in range(NEW[1])) for r in range(NEW[0])}
    consumed = sum(lengths) - rest.total
    result = {
        "episodes": episodes,
        "frames": sum(lengths),
        "consumed": consumed,
        "rest_seconds": round(min(seconds), 3),
        "rest_peak_mib": round(peak / 2**20, 1),
        "equal_ranks": len(per_rank) == 1,
        "dropped": rest.total - resumed.samples_per_rank * NEW[0],
        "distinct_per_batch_rest": round(distinct_per_batch(resumed, NEW[2]), 3),
        "distinct_per_batch_normal": round(distinct_per_batch(normal, NEW[2]), 3),
    }
    if episodes <= 2000:  # the exactly-once check enumerates every sample
        before = loader_resume(base.worker_samples(), OLD[2], stop.batches_consumed).samples_consumed
        seen = samples(base, OLD[0], before) + samples(resumed, NEW[0], resumed.worker_samples())
        result["exactly_once"] = max(seen.values()) == 1 and sum(lengths) - len(seen) == result["dropped"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="Write the JSON report here.")
    parser.add_argument(
        "--episodes", default="1000,10000", help="Dataset sizes, in episodes of 200-800 frames."
    )
    parser.add_argument("--repeat", type=int, default=3, help="Rounds per size (the fastest is reported).")
    args = parser.parse_args()
    report = {
        "old": dict(zip(("world_size", "num_workers", "batch_size"), OLD, strict=True)),
        "new": dict(zip(("world_size", "num_workers", "batch_size"), NEW, strict=True)),
        "pool_size": POOL,
        "cases": [measure(int(n), args.repeat) for n in args.episodes.split(",")],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
