"""How each command's cost grows with the episode count: sample, reshard, verify, and an
`EpisodeStream` read through a DataLoader, at several dataset sizes; prints JSON.

    python scripts/bench/scale.py --sizes 500,2000,8000 [--work DIR] [--batches 40] [--workers 2] [--out FILE]
        [--steps reshard,verify,stream] [--tool-workers 1]

Each size gets a synthetic dataset (`lrs sample`: 1 camera, 48x64 H.264, 4-8 frames per episode, 500
episodes per data and video file), resharded (`lrs reshard`) and verified (`lrs verify`). Every step
runs in its own process; wall and CPU seconds and peak RSS come from that process's `wait4` rusage.
`--steps` picks the steps measured: a dataset a step needs is made when missing (and measured only if
its step is picked), and a picked `reshard` runs again, into a new output. The load average is
recorded after each size. `--tool-workers` is
the `--workers` of reshard and verify.
The stream step (its own process too) reports: construction seconds, the pickled stream's bytes (what
a spawn/forkserver DataLoader worker receives), the first batch's seconds, samples/s after it, and
each DataLoader worker's peak RSS (`getrusage` in the worker, carried in the samples). Then, per
figure, the growth exponent between consecutive sizes (log ratio of values over log ratio of sizes: 1
is linear, 0 constant) and a linear extrapolation to 100,000 episodes from the two largest sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LRS = [sys.executable, "-c", "import sys; from reshard.cli import main; sys.argv[0] = 'lrs'; main()"]
SAMPLE_ARGS = [
    *("--min-length", "4", "--max-length", "8", "--cameras", "1", "--height", "48", "--width", "64"),
    *("--codec", "h264", "--episodes-per-data-file", "500", "--episodes-per-video-file", "500"),
]
TARGET_EPISODES = 100_000


def run_step(argv: list[str], *, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a command; its wall and CPU seconds and peak RSS (MB), from `wait4`."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {output.decode()[-2000:]}")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "stdout": output.decode()[-4000:],
    }


# --- the stream step, run in its own process (`--stream DIR`) ------------------------------------------


def stream_step(root: str, batches: int, workers: int) -> dict[str, Any]:
    import pickle
    import resource

    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    from reader import EpisodeStream

    class Tagged(IterableDataset):
        """The stream's samples, each tagged with its worker's id and peak RSS so far (KB)."""

        def __init__(self, stream: EpisodeStream) -> None:
            self.stream = stream

        def __iter__(self) -> Iterator[Any]:
            info = get_worker_info()
            worker = info.id if info is not None else -1
            for item in self.stream:
                yield {
                    "image": item[self.stream.meta.camera_keys[0]],
                    "episode_index": item["episode_index"],
                    "_worker": worker,
                    "_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                }

    with tempfile.TemporaryDirectory(prefix="lrs-scale-cache-") as cache:
        start = time.perf_counter()
        stream = EpisodeStream(root, batch_size=32, return_uint8=True, cache_dir=cache, seed=1)
        construct = time.perf_counter() - start
        pickled = len(pickle.dumps(stream))
        loader = DataLoader(Tagged(stream), batch_size=32, num_workers=workers)
        start = time.perf_counter()
        peaks: dict[int, int] = {}
        first = None
        counted, count_start = 0, None
        for number, batch in enumerate(loader):
            for worker, rss in zip(batch["_worker"].tolist(), batch["_rss_kb"].tolist(), strict=True):
                peaks[worker] = max(peaks.get(worker, 0), rss)
            if first is None:
                first = time.perf_counter() - start
                count_start = time.perf_counter()
            else:
                counted += len(batch["_worker"])
            if number + 1 >= batches:
                break
        assert count_start is not None
        rate = counted / (time.perf_counter() - count_start)
        del loader
        torch.set_num_threads(1)
    return {
        "construct_s": round(construct, 3),
        "pickle_bytes": pickled,
        "first_batch_s": round(first or 0.0, 3),
        "samples_per_s": round(rate, 1),
        "worker_peak_rss_mb": round(max(peaks.values()) / 1024, 1),
        "workers_peak_rss_mb": {str(k): round(v / 1024, 1) for k, v in sorted(peaks.items())},
    }


# --- the driver ---------------------------------------------------------------------------------------


STEPS = ("sample", "reshard", "verify", "stream")


def measure(size: int, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    src, out = work / f"v3-{size}", work / f"lrs-{size}"
    workers = (
        ["--workers", str(args.tool_workers)] if args.tool_workers > 1 else []
    )  # lrs before verify had it
    steps: dict[str, Any] = {}
    if not (src / "meta" / "info.json").exists():
        shutil.rmtree(src, ignore_errors=True)
        steps["sample"] = run_step(
            [*LRS, "sample", "--num-episodes", str(size), *SAMPLE_ARGS, str(src)], env=env
        )
    if "reshard" in args.steps or not (out / "meta" / "lrs" / "layout.json").exists():
        shutil.rmtree(out, ignore_errors=True)
        steps["reshard"] = run_step([*LRS, "reshard", str(src), "--out", str(out), "-q", *workers], env=env)
    if "verify" in args.steps:
        steps["verify"] = run_step([*LRS, "verify", str(out), *workers], env=env)
    steps = {name: step for name, step in steps.items() if name in args.steps}
    for step in steps.values():
        step.pop("stdout")
    if "stream" not in args.steps:
        return steps
    stream = run_step(
        [
            sys.executable,
            __file__,
            "--stream",
            str(out),
            "--batches",
            str(args.batches),
            "--workers",
            str(args.workers),
        ],
        env=env,
    )
    steps["stream"] = {**json.loads(stream.pop("stdout").strip().splitlines()[-1]), "process": stream}
    return steps


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, to judge the seconds by."""
    return [round(x, 2) for x in os.getloadavg()]


