"""Benchmark `EpisodeStream`: lrs/1 vs plain v3, local disk vs a loopback HTTP source with latency, against
a decode-only limit (the same frames decoded in a tight torchcodec loop) and, when the reference venv
exists, lerobot 0.6.1's shuffled `LeRobotDataset` through the same DataLoader settings.

    python scripts/bench_reader.py --out bench/reader.json [--chart bench/reader.png] [--sweep]

Every case runs in its own subprocess while this process samples the memory of that process tree
(psutil: RSS and PSS summed over the tree, USS per DataLoader worker). Per case: samples/s after warm-up,
first-batch latency (from constructing the dataset), peak memory, bytes read from the source per sample
(HTTP cases, from the cache counters), distinct episodes per batch / batch size, and the fraction of
samples whose video files were already local when their episode entered the pool. The cases run
round-robin, `--repeat` rounds, and each keeps its fastest run, so that the ratios between cases are
measured side by side on a shared machine. `--sweep` also runs the lrs/1 HTTP case over pool sizes,
prefetch depths and decode threads (how the defaults were chosen).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.servers (the loopback HTTP server with injected latency)

WARMUP_BATCHES = 5


# --- the dataset -------------------------------------------------------------------------------------


def build_dataset(workdir: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """The v3 sample and its lrs/1 copy (`lrs reshard`), reused when already there with the same spec."""
    from reshard.sample import write_sample

    spec = {
        "episodes": args.episodes,
        "min_length": args.min_length,
        "max_length": args.max_length,
        "cameras": args.cameras,
        "height": args.height,
        "width": args.width,
        "episodes_per_data_file": 10,
        "episodes_per_video_file": 10,
    }
    tag = workdir / "spec.json"
    v3, lrs = workdir / "v3", workdir / "lrs"
    if (
        not tag.exists()
        or json.loads(tag.read_text()) != spec
        or not (lrs / "meta/lrs/files.parquet").exists()
    ):
        shutil.rmtree(v3, ignore_errors=True)
        shutil.rmtree(lrs, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        print(f"generating {spec} ...", file=sys.stderr)
        write_sample(v3, **spec)
        lrs_cli = Path(sys.executable).parent / "lrs"
        subprocess.run([str(lrs_cli), "reshard", str(v3), "--out", str(lrs), "--quiet"], check=True)
        tag.write_text(json.dumps(spec))
    return v3, lrs


def build_hevc(workdir: Path, v3: Path) -> Path:
    """An lrs/1 copy of the v3 sample re-encoded to H.265 (`lrs reshard --video hevc`, the NVDEC-ready
    layout), reused while the v3 sample is the same."""
    hevc = workdir / "lrs-hevc"
    tag, spec = hevc / ".bench-spec.json", (workdir / "spec.json").read_text()
    if not tag.exists() or tag.read_text() != spec:
        shutil.rmtree(hevc, ignore_errors=True)
        print("re-encoding the sample to HEVC ...", file=sys.stderr)
        lrs_cli = Path(sys.executable).parent / "lrs"
        command = [str(lrs_cli), "reshard", str(v3), "--out", str(hevc), "--video", "hevc", "--quiet"]
        subprocess.run([*command, "--workers", str(min(4, os.cpu_count() or 1))], check=True)
        tag.write_text(spec)
    return hevc


# --- cases (each runs in a child process) ------------------------------------------------------------


def run_reader_case(case: dict[str, Any]) -> dict[str, Any]:
    """Iterate one epoch of `EpisodeStream` through a DataLoader; measure it."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    from cache import aggregate_stats
    from reader import EpisodeStream, collate
    from tests.servers import Faults, RangeServer

    server = None
    source = case["root"]
    if case["http_latency_s"] is not None:
        server = RangeServer(source, faults=Faults(latency_s=case["http_latency_s"])).start()
        source = server.url
    cache_dir = tempfile.mkdtemp(prefix="lrs-bench-cache-")
    reports: Any = multiprocessing.get_context("fork").Queue()

    class Reporting(IterableDataset):
        """Sends each consumer's reader counters home once its stream ends."""

        def __init__(self, stream: EpisodeStream) -> None:
            self.stream = stream

        def __iter__(self):  # type: ignore[no-untyped-def]
            yield from self.stream
            reports.put(self.stream.stats().to_dict())

    try:
        cpu = _cpu_seconds()
        began = time.perf_counter()
        stream = EpisodeStream(source, cache_dir=cache_dir, return_uint8=True, seed=0, **case["stream"])
        opened = time.perf_counter() - began
        loader = DataLoader(
            Reporting(stream),
            batch_size=case["batch_size"],
            num_workers=case["workers"],
            collate_fn=collate if case.get("collate") else None,
        )
        timing = _iterate(loader, began, case["batch_size"])
        stats = [reports.get(timeout=60) for _ in range(max(1, case["workers"]))]
        del loader  # joins the workers, so that their CPU time is counted
        cpu = _cpu_seconds() - cpu
        samples = sum(s["samples"] for s in stats)
        fetched = aggregate_stats(cache_dir).bytes_fetched
        return {
            **timing,
            "open_s": opened,
            "cpu_ms_per_sample": 1000 * cpu / samples,
            "samples_local_fraction": sum(s["samples_local"] for s in stats) / max(1, samples),
            "source_bytes_per_sample": fetched / samples if server is not None else None,
            "decoders_opened": sum(s["decoders_opened"] for s in stats),
            "row_reads": sum(s["row_reads"] for s in stats),
            "torch_threads": torch.get_num_threads(),
        }
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(cache_dir, ignore_errors=True)


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have been waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _iterate(loader: Any, began: float, batch_size: int) -> dict[str, Any]:
    first = warm = None
    samples = warm_samples = 0
    ratios = []
    for i, batch in enumerate(loader):
        now = time.perf_counter()
        episodes = batch["episode_index"].tolist()
        samples += len(episodes)
        if len(episodes) == batch_size:
            ratios.append(len(set(episodes)) / batch_size)
        if first is None:
            first = now - began
        if i + 1 == WARMUP_BATCHES:
            warm, warm_samples = now, samples
    end = time.perf_counter()
    if warm is None:
        raise RuntimeError(f"only {samples} samples: too few batches to measure after warm-up")
    return {
        "samples": samples,
        "first_batch_s": first,
        "samples_per_s": (samples - warm_samples) / (end - warm),
        "distinct_episodes_per_batch": sum(ratios) / len(ratios),
    }


