"""What copying a frame into its batch row costs a lane thread of `BatchLoader`: prints JSON.

A lane (`reader.batch.fill`) is a thread of its own. torch runs a CPU copy or division of more than
32,768 elements as an OpenMP parallel region, and libgomp gives each thread that starts one a team of its
own, whose threads keep spinning for a while after every region. Between two copies a lane decodes, so
those threads burn a core for nothing. This script measures it, one thread started like a lane, cases
alternating over `--rounds`:

- `torch`: `row.copy_(frame)` (uint8) and `torch.div(frame, 255.0, out=row)` (float32), as the fill did;
- `lane`: `reader.batch.fill.copy_row` and `unit_float_row`, what it does now (NumPy, on the calling
  thread).

Each copies a channels-last 3x480x640 frame into a row of a batch `--copies` times, sleeping `--gap-ms`
between copies (a decode's place), in a fresh process (spawned): how long libgomp spins depends on the
threads the process already has (with more OpenMP threads than cores it spins less), so a process that
measured a case before would measure the next one differently. Reported per copy: the copying thread's
CPU and the whole process's CPU (the thread's, the OpenMP team's and the rest), in ms, with torch's
intra-op threads at the machine's default (`torch.get_num_threads()`, also reported).

    python scripts/bench/lane_copy.py [--rounds 3] [--copies 200] [--gap-ms 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any

import torch
from _json_report import emit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(ROOT))  # this checkout's lrs, after this folder (see scripts/README.md)
from reader.batch.fill import copy_row, unit_float_row  # noqa: E402
from reader.decode.video import to_unit_float  # noqa: E402

CASES = ("torch", "lane")
HEIGHT, WIDTH = 480, 640


def measure(case: str, dtype: torch.dtype, copies: int, gap_s: float) -> dict[str, float]:
    """Copy a frame into a batch row `copies` times from a new thread; CPU per copy, in ms."""
    frame = torch.randint(0, 256, (HEIGHT, WIDTH, 3), dtype=torch.uint8).permute(2, 0, 1)  # as decoded
    batch = torch.empty((2, HEIGHT, WIDTH, 3), dtype=dtype).movedim(-1, -3)  # channels-last rows
    result: dict[str, float] = {}

    def lane() -> None:
        thread, process = time.thread_time(), time.process_time()
        for _ in range(copies):
            if dtype == torch.uint8 and case == "torch":
                batch[1].copy_(frame)
            elif dtype == torch.uint8:
                copy_row(batch[1], frame)
            elif case == "torch":
                to_unit_float(frame, out=batch[1])
            else:
                unit_float_row(batch[1], frame)
            time.sleep(gap_s)
        result["thread_cpu_ms_per_copy"] = 1000 * (time.thread_time() - thread) / copies
        result["process_cpu_ms_per_copy"] = 1000 * (time.process_time() - process) / copies

    worker = threading.Thread(target=lane)
    worker.start()
    worker.join()
    expected = frame if dtype == torch.uint8 else frame / 255.0
    if not torch.equal(batch[1], expected):
        raise AssertionError(f"{case} {dtype}: the row differs from the frame")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {}
    spawn = multiprocessing.get_context("spawn")
    for _ in range(args.rounds):
        for dtype in (torch.uint8, torch.float32):
            for case in CASES:  # interleaved: the machine's noise falls on both
                with spawn.Pool(1) as fresh:
                    found = fresh.apply(measure, (case, dtype, args.copies, args.gap_ms / 1000))
                runs.setdefault(f"{case}-{str(dtype).removeprefix('torch.')}", []).append(found)
    cases: dict[str, Any] = {
        name: {key: median(r[key] for r in found) for key in found[0]} | {"runs": found}
        for name, found in runs.items()
    }
    ratios = {
        kind: cases[f"torch-{kind}"]["process_cpu_ms_per_copy"]
        / cases[f"lane-{kind}"]["process_cpu_ms_per_copy"]
        for kind in ("uint8", "float32")
    }
    report = {
        "frame": [3, HEIGHT, WIDTH],
        "torch_threads": torch.get_num_threads(),
        "copies": args.copies,
        "gap_ms": args.gap_ms,
        "cases": cases,
        "process_cpu_torch_over_lane": ratios,
    }
    emit(report, args.out)


if __name__ == "__main__":
    main()