def flatten(result: dict[str, Any], prefix: str = "") -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in result.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[f"{prefix}{key}"] = float(value)
    return flat


def growth(sizes: list[int], results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the exponent between consecutive sizes, and the value extrapolated to 100,000 episodes."""
    flats = {n: flatten(results[n]) for n in sizes}
    common = sorted(set.intersection(*(set(f) for f in flats.values())))
    exponents: dict[str, list[float | None]] = {}
    extrapolated: dict[str, float] = {}
    for name in common:
        values = [flats[n][name] for n in sizes]
        exponents[name] = [
            round(math.log(values[k + 1] / values[k]) / math.log(sizes[k + 1] / sizes[k]), 3)
            if values[k] > 0 and values[k + 1] > 0
            else None
            for k in range(len(sizes) - 1)
        ]
        (n1, v1), (n2, v2) = (sizes[-2], values[-2]), (sizes[-1], values[-1])
        extrapolated[name] = round(v2 + (v2 - v1) / (n2 - n1) * (TARGET_EPISODES - n2), 3)
    return {"exponents": exponents, f"extrapolated_{TARGET_EPISODES}": extrapolated}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,8000", help="episode counts, comma-separated")
    parser.add_argument("--work", default=None, help="where datasets go (kept; reused when present)")
    parser.add_argument("--batches", type=int, default=40, help="batches of 32 the stream step reads")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument(
        "--steps", default="sample,reshard,verify,stream", help=f"steps measured, of {','.join(STEPS)}"
    )
    parser.add_argument("--tool-workers", type=int, default=1, help="--workers of lrs reshard and verify")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file")
    parser.add_argument("--stream", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stream is not None:
        print(json.dumps(stream_step(args.stream, args.batches, args.workers)))
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    args.steps = [s for s in args.steps.split(",") if s]
    if not set(args.steps) <= set(STEPS):
        parser.error(f"Invalid --steps ({','.join(args.steps)}). Expected some of {','.join(STEPS)}.")
    work = Path(args.work or tempfile.mkdtemp(prefix="lrs-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    for size in sizes:
        results[size] = {**measure(size, work, args), "load_average": load_average()}
        print(json.dumps({"episodes": size, **results[size]}), file=sys.stderr, flush=True)
    report = {"sizes": sizes, "work": str(work), "results": {str(n): results[n] for n in sizes}}
    if len(sizes) >= 2:
        report["growth"] = growth(sizes, results)
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