def run_decode_only_case(case: dict[str, Any]) -> dict[str, Any]:
    """The same frames each DataLoader worker emits, decoded in a tight loop, one process per worker."""
    from reader import EpisodeStream

    stream = EpisodeStream(case["root"], seed=0, **case["stream"])
    workers = max(1, case["workers"])
    schedule = stream.schedule(case["workers"])
    jobs = []
    for worker in range(workers):
        emission = schedule.emission(0, 0, worker)
        pieces, frames = emission.arrays()
        refs = [stream.catalog.episodes[stream.episodes[emission.pieces[p].episode]] for p in pieces.tolist()]
        jobs.append(
            [([v.path for v in ref.videos], frame) for ref, frame in zip(refs, frames.tolist(), strict=True)]
        )
    pool = multiprocessing.get_context("fork").Pool(workers)
    cpu = _cpu_seconds()
    began = time.perf_counter()
    counts = pool.starmap(_decode_loop, [(case["root"], job) for job in jobs])
    seconds = time.perf_counter() - began
    pool.close()
    pool.join()
    cpu = _cpu_seconds() - cpu
    samples = sum(counts)
    return {
        "samples": samples,
        "samples_per_s": samples / seconds,
        "first_batch_s": None,
        "cpu_ms_per_sample": 1000 * cpu / samples,
    }


