"""What a pipeline framework costs per sample, beside `BatchLoader`'s lanes: prints JSON.

We were asked to use SPDL's pipeline (spdl-core, Meta's "Scalable and Performant Data Loading") for the
thread pipeline if it fits. `BatchLoader` spends about 0.3 ms of CPU per sample above torchcodec's decode
(docs/benchmarks.md), so what matters is what a framework adds per sample. Cases, each over N items,
alternated over `--rounds`:

- `spdl`: spdl-core's `PipelineBuilder().add_source(range(N)).pipe(stage, concurrency=2).add_sink(64)`,
  `build(num_threads=2)`: one item per sample, as a per-sample decode stage would run;
- `spdl-batched`: the same with `.aggregate(32)` before the stage, which then handles a batch's samples;
- `spdl-batch-source`: a source of batches (lists of 32 samples), so that the framework sees one item per
  batch (two batches in flight on two threads: a piece's frames in consecutive batches would then be
  decoded by two threads at once, which a piece's decoder reading forward cannot allow);
- `lanes`: `BatchLoader`'s scheme: 2 single-thread executors, one job per lane per batch of 32.

The stage does nothing (`none`: the framework alone) or sleeps 200 µs per sample (`sleep`: work that
releases the GIL, as a decode does). Reported: wall and CPU µs per sample.

    python scripts/bench/bench_spdl.py [--items 20000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _json_report import emit  # this folder
from spdl.pipeline import PipelineBuilder

BATCH = 32
LANES = 2


def nothing(item: int) -> int:
    return item


def sleep(item: int) -> int:
    time.sleep(0.0002)
    return item


def spdl_samples(stage: Callable[[int], int], items: int) -> Iterator[int]:
    pipeline = (
        PipelineBuilder[int, int]()
        .add_source(range(items))
        .pipe(stage, concurrency=LANES)
        .add_sink(64)
        .build(num_threads=LANES)
    )
    with pipeline.auto_stop():
        yield from pipeline.get_iterator()


def per_batch(stage: Callable[[int], int]) -> Callable[[list[int]], list[int]]:
    return lambda samples: [stage(s) for s in samples]


def spdl_batched(stage: Callable[[int], int], items: int) -> Iterator[int]:
    builder = PipelineBuilder[int, list[int]]().add_source(range(items)).aggregate(BATCH)
    yield from _spdl_batches(builder, stage)


def spdl_batch_source(stage: Callable[[int], int], items: int) -> Iterator[int]:
    batches = [list(range(start, min(items, start + BATCH))) for start in range(0, items, BATCH)]
    yield from _spdl_batches(PipelineBuilder[list[int], list[int]]().add_source(batches), stage)


def _spdl_batches(builder: Any, stage: Callable[[int], int]) -> Iterator[int]:
    pipeline = builder.pipe(per_batch(stage), concurrency=LANES).add_sink(4).build(num_threads=LANES)
    with pipeline.auto_stop():
        for done in pipeline.get_iterator():
            yield from done


def lanes(stage: Callable[[int], int], items: int) -> Iterator[int]:
    executors = [ThreadPoolExecutor(max_workers=1) for _ in range(LANES)]
    batch = per_batch(stage)
    pending: list[list[Future[list[int]]]] = []
    try:
        for start in range(0, items, BATCH):
            samples = list(range(start, min(items, start + BATCH)))
            pending.append([ex.submit(batch, samples[k::LANES]) for k, ex in enumerate(executors)])
            if len(pending) > 2:
                for future in pending.pop(0):
                    yield from future.result()
        for futures in pending:
            for future in futures:
                yield from future.result()
    finally:
        for ex in executors:
            ex.shutdown()


CASES = {
    "spdl": spdl_samples,
    "spdl-batched": spdl_batched,
    "spdl-batch-source": spdl_batch_source,
    "lanes": lanes,
}
STAGES = {"none": nothing, "sleep": sleep}


def measure(case: str, stage: str, items: int) -> dict[str, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    count = sum(1 for _ in CASES[case](STAGES[stage], items))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if count != items:
        raise RuntimeError(f"Invalid count for {case}/{stage} ({count}). Expected {items}.")
    return {
        "wall_us_per_sample": round(wall / items * 1e6, 1),
        "cpu_us_per_sample": round(cpu / items * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=20000, help="samples per case")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over all cases, alternated")
    parser.add_argument("--out", type=Path, help="Also write the JSON report here.")
    args = parser.parse_args()
    report: dict[str, Any] = {"spdl_core": version("spdl-core"), "load_average_start": os.getloadavg()}
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for stage in STAGES:
            for case in CASES:
                runs.setdefault(f"{case}-{stage}", []).append(measure(case, stage, args.items))
    report["cases"] = runs
    report["load_average_end"] = os.getloadavg()
    emit(report, args.out, indent=1)


if __name__ == "__main__":
    main()