def run_loader_only_case(case: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader alone: items shaped like the reader's (frames as torchcodec returns them, rows),
    made without reading or decoding, collated and sent across processes the same way."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    from reader import EpisodeStream, collate

    stream = EpisodeStream(case["root"], return_uint8=True, seed=0, **case["stream"])
    template = next(iter(stream))
    total = len(stream)

    class Prebuilt(IterableDataset):
        def __iter__(self):  # type: ignore[no-untyped-def]
            info = get_worker_info()
            workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
            for i in range(worker, total, workers):
                yield {**template, "index": torch.tensor(i)}

    cpu = _cpu_seconds()
    began = time.perf_counter()
    loader = DataLoader(
        Prebuilt(),
        batch_size=case["batch_size"],
        num_workers=case["workers"],
        collate_fn=collate if case.get("collate") else None,
    )
    timing = _iterate(loader, began, case["batch_size"])
    del loader
    cpu = _cpu_seconds() - cpu
    return {**timing, "cpu_ms_per_sample": 1000 * cpu / timing["samples"]}


def _decode_loop(root: str, job: list[tuple[list[str], int]]) -> int:
    from torchcodec.decoders import VideoDecoder

    decoders: dict[str, Any] = {}
    for paths, frame in job:
        for rel in paths:
            decoder = decoders.get(rel)
            if decoder is None:
                decoder = decoders[rel] = VideoDecoder(os.path.join(root, rel), seek_mode="approximate")
            decoder.get_frames_at(indices=[frame])
    return len(job)


LEROBOT_SCRIPT = r"""
import json, os, sys, time
import torch
from torch.utils.data import DataLoader
began = time.perf_counter()
from lerobot.datasets.lerobot_dataset import LeRobotDataset
root, batch_size, workers, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = os.times()
cpu0 = t.user + t.system
ds = LeRobotDataset("local/bench", root=root, video_backend="torchcodec", return_uint8=True)
opened = time.perf_counter() - began
loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                    generator=torch.Generator().manual_seed(0))
first = warm = None
samples = warm_samples = 0
ratios = []
for i, batch in enumerate(loader):
    now = time.perf_counter()
    episodes = batch["episode_index"].tolist()
    samples += len(episodes)
    if len(episodes) == batch_size:
        ratios.append(len(set(episodes)) / batch_size)
    first = now - began if first is None else first
    if i + 1 == warmup:
        warm, warm_samples = now, samples
end = time.perf_counter()
del loader
t = os.times()
cpu = t.user + t.system + t.children_user + t.children_system - cpu0
print(json.dumps({"samples": samples, "first_batch_s": first, "open_s": opened,
                  "cpu_ms_per_sample": 1000 * cpu / samples,
                  "samples_per_s": (samples - warm_samples) / (end - warm),
                  "distinct_episodes_per_batch": sum(ratios) / len(ratios)}))
"""


# --- the parent: run cases in children, watch their memory --------------------------------------------


class MemoryWatch:
    """Samples the memory of a process tree until stopped (an Event paces the samples)."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.root = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak_rss = self.peak_pss = 0
        self.peak_worker_uss: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def _sample(self) -> None:
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        rss = pss = 0
        for proc in tree:
            try:
                info = proc.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss, pss = rss + info.rss, pss + info.pss
            if proc.pid != self.root.pid:
                self.peak_worker_uss[proc.pid] = max(self.peak_worker_uss.get(proc.pid, 0), info.uss)
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)

    def report(self) -> dict[str, Any]:
        workers = sorted(self.peak_worker_uss.values(), reverse=True)
        return {
            "peak_tree_rss_mb": self.peak_rss / 2**20,
            "peak_tree_pss_mb": self.peak_pss / 2**20,
            "peak_worker_uss_mb": workers[0] / 2**20 if workers else None,
        }


def run_child(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a case in a child process, watching its memory; its last stdout line is the JSON result."""
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )
    with MemoryWatch(proc.pid) as watch:
        out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"case {command[-1][:200]} failed:\n{err[-3000:]}")
    return {**json.loads(out.strip().splitlines()[-1]), **watch.report()}


class Case(NamedTuple):
    """One benchmark case: a child command whose last stdout line is its JSON result."""

    argv: list[str]
    env: dict[str, str] | None = None
    settings: dict[str, Any] | None = None
    optional: bool = False  # a failure skips the case instead of ending the benchmark


def reader_case(
    root: Path,
    args: argparse.Namespace,
    *,
    http: bool,
    kind: str = "reader",
    collate: bool = False,
    **stream: Any,
) -> Case:
    case = {
        "kind": kind,
        "collate": collate,
        "root": str(root),
        "http_latency_s": args.latency_ms / 1000 if http else None,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "stream": {"episode_pool_size": args.pool, "prefetch_episodes": args.prefetch, **stream},
    }
    return Case([sys.executable, __file__, "--run-case", json.dumps(case)], settings=case["stream"])


def lerobot_case(v3: Path, script: Path, args: argparse.Namespace) -> Case | None:
    """lerobot's shuffled LeRobotDataset in the reference venv (`lerobot-reference.sh` builds it); None
    when that venv is absent (never built from here: it is 5 GB)."""
    python = args.lerobot_python or Path(os.environ.get("LEROBOT_VENV", "/tmp/lerobot-venv")) / "bin/python"
    if not Path(python).exists():
        print(f"no lerobot reference venv at {python}: skipping the lerobot case", file=sys.stderr)
        return None
    script.write_text(LEROBOT_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    argv = [str(python), str(script), str(v3), str(args.batch_size), str(args.workers), str(WARMUP_BATCHES)]
    return Case(argv, env=env, optional=True)


def run_cases(cases: dict[str, Case], repeat: int) -> dict[str, dict[str, Any]]:
    """Run every case `repeat` times, round-robin, and keep the fastest run of each.

    Round-robin, so that a stretch of someone else's load on this shared machine slows every case alike
    and the ratios between cases stay meaningful; the fastest run, because load only ever slows a run.
    Every figure of a case (CPU per sample and memory too) comes from that fastest run; the samples/s
    and CPU figures of all its runs are kept beside it.
    """
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    failed: set[str] = set()
    for round_ in range(1, repeat + 1):
        for name, case in cases.items():
            if name in failed:
                continue
            print(f"[{round_}/{repeat}] {name} ...", file=sys.stderr)
            try:
                result = run_child(case.argv, env=case.env)
            except RuntimeError as exc:
                if not case.optional:
                    raise
                print(f"  {name} failed, skipped from now on: {exc}", file=sys.stderr)
                failed.add(name)
                continue
            print(
                f"  {result['samples_per_s']:.1f} samples/s, {result['cpu_ms_per_sample']:.2f} CPU ms/sample, "
                f"first batch {result.get('first_batch_s')}",
                file=sys.stderr,
            )
            runs[name].append(result)
    results = {}
    for name, found in runs.items():
        if not found:
            continue
        best = dict(max(found, key=lambda r: r["samples_per_s"]))
        best["samples_per_s_runs"] = [r["samples_per_s"] for r in found]
        best["cpu_ms_per_sample_runs"] = [r["cpu_ms_per_sample"] for r in found]
        if cases[name].settings is not None:
            best["settings"] = cases[name].settings
        results[name] = best
    return results


def chart(results: dict[str, Any], path: Path) -> None:
    """Draw the reader cases side by side: samples/s and first-batch latency, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["cases"])
    speed = [results["cases"][n]["samples_per_s"] for n in names]
    first = [results["cases"][n].get("first_batch_s") for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 2.5 + 0.45 * len(names)), sharey=True)
    left.bar_label(left.barh(names, speed, color="tab:blue"), fmt="%.0f", padding=3)
    left.set_title("throughput")
    left.set_xlabel("samples/s after warm-up (higher is better)")
    bars = right.barh(names, [f or 0.0 for f in first], color="tab:orange")
    # A case without a first batch (decode-only has no DataLoader) is labelled, not drawn as zero.
    right.bar_label(bars, labels=["n/a" if f is None else f"{f:.2f} s" for f in first], padding=3)
    right.set_title("first-batch latency")
    right.set_xlabel("s from building the dataset to the first batch (lower is better)")
    left.invert_yaxis()  # shared y: cases top-down in run order in both panels
    for ax in (left, right):
        ax.margins(x=0.2)  # room for the value labels
    settings = results["settings"]
    fig.suptitle(
        f"EpisodeStream, {settings['cameras']} cameras {settings['height']}x{settings['width']}, "
        f"batch {settings['batch_size']}, {settings['workers']} workers, HTTP latency {settings['latency_ms']} ms"
        f"\nmachine: {settings.get('cpus', '?')} CPUs"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/reader.json", help="JSON results.")
    parser.add_argument("--chart", type=Path, help="Also draw a PNG chart of the cases.")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "lrs-bench-reader",
        help="Where the sample datasets are generated (reused across runs with the same spec).",
    )
    parser.add_argument("--episodes", type=int, default=40, help="Episodes of the sample.")
    parser.add_argument("--min-length", type=int, default=40, help="Shortest episode, frames.")
    parser.add_argument("--max-length", type=int, default=120, help="Longest episode, frames.")
    parser.add_argument("--cameras", type=int, default=2, help="Cameras of the sample.")
    parser.add_argument("--height", type=int, default=240, help="Frame height, pixels.")
    parser.add_argument("--width", type=int, default=320, help="Frame width, pixels.")
    parser.add_argument("--batch-size", type=int, default=16, help="DataLoader batch size.")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers.")
    parser.add_argument("--pool", type=int, default=16, help="episode_pool_size of the main cases.")
    parser.add_argument("--prefetch", type=int, default=8, help="prefetch_episodes of the main cases.")
    parser.add_argument("--latency-ms", type=float, default=30.0, help="Injected latency per HTTP request.")
    parser.add_argument(
        "--repeat", type=int, default=3, help="Rounds over all cases; each case reports its fastest run."
    )
    parser.add_argument(
        "--sweep", action="store_true", help="Also sweep pool size, prefetch and decode threads."
    )
    parser.add_argument("--no-lerobot", action="store_true", help="Skip the lerobot comparison case.")
    parser.add_argument(
        "--no-hevc", action="store_true", help="Skip the cases on the HEVC re-encode (built once, ~1 min)."
    )
    parser.add_argument(
        "--lerobot-python",
        type=Path,
        help="Python of the lerobot 0.6.1 reference venv [default: $LEROBOT_VENV].",
    )
    parser.add_argument("--run-case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_case:
        case = json.loads(args.run_case)
        runners = {"decode-only": run_decode_only_case, "loader-only": run_loader_only_case}
        runner = runners.get(case["kind"], run_reader_case)
        print(json.dumps(runner(case)))
        return

    v3, lrs = build_dataset(args.workdir, args)
    planned: dict[str, Case] = {
        "lrs1-local": reader_case(lrs, args, http=False),
        # `reader.collate`: one shared buffer per batch instead of one segment and descriptor per key.
        "lrs1-local-collate": reader_case(lrs, args, http=False, collate=True),
        "v3-local": reader_case(v3, args, http=False),
        "lrs1-http": reader_case(lrs, args, http=True),
        "v3-http": reader_case(v3, args, http=True),
        "decode-only": reader_case(lrs, args, http=False, kind="decode-only"),
        "loader-only": reader_case(lrs, args, http=False, kind="loader-only"),
        "loader-only-collate": reader_case(lrs, args, http=False, kind="loader-only", collate=True),
    }
    if not args.no_hevc:
        hevc = build_hevc(args.workdir, v3)
        planned["lrs1-hevc-local"] = reader_case(hevc, args, http=False)
        planned["decode-only-hevc"] = reader_case(hevc, args, http=False, kind="decode-only")
    with tempfile.TemporaryDirectory(prefix="lrs-bench-") as scratch:
        lerobot = None if args.no_lerobot else lerobot_case(v3, Path(scratch) / "lerobot_case.py", args)
        if lerobot is not None:
            planned["lerobot-v3-local"] = lerobot
        cases = run_cases(planned, args.repeat)
    limit = cases["decode-only"]["samples_per_s"]
    # Decoding and the DataLoader's collate + inter-process transport each take their time per sample.
    both = 1 / (1 / limit + 1 / cases["loader-only"]["samples_per_s"])
    results: dict[str, Any] = {
        "settings": {
            "episodes": args.episodes,
            "frames": cases["lrs1-local"]["samples"],
            "cameras": args.cameras,
            "height": args.height,
            "width": args.width,
            "batch_size": args.batch_size,
            "workers": args.workers,
            "latency_ms": args.latency_ms,
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },  # fmt: skip
        "cases": cases,
        "vs_decode_only": {n: c["samples_per_s"] / limit for n, c in cases.items() if "-only" not in n},
        "decode_plus_loader_limit_samples_per_s": both,
        "vs_decode_plus_loader": {n: c["samples_per_s"] / both for n, c in cases.items() if "-only" not in n},
        "vs_decode_only_cpu": {
            n: cases["decode-only"]["cpu_ms_per_sample"] / c["cpu_ms_per_sample"]
            for n, c in cases.items()
            if "-only" not in n and c.get("cpu_ms_per_sample")
        },
    }
    if "lerobot-v3-local" in cases:
        lerobot = cases["lerobot-v3-local"]
        ours = {n: c for n, c in cases.items() if n.startswith(("lrs1", "v3"))}
        results["vs_lerobot"] = {n: c["samples_per_s"] / lerobot["samples_per_s"] for n, c in ours.items()}
        # CPU per sample is what bounds throughput on a busy node, and the machine's load distorts it less.
        results["vs_lerobot_cpu"] = {
            n: lerobot["cpu_ms_per_sample"] / c["cpu_ms_per_sample"] for n, c in ours.items()
        }
        results["memory_vs_lerobot"] = {
            n: {
                "pss": c["peak_tree_pss_mb"] / lerobot["peak_tree_pss_mb"],
                "rss": c["peak_tree_rss_mb"] / lerobot["peak_tree_rss_mb"],
            }
            for n, c in ours.items()
        }
    if "lrs1-hevc-local" in cases:
        # The HEVC layout against the decode-only limit of the same files, and what it costs or saves on
        # CPU decode against the AV1 files.
        hevc_case, hevc_limit = cases["lrs1-hevc-local"], cases["decode-only-hevc"]
        results["hevc"] = {
            "vs_decode_only_hevc": hevc_case["samples_per_s"] / hevc_limit["samples_per_s"],
            "vs_decode_only_hevc_cpu": hevc_limit["cpu_ms_per_sample"] / hevc_case["cpu_ms_per_sample"],
            "decode_cpu_ms_per_sample_hevc_minus_av1": hevc_limit["cpu_ms_per_sample"]
            - cases["decode-only"]["cpu_ms_per_sample"],
            "reader_cpu_ms_per_sample_hevc_minus_av1": hevc_case["cpu_ms_per_sample"]
            - cases["lrs1-local"]["cpu_ms_per_sample"],
        }
    if args.sweep:
        results["sweep"] = sweep(lrs, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if args.chart:
        chart(results, args.chart)
    keys = (
        "vs_decode_only",
        "vs_decode_only_cpu",
        "vs_decode_plus_loader",
        "vs_lerobot",
        "vs_lerobot_cpu",
        "memory_vs_lerobot",
        "hevc",
    )
    summary = {k: results.get(k) for k in keys}
    print(json.dumps(summary, indent=2))


def sweep(lrs: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The lrs/1 HTTP case over pool sizes, prefetch depths, decode threads and samples built ahead."""
    settings = [
        *({"episode_pool_size": k, "prefetch_episodes": args.prefetch} for k in (4, 16, 64)),
        *({"episode_pool_size": args.pool, "prefetch_episodes": p} for p in (0, 2, 32)),
        *(
            {"episode_pool_size": args.pool, "prefetch_episodes": args.prefetch, "decode_threads": t}
            for t in (0, 1, 4)
        ),
        *(
            {"episode_pool_size": args.pool, "prefetch_episodes": args.prefetch, "decode_ahead": a}
            for a in (2, 32)
        ),
    ]
    results = run_cases(
        {json.dumps(stream): reader_case(lrs, args, http=True, **stream) for stream in settings}, args.repeat
    )
    rows = []
    for stream in settings:
        result = results[json.dumps(stream)]
        rows.append({**stream, **{k: result[k] for k in (
            "samples_per_s", "first_batch_s", "distinct_episodes_per_batch", "samples_local_fraction",
            "peak_tree_pss_mb", "peak_worker_uss_mb", "decoders_opened")}})  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
