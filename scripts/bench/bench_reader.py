"""Benchmark `EpisodeStream`: lrs/1 vs plain v3, local disk vs a loopback HTTP source with latency, against
a decode-only limit (the same frames decoded in a tight torchcodec loop) and, when the reference venv
exists, lerobot 0.6.1's `LeRobotDataset` and lerobot-lancedb's `LanceDBDataset`, each at float32 (the class
defaults) and at uint8 (`return_uint8=True`, what lerobot-train builds), all through lerobot-train's
DataLoader settings (`prefetch_factor=4`, `persistent_workers=True`; the same batch size, workers and
start method for every case; lerobot's `EpisodeAwareSampler` with `shuffle=True` for the map-style peers).

    python scripts/bench/bench_reader.py --out bench/reader.json [--chart bench/reader.png] [--sweep]

Every case runs in its own subprocess while this process samples the memory of that process tree
(psutil: RSS and PSS summed over the tree, USS per DataLoader worker). Per case: samples/s after warm-up,
first-batch latency (from constructing the dataset), peak memory, bytes read from the source per sample
(HTTP cases, from the cache counters), distinct episodes per batch / batch size, and the fraction of
samples whose video files were already local when their episode entered the pool. Every case names
its transport (float32 or uint8 frames) and ratios against lerobot and lerobot-lancedb are taken only
between cases of the same transport (and frame mode); the float32-baseline ratio (uint8 cases against
lerobot's float32 defaults) is kept apart, labelled as such. The cases run round-robin, `--repeat`
rounds (the load average is recorded at the start and end of every round), and each keeps its fastest
run; the ratios of every round are kept too, so that the ratios between cases are measured side by
side on a shared machine. `--sweep` also runs the lrs/1 HTTP case over pool sizes,
prefetch depths and decode threads (how the defaults were chosen).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psutil
from _layouts import layout_parser, resize_of  # this folder
from _tree_cpu import tree_cpu_seconds  # this folder: shared with _peer_case.py
from torch.utils.data import IterableDataset

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(ROOT))  # tests.servers (loopback HTTP with injected latency), after this folder

WARMUP_BATCHES = 5
# The two frame modes of LeRobot's streaming benchmark: one frame of every camera; and SARM's, an action
# window of 8 steps spaced 1 s (and one frame of every camera).
MODES: dict[str, dict[str, list[float]] | None] = {
    "single": None,
    "sarm": {"action": [float(s) for s in range(8)]},
}
NEAR_FRAMES = 2
# lerobot-train's DataLoader settings (lerobot 0.6.1 `TrainPipelineConfig`), used by every case with workers.
PREFETCH_FACTOR = 4
PERSISTENT_WORKERS = True


def worker_settings(workers: int, context: str | None) -> dict[str, Any]:
    """The DataLoader's worker options, as lerobot-train sets them (none without workers)."""
    if not workers:
        return {}
    return {
        "multiprocessing_context": context,
        "prefetch_factor": PREFETCH_FACTOR,
        "persistent_workers": PERSISTENT_WORKERS,
    }


def transport(settings: dict[str, Any]) -> str:
    """How a case's frames cross from the workers to the trainer."""
    return "uint8" if settings.get("uint8") else "float32"


def mixing(batches: list[list[tuple[int, int]]]) -> dict[str, float]:
    """How well batches mix, over full batches of (episode, frame) pairs.

    - distinct_episodes_per_batch: distinct episodes / batch size, averaged;
    - near_fraction_of_same_episode_pairs: of the pairs of samples of one batch from the same episode,
      the fraction at most NEAR_FRAMES frames apart (near-duplicates);
    - near_pairs_per_batch: such near-duplicate pairs per batch;
    - same_episode_pairs_per_batch: pairs of one batch from the same episode.
    """
    size = max(len(b) for b in batches)
    full = [b for b in batches if len(b) == size]
    distinct, same, near = [], 0, 0
    for batch in full:
        distinct.append(len({e for e, _ in batch}) / size)
        frames: dict[int, list[int]] = {}
        for e, f in batch:
            frames.setdefault(e, []).append(f)
        for fs in frames.values():
            for i, a in enumerate(fs):
                for b in fs[i + 1 :]:
                    same += 1
                    near += abs(a - b) <= NEAR_FRAMES
    return {
        "distinct_episodes_per_batch": sum(distinct) / len(distinct),
        "near_fraction_of_same_episode_pairs": near / same if same else 0.0,
        "near_pairs_per_batch": near / len(full),
        "same_episode_pairs_per_batch": same / len(full),
    }


def uniform_batches(lengths: list[int], batch_size: int, seed: int) -> list[list[tuple[int, int]]]:
    """Batches of a shuffled map-style dataset (torch's RandomSampler): a uniform permutation of frames."""
    import numpy as np

    frames = [(e, f) for e, n in enumerate(lengths) for f in range(n)]
    order = np.random.default_rng(seed).permutation(len(frames)).tolist()
    return [[frames[i] for i in order[k : k + batch_size]] for k in range(0, len(order), batch_size)]


def stream_batches(root: str, batch_size: int, workers: int) -> list[list[tuple[int, int]]]:
    """The batches `EpisodeStream(root, batch_size=...)` yields through a DataLoader with `workers`, from
    its schedule alone (the order is a pure function of it): each worker batches its own stream and the
    DataLoader takes batches from the workers in turn."""
    from reader import EpisodeStream

    stream = EpisodeStream(root, seed=0, batch_size=batch_size)
    schedule = stream.schedule(workers)
    chunks = []
    for worker in range(max(1, workers)):
        emission = schedule.emission(0, 0, worker)
        pieces, frames = emission.arrays()
        episodes = [stream.episodes[emission.piece(p).episode] for p in pieces.tolist()]
        pairs = list(zip(episodes, frames.tolist(), strict=True))
        chunks.append([pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size)])
    return [c[k] for k in range(max(len(c) for c in chunks)) for c in chunks if k < len(c)]


# --- the dataset -------------------------------------------------------------------------------------


def add_sample_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    episodes: int = 48,
    min_length: int = 40,
    max_length: int = 120,
) -> None:
    """The options of the generated sample that `build_dataset` reads (every bench that generates one takes
    them): episodes, episode lengths, cameras and frame size."""
    parser.add_argument("--episodes", type=int, default=episodes, help="Episodes of the sample.")
    parser.add_argument("--min-length", type=int, default=min_length, help="Shortest episode, frames.")
    parser.add_argument("--max-length", type=int, default=max_length, help="Longest episode, frames.")
    parser.add_argument("--cameras", type=int, default=2, help="Cameras of the sample.")
    parser.add_argument("--height", type=int, default=240, help="Frame height, pixels.")
    parser.add_argument("--width", type=int, default=320, help="Frame width, pixels.")


def build_dataset(workdir: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """The v3 sample and its lrs/1 copy (`lrs reshard`), reused when already there with the same spec."""
    from reshard.demo.sample import write_sample

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
    return build_layout(workdir, v3, "lrs-hevc", "--video hevc")


def build_layout(workdir: Path, v3: Path, name: str, options: str) -> Path:
    """`lrs reshard v3 OPTIONS` into `workdir/name` (the folder of the sample's lrs/1 copy, whose
    `spec.json` names the sample), reused while the sample and the options are the same."""
    argv = shlex.split(options)
    return reshard_once(v3, workdir / name, argv, f"{(workdir / 'spec.json').read_text()}\n{argv}")


def reshard_once(v3: Path, out: Path, options: list[str], spec: str) -> Path:
    """`out`: `lrs reshard v3 --out out *options` (up to 4 worker processes unless `options` say), made
    again unless `out` holds one made under the same `spec` (any text naming the source and options),
    which a tag beside it records."""
    # Beside the dataset, not in it: a file the lrs/1 index does not list makes `lrs verify` call it stale.
    tag = out.parent / f".{out.name}.bench-spec.json"
    inside = out / ".bench-spec.json"  # where earlier runs kept it
    if inside.exists():
        inside.replace(tag)
    if not tag.exists() or tag.read_text() != spec or not out.is_dir():
        tag.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(out.parent / f".{out.name}.lrs-work", ignore_errors=True)  # reshard's default work dir
        print(f"lrs reshard {v3} --out {out} {' '.join(options)} ...", file=sys.stderr)
        lrs_cli = Path(sys.executable).parent / "lrs"
        workers = ["--workers", str(min(4, os.cpu_count() or 1))]
        subprocess.run(
            [str(lrs_cli), "reshard", str(v3), "--out", str(out), "--quiet", *workers, *options], check=True
        )
        tag.write_text(spec)
    return out


def source_spec(v3: Path) -> str:
    """What identifies a local dataset's content for `reshard_once`: its path and every file's relative
    path, size and modification time."""
    root = v3.resolve()
    files = sorted(
        (str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns)
        for f in root.rglob("*")
        if f.is_file()
    )
    return json.dumps({"source": str(root), "files": files})


def recorded_dataset(workdir: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """`--recorded`'s v3 dataset and its lrs/1 copy in `workdir` (made once per source content); the sample
    options (`--episodes`, `--cameras`, `--height`, `--width`) are set to what it holds."""
    v3 = args.recorded.resolve()
    info = json.loads((v3 / "meta/info.json").read_text())
    cameras = [f["shape"] for f in info["features"].values() if f["dtype"] == "video"]
    args.episodes, args.cameras = info["total_episodes"], len(cameras)
    args.height, args.width = cameras[0][:2]
    spec = source_spec(v3)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "spec.json").write_text(spec)  # build_hevc's tag
    return v3, reshard_once(v3, workdir / "lrs", [], spec)


# --- cases (each runs in a child process) ------------------------------------------------------------


def run_reader_case(case: dict[str, Any]) -> dict[str, Any]:
    """Iterate one epoch of `EpisodeStream` through a DataLoader; measure it."""
    import torch
    from torch.utils.data import DataLoader

    from cache import sum_cache_stats
    from reader import BatchLoader, EpisodeStream, collate
    from tests.servers import Faults, RangeServer

    server = None
    source = case["root"]
    if case["http_latency_s"] is not None:
        server = RangeServer(source, faults=Faults(latency_s=case["http_latency_s"])).start()
        source = server.url
    cache_dir = tempfile.mkdtemp(prefix="lrs-bench-cache-")
    reports: Any = multiprocessing.get_context(case.get("context") or "fork").Queue()

    try:
        cpu = cpu_seconds()
        began = time.perf_counter()
        stream = EpisodeStream(
            source,
            cache_dir=cache_dir,
            return_uint8=case.get("uint8", True),
            seed=0,
            batch_size=case["batch_size"],
            delta_timestamps=MODES[case.get("mode", "single")],
            **case["stream"],
        )
        opened = time.perf_counter() - began
        in_process = case.get("loader") == "batch"  # reader.BatchLoader: threads here, no DataLoader
        if in_process:
            loader: Any = BatchLoader(
                stream, case["batch_size"], channels_last=case.get("channels_last", False)
            )
        else:
            loader = DataLoader(
                Reporting(stream, reports),
                batch_size=case["batch_size"],
                num_workers=case["workers"],
                collate_fn=collate if case.get("collate") else None,
                **worker_settings(case["workers"], case.get("context")),
            )
        timing = _iterate(loader, began, stream.meta.camera_keys)
        if in_process:
            stats = [stream.stats().to_dict()]
        else:
            stats = [reports.get(timeout=60) for _ in range(max(1, case["workers"]))]
        del loader
        join_workers()
        cpu = cpu_seconds() - cpu
        samples = sum(s["samples"] for s in stats)
        fetched = sum_cache_stats(cache_dir).bytes_fetched
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


class Reporting(IterableDataset):
    """Sends each consumer's reader counters home once its stream ends (module level: it pickles into
    spawned workers)."""

    def __init__(self, stream: Any, reports: Any) -> None:
        self.stream, self.reports = stream, reports

    def __iter__(self) -> Iterator[Any]:
        yield from self.stream
        self.reports.put(self.stream.stats().to_dict())


def join_workers(timeout_s: float = 120.0) -> None:
    """Wait for every DataLoader worker to be reaped, so that its CPU time is counted in this process's
    children's times: torch terminates a worker that takes more than 5 s to exit, and leaves it unreaped."""
    gc.collect()  # a (persistent) workers' iterator kept alive by a reference cycle shuts down now
    for child in multiprocessing.active_children():
        child.join(timeout_s)
    alive = multiprocessing.active_children()
    if alive:
        raise RuntimeError(f"DataLoader workers still running after {timeout_s} s: {alive}")


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have been waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _iterate(loader: Any, began: float, cameras: list[str]) -> dict[str, Any]:
    first = warm = None
    dtypes: list[str] = []
    samples = warm_samples = 0
    arrivals, batches = [], []
    for i, batch in enumerate(loader):
        now = time.perf_counter()
        episodes = batch["episode_index"].tolist()
        batches.append(list(zip(episodes, batch["frame_index"].tolist(), strict=True)))
        samples += len(episodes)
        if first is None:
            first = now - began
            dtypes = sorted({str(batch[k].dtype).removeprefix("torch.") for k in cameras})
        if i + 1 >= WARMUP_BATCHES:
            arrivals.append(now)
        if i + 1 == WARMUP_BATCHES:
            warm, warm_samples, warm_cpu = now, samples, tree_cpu_seconds()
    end, end_cpu = time.perf_counter(), tree_cpu_seconds()
    if warm is None:
        raise RuntimeError(f"only {samples} samples: too few batches to measure after warm-up")
    gaps = sorted(1000 * (b - a) for a, b in zip(arrivals, arrivals[1:], strict=False))
    return {
        "samples": samples,
        "first_batch_s": first,
        "frame_dtypes": dtypes,
        "samples_per_s": (samples - warm_samples) / (end - warm),
        "steady_cpu_ms_per_sample": 1000 * (end_cpu - warm_cpu) / (samples - warm_samples),
        **{f"batch_ms_p{q}": gaps[min(len(gaps) - 1, len(gaps) * q // 100)] for q in (50, 95, 99)},
        **mixing(batches),
    }


def run_decode_only_case(case: dict[str, Any]) -> dict[str, Any]:
    """The same frames each DataLoader worker emits, decoded in a tight loop, one process per worker.

    With `workers` 0: the one consumer `BatchLoader` and `num_workers=0` read, its pieces split over
    `decode_threads` processes as `BatchLoader` splits them over its lanes (piece % lanes).
    """
    from reader import EpisodeStream

    stream = EpisodeStream(case["root"], seed=0, batch_size=case["batch_size"], **case["stream"])
    schedule = stream.schedule(case["workers"])
    consumers = max(1, case["workers"])
    workers = consumers if case["workers"] else max(1, case["stream"].get("decode_threads", 2))
    jobs: list[list[tuple[list[str], int]]] = [[] for _ in range(workers)]
    for consumer in range(consumers):
        for piece, paths, frame in consumer_frames(stream, schedule, consumer):
            jobs[consumer if case["workers"] else piece % workers].append((paths, frame))
    pool = multiprocessing.get_context("fork").Pool(workers)
    cpu = cpu_seconds()
    began = time.perf_counter()
    counts = pool.starmap(decode_loop, [(case["root"], job) for job in jobs])
    seconds = time.perf_counter() - began
    pool.close()
    pool.join()
    cpu = cpu_seconds() - cpu
    samples = sum(counts)
    return {
        "samples": samples,
        "samples_per_s": samples / seconds,
        "first_batch_s": None,
        "cpu_ms_per_sample": 1000 * cpu / samples,
        "steady_cpu_ms_per_sample": 1000 * cpu / samples,  # forked from a warm parent: no start-up
    }


class Prebuilt(IterableDataset):
    """`total` copies of one reader item (frames as torchcodec returns them, rows), split over workers."""

    def __init__(self, template: dict[str, Any], total: int) -> None:
        self.template, self.total = template, total

    def __iter__(self) -> Iterator[Any]:
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        for i in range(worker, self.total, workers):
            yield {**self.template, "index": torch.tensor(i), "episode_index": torch.tensor(i)}


def run_loader_only_case(case: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader alone: items shaped like the reader's, made without reading or decoding, collated
    and sent across processes the same way (same dtype, collate, workers and start method)."""
    from torch.utils.data import DataLoader

    from reader import EpisodeStream, collate

    stream = EpisodeStream(
        case["root"],
        return_uint8=case["uint8"],
        seed=0,
        delta_timestamps=MODES[case["mode"]],
        decode_threads=0,
    )
    template = next(iter(stream))
    cpu = cpu_seconds()
    began = time.perf_counter()
    loader = DataLoader(
        Prebuilt(template, len(stream)),
        batch_size=case["batch_size"],
        num_workers=case["workers"],
        collate_fn=collate if case.get("collate") else None,
        **worker_settings(case["workers"], case.get("context")),
    )
    timing = _iterate(loader, began, stream.meta.camera_keys)
    del loader
    join_workers()
    cpu = cpu_seconds() - cpu
    keep = ("samples", "first_batch_s", "frame_dtypes", "samples_per_s", "batch_ms_p50", "batch_ms_p95",
            "batch_ms_p99")  # fmt: skip
    return {**{k: timing[k] for k in keep}, "cpu_ms_per_sample": 1000 * cpu / timing["samples"]}


def consumer_frames(
    stream: Any, schedule: Any, consumer: int, epoch: int = 0
) -> list[tuple[int, list[str], int]]:
    """(piece, video paths, frame) of every sample `consumer` of rank 0 emits in `epoch` of `stream`
    (an `EpisodeStream`) under `schedule` (its `schedule(num_workers)`), in emission order."""
    return [
        (piece, [v.path for v in ref.videos], frame)
        for piece, ref, frame in consumer_episodes(stream, schedule, consumer, epoch)
    ]


def consumer_episodes(
    stream: Any, schedule: Any, consumer: int, epoch: int = 0
) -> list[tuple[int, Any, int]]:
    """`consumer_frames` with each sample's episode (its catalog's `EpisodeRef`) in place of its paths."""
    emission = schedule.emission(epoch, 0, consumer)
    pieces, frames = emission.arrays()
    refs = [stream.catalog.episodes[stream.episodes[p.episode]] for p in emission.pieces]
    return [
        (piece, refs[piece], frame) for piece, frame in zip(pieces.tolist(), frames.tolist(), strict=True)
    ]


def decode_loop(root: str, job: list[tuple[list[str], int]]) -> int:
    """Decode each (video paths, frame) of `job` in order, one torchcodec decoder per file (opened on first
    use, one FFmpeg thread, lerobot's approximate seek mode); the number of items."""
    from torchcodec.decoders import VideoDecoder

    decoders: dict[str, Any] = {}
    for paths, frame in job:
        for rel in paths:
            decoder = decoders.get(rel)
            if decoder is None:
                decoder = decoders[rel] = VideoDecoder(
                    os.path.join(root, rel), seek_mode="approximate", num_ffmpeg_threads=1
                )
            decoder.get_frames_at(indices=[frame])
    return len(job)


PEER_CASE = Path(__file__).with_name("_peer_case.py")  # lerobot and lerobot-lancedb, in their venv


# --- the parent: run cases in children, watch their memory --------------------------------------------


class MemoryWatch:
    """Samples the memory of a process tree until stopped (an Event paces the samples).

    Once a second: a sample reads every process's smaps (about 8 ms per torch process here), so sampling
    4 times a second took about 13% of a core from the cases it measured, on a 2-core machine.
    """

    def __init__(self, pid: int, interval_s: float = 1.0) -> None:
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
    result = json.loads(out.strip().splitlines()[-1])
    if "batches" in result:  # a lerobot case: its batches' (episode, frame) pairs
        result.update(mixing([[tuple(p) for p in b] for b in result.pop("batches")]))
    return {**result, **watch.report()}


class Case(NamedTuple):
    """One benchmark case: a child command whose last stdout line is its JSON result."""

    argv: list[str]
    env: dict[str, str] | None = None
    settings: dict[str, Any] | None = None
    optional: bool = False  # a failure skips the case instead of ending the benchmark


def reader_case(
    root: Path | list[Path],
    args: argparse.Namespace,
    *,
    http: bool,
    kind: str = "reader",
    collate: bool = True,
    uint8: bool = True,
    mode: str = "single",
    workers: int | None = None,
    context: str | None = None,
    loader: str = "dataloader",
    channels_last: bool = False,
    **stream: Any,
) -> Case:
    case = {
        "kind": kind,
        "loader": loader,
        "channels_last": channels_last,
        "collate": collate,
        "uint8": uint8,
        "mode": mode,
        "context": context or args.context,
        "root": [str(r) for r in root] if isinstance(root, list) else str(root),
        "http_latency_s": args.latency_ms / 1000 if http else None,
        "workers": args.workers if workers is None else workers,
        "batch_size": args.batch_size,
        "stream": {"prefetch_episodes": args.prefetch, **stream},
    }
    keys = ("kind", "loader", "channels_last", "collate", "uint8", "mode", "context", "workers")
    settings = {k: case[k] for k in keys}
    # decode-only hands nothing to a DataLoader: it has no transport.
    settings["transport"] = None if kind == "decode-only" else transport(settings)
    return Case(
        [sys.executable, __file__, "--run-case", json.dumps(case)], settings={**settings, **case["stream"]}
    )


def lerobot_case(
    v3: Path,
    args: argparse.Namespace,
    *,
    mode: str,
    uint8: bool,
    resize: tuple[int, int, str] | None = None,
) -> Case | None:
    """lerobot's shuffled LeRobotDataset (map-style; float32 frames, its class default, or uint8 with
    `return_uint8=True`, as lerobot-train builds it) in lerobot's Python (`--lerobot-python`, e.g. the
    one `scripts/lerobot/env.sh` prints, else `$LEROBOT_VENV/bin/python`), through lerobot-train's
    DataLoader settings; None when there is none (never built from here: it is 5 GB). `resize` (width,
    height, filter): its `image_transforms` resize every camera frame so (`_peer_case.py`)."""
    python = args.lerobot_python or Path(os.environ.get("LEROBOT_VENV", "/tmp/lerobot-venv")) / "bin/python"
    if not Path(python).exists():
        print(f"no lerobot reference venv at {python}: skipping the lerobot case", file=sys.stderr)
        return None
    params = {
        "kind": "lerobot",
        "root": str(v3),
        "batch_size": args.batch_size,
        "workers": args.workers,
        "warmup": WARMUP_BATCHES,
        "context": args.context,
        "uint8": uint8,
        "delta": MODES[mode],
        "prefetch": PREFETCH_FACTOR,
        "persistent": PERSISTENT_WORKERS,
        "resize": resize,
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    argv = [str(python), str(PEER_CASE), json.dumps(params)]
    return Case(argv, env=env, optional=True, settings=peer_settings("lerobot", args, mode, uint8))


def peer_settings(kind: str, args: argparse.Namespace, mode: str, uint8: bool) -> dict[str, Any]:
    return {
        "kind": kind,
        "mode": mode,
        "uint8": uint8,
        "transport": transport({"uint8": uint8}),
        "context": args.context,
        "workers": args.workers,
        "prefetch_factor": PREFETCH_FACTOR,
        "persistent_workers": PERSISTENT_WORKERS,
    }


def lancedb_case(v3: Path, args: argparse.Namespace, *, mode: str, uint8: bool) -> Case | None:
    """lerobot-lancedb 0.3.1's LanceDBDataset (the closest peer: map-style, shuffled; float32 frames, its
    default, or uint8 with its `return_uint8=True`) over its own conversion of the v3 sample, made once
    per workdir with its converter, in the lerobot reference venv (`pip install lerobot-lancedb==0.3.1`
    there); None when it is absent."""
    lerobot = lerobot_case(v3, args, mode=mode, uint8=uint8)
    if lerobot is None:
        return None
    python, env = lerobot.argv[0], lerobot.env
    lance = args.workdir / f"{v3.name}-lance"
    if not (lance / "meta/info.json").exists():
        convert = (
            "import sys; from pathlib import Path; from lerobot_lancedb.convert import convert; "
            "convert(Path(sys.argv[1]), root=Path(sys.argv[2]))"
        )
        done = subprocess.run(
            [python, "-c", convert, str(lance), str(v3)], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            print(f"no lerobot-lancedb case: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return None
    params = {**json.loads(lerobot.argv[2]), "kind": "lancedb", "root": str(lance)}
    argv = [*lerobot.argv[:2], json.dumps(params)]
    return Case(argv, env=env, optional=True, settings=peer_settings("lancedb", args, mode, uint8))


def peer_cases(v3: Path, args: argparse.Namespace, mode: str) -> dict[str, Case]:
    """lerobot and lerobot-lancedb in `mode`, float32 (unmarked, as the lrs1 cases) and uint8; none when
    the reference venv or lerobot-lancedb is absent."""
    cases: dict[str, Case | None] = {}
    for uint8, suffix in ((False, ""), (True, "-uint8")):
        cases[f"lerobot-{mode}{suffix}"] = lerobot_case(v3, args, mode=mode, uint8=uint8)
        if cases[f"lerobot-{mode}{suffix}"] is not None:
            cases[f"lancedb-{mode}{suffix}"] = lancedb_case(v3, args, mode=mode, uint8=uint8)
    return {name: case for name, case in cases.items() if case is not None}


def layout_cases(v3: Path, lrs: Path, args: argparse.Namespace, name: str, options: str) -> dict[str, Case]:
    """`--layout NAME="OPTIONS"`'s cases: `BatchLoader` (2 lanes, uint8, `channels_last`) over that reshard,
    the decode floor of its order, and, for a `--resize`, lerobot reading the source at full size and
    resizing in its transforms with the same filter."""
    root = build_layout(lrs.parent, v3, f"layout-{name}", options)
    cases = {
        f"lrs1-{name}-uint8-batchloader2-channels-last": reader_case(
            root, args, http=False, workers=0, loader="batch", channels_last=True, decode_threads=2
        ),
        f"decode-only-1consumer-{name}": reader_case(
            root, args, http=False, kind="decode-only", workers=0, decode_threads=2
        ),
    }
    resize = resize_of(options)
    if resize is not None and not args.no_lerobot:
        peer = lerobot_case(v3, args, mode="single", uint8=True, resize=resize)
        if peer is not None:
            cases[f"lerobot-single-uint8-resize-{name}"] = peer
    return cases


class Runs(NamedTuple):
    """What `run_cases` measured: each case's fastest run (with all its runs), and each round's load."""

    cases: dict[str, dict[str, Any]]
    rounds: list[dict[str, Any]]


def run_cases(cases: dict[str, Case], repeat: int) -> Runs:
    """Run every case `repeat` times, round-robin, and keep the fastest run of each.

    Round-robin, so that a stretch of someone else's load on this shared machine slows every case alike
    and the ratios between cases stay meaningful; the fastest run, because load only ever slows a run.
    Every figure of a case (CPU per sample and memory too) comes from that fastest run; the round,
    samples/s, CPU figures and load average (1, 5, 15 min, at its start) of all its runs are kept beside
    it, and the load average at the start and end of every round.
    """
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    failed: set[str] = set()
    rounds = []
    for round_ in range(1, repeat + 1):
        began = os.getloadavg()
        for name, case in cases.items():
            if name in failed:
                continue
            print(f"[{round_}/{repeat}] {name} ...", file=sys.stderr)
            load = os.getloadavg()
            try:
                result = run_child(case.argv, env=case.env)
            except RuntimeError as exc:
                if not case.optional:
                    raise
                print(f"  {name} failed, skipped from now on: {exc}", file=sys.stderr)
                failed.add(name)
                continue
            print(
                f"  {result['samples_per_s']:.1f} samples/s, {result['cpu_ms_per_sample']:.2f} CPU ms/sample "
                f"({result.get('steady_cpu_ms_per_sample') or 0:.2f} after warm-up), "
                f"first batch {result.get('first_batch_s')}, load average {load[0]:.2f}",
                file=sys.stderr,
            )
            check_transport(name, case, result)
            runs[name].append({**result, "round": round_, "load_average": load})
        rounds.append({"round": round_, "load_average_start": began, "load_average_end": os.getloadavg()})
    return Runs({name: best_run(found, cases[name]) for name, found in runs.items() if found}, rounds)


def check_transport(name: str, case: Case, result: dict[str, Any]) -> None:
    """The frames a case handed over are of the dtype its transport names."""
    expected = (case.settings or {}).get("transport")
    if expected is not None and result.get("frame_dtypes") != [expected]:
        raise SystemExit(
            f"Invalid frames of case {name} ({result.get('frame_dtypes')}). Expected {expected} frames."
        )


def best_run(found: list[dict[str, Any]], case: Case) -> dict[str, Any]:
    """A case's fastest run, with its transport, settings and a digest of all its runs."""
    best = {k: v for k, v in max(found, key=lambda r: r["samples_per_s"]).items() if k != "load_average"}
    keep = (
        "round",
        "samples_per_s",
        "cpu_ms_per_sample",
        "steady_cpu_ms_per_sample",
        "first_batch_s",
        "load_average",
    )
    best["runs"] = [{k: r.get(k) for k in keep} for r in found]
    if case.settings is not None:
        best["transport"] = case.settings["transport"]
        best["settings"] = case.settings
    return best


def same_transport_ratios(cases: dict[str, dict[str, Any]], baseline_kind: str) -> dict[str, Any]:
    """Per (mode, transport): every reader or peer case against the `baseline_kind` case ("lerobot" or
    "lancedb") of the same mode and transport, from the fastest runs and round by round. Never a ratio
    across transports."""
    out = {}
    for name, base in cases.items():
        key = base.get("settings", {})
        if key.get("kind") != baseline_kind:
            continue
        group = f"{key['mode']}_{key['transport']}"
        same = {
            n: ratios(c, base)
            for n, c in cases.items()
            if c.get("settings", {}).get("kind") in ("reader", "lerobot", "lancedb")
            and (c["settings"]["mode"], c["settings"]["transport"]) == (key["mode"], key["transport"])
        }
        out[group] = {"baseline": name, "transport": key["transport"], "cases": same}
    return out


def ratios(case: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """case / base: samples/s (fastest runs, then each round where both ran), CPU and memory."""
    by_round = {r["round"]: r["samples_per_s"] for r in base.get("runs", [])}
    return {
        "samples_per_s": case["samples_per_s"] / base["samples_per_s"],
        "samples_per_s_per_round": [
            r["samples_per_s"] / by_round[r["round"]] for r in case.get("runs", []) if r["round"] in by_round
        ],
        "cpu": base["cpu_ms_per_sample"] / case["cpu_ms_per_sample"],
        "pss": case["peak_tree_pss_mb"] / base["peak_tree_pss_mb"],
    }


def comparisons(cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ratios against lerobot and lerobot-lancedb, within a transport, and the labelled
    float32-baseline ones; none without a lerobot case."""
    if not any(c.get("settings", {}).get("kind") == "lerobot" for c in cases.values()):
        return {}
    return {
        "vs_lerobot_same_transport": same_transport_ratios(cases, "lerobot"),
        "vs_lancedb_same_transport": same_transport_ratios(cases, "lancedb"),
        "float32_baseline_uint8_vs_lerobot_float32": float32_baseline_ratios(cases),
    }


def float32_baseline_ratios(cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The benchmarks page's former baseline, labelled: uint8 cases against lerobot at its float32 class defaults
    (a ratio across transports, kept only to compare with older figures)."""
    out = {}
    for mode in MODES:
        base = cases.get(f"lerobot-{mode}")
        if base is None:
            continue
        out[mode] = {
            n: ratios(c, base)
            for n, c in cases.items()
            if c.get("settings", {}).get("kind") == "reader"
            and c["settings"]["mode"] == mode
            and c["settings"]["transport"] == "uint8"
        }
    return out


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
    parser.add_argument(
        "--recorded",
        type=Path,
        help="A local v3 dataset to measure instead of the generated sample (resharded once into "
        "--workdir/<its name>; "
        "--episodes, --cameras, --height and --width then come from it), e.g. one that lerobot's recorder "
        "wrote: scripts/lerobot/write_dataset.py.",
    )
    add_sample_options(parser)
    parser.add_argument("--batch-size", type=int, default=32, help="DataLoader batch size.")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers.")
    parser.add_argument(
        "--context",
        default="spawn",
        choices=["fork", "spawn", "forkserver"],
        help="DataLoader multiprocessing_context of every case.",
    )
    parser.add_argument(
        "--mixing-batch-sizes",
        default="8,32,64",
        help="Batch sizes at which the mixing of EpisodeStream's schedule is compared with a shuffle.",
    )
    parser.add_argument("--prefetch", type=int, default=8, help="prefetch_episodes of the main cases.")
    parser.add_argument("--latency-ms", type=float, default=30.0, help="Injected latency per HTTP request.")
    parser.add_argument(
        "--repeat", type=int, default=3, help="Rounds over all cases; each case reports its fastest run."
    )
    parser.add_argument(
        "--sweep", action="store_true", help="Also sweep pool size, prefetch and decode threads."
    )
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="Busy processes (each spinning on one core) running beside every case, for a shared CPU.",
    )
    parser.add_argument("--no-lerobot", action="store_true", help="Skip the lerobot comparison case.")
    parser.add_argument(
        "--no-hevc", action="store_true", help="Skip the cases on the HEVC re-encode (built once, ~1 min)."
    )
    parser.add_argument(
        "--layout",
        type=layout_parser(("lrs", "lrs-hevc")),
        action="append",
        default=[],
        metavar='NAME="OPTIONS"',
        help="Also the cases over `lrs reshard SOURCE OPTIONS` (repeatable): lrs1-NAME-uint8-batchloader2-"
        "channels-last, decode-only-1consumer-NAME and, with --resize WxH, lerobot-single-uint8-resize-NAME "
        "(lerobot at full size resizing in its transforms with the same filter).",
    )
    parser.add_argument(
        "--lerobot-python",
        type=Path,
        help="Python of the lerobot 0.6.1 reference venv [default: $LEROBOT_VENV].",
    )
    parser.add_argument(
        "--only",
        help="Run only these cases (comma-separated names, e.g. lrs1-single,lrs1-mixture-halves) and report "
        "their samples/s relative to the first.",
    )
    parser.add_argument("--run-case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    with busy_processes(args.busy):
        run(args)


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` processes spinning on the CPU (as a trainer's own process and other jobs would) while the
    block runs: every case then runs beside the same load."""
    spin = "while True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def run(args: argparse.Namespace) -> None:
    """The benchmark itself, as the command line asks."""
    if args.run_case:
        case = json.loads(args.run_case)
        runners = {"decode-only": run_decode_only_case, "loader-only": run_loader_only_case}
        runner = runners.get(case["kind"], run_reader_case)
        print(json.dumps(runner(case)))
        return

    v3, lrs = (
        recorded_dataset(args.workdir / args.recorded.name, args)
        if args.recorded
        else build_dataset(args.workdir, args)
    )
    planned: dict[str, Case] = {}
    for mode in MODES:
        # lerobot and lerobot-lancedb at float32 (their class defaults) and at uint8 (what
        # lerobot-train builds), and EpisodeStream at float32 and at uint8 with `reader.collate`
        # (convert on the GPU: x.float() / 255): compared only within a transport.
        if not args.no_lerobot:
            planned.update(peer_cases(v3, args, mode))
        planned[f"lrs1-{mode}"] = reader_case(lrs, args, http=False, mode=mode, uint8=False, collate=False)
        planned[f"lrs1-{mode}-uint8-collate"] = reader_case(lrs, args, http=False, mode=mode)
    # No worker processes: two decode threads in the trainer's process, nothing sent between processes.
    planned["lrs1-single-0workers"] = reader_case(
        lrs, args, http=False, uint8=False, collate=False, workers=0
    )
    planned["lrs1-single-uint8-collate-fork"] = reader_case(lrs, args, http=False, context="fork")
    # The loader designs compared, uint8: (b) a thread pipeline in the trainer's process (no worker
    # process; `decode_threads` threads decode, the trainer's thread assembles batches) and (c) the
    # same pipeline in one loader process per rank (one DataLoader worker, batches over shared memory).
    for threads in (2, 3):
        planned[f"lrs1-single-uint8-batchloader{threads}"] = reader_case(
            lrs, args, http=False, workers=0, loader="batch", decode_threads=threads
        )
        planned[f"lrs1-single-batchloader{threads}"] = reader_case(
            lrs,
            args,
            http=False,
            workers=0,
            loader="batch",
            uint8=False,
            collate=False,
            decode_threads=threads,
        )
        planned[f"lrs1-single-uint8-batchloader{threads}-channels-last"] = reader_case(
            lrs, args, http=False, workers=0, loader="batch", channels_last=True, decode_threads=threads
        )
        planned[f"lrs1-single-uint8-threads{threads}"] = reader_case(
            lrs, args, http=False, workers=0, decode_threads=threads
        )
        planned[f"lrs1-single-uint8-1worker-threads{threads}"] = reader_case(
            lrs, args, http=False, workers=1, decode_threads=threads
        )
    # The same episodes as a mixture of two sources (each half of the dataset): what mixing costs.
    half = args.episodes // 2
    planned["lrs1-mixture-halves"] = reader_case(
        [lrs, lrs],
        args,
        http=False,
        uint8=False,
        collate=False,
        episodes=[list(range(half)), list(range(half, args.episodes))],
    )
    planned["lrs1-http"] = reader_case(lrs, args, http=True)
    planned["v3-local"] = reader_case(v3, args, http=False)
    planned["decode-only"] = reader_case(lrs, args, http=False, kind="decode-only")
    # The floor of the cases without workers: one consumer's order (not two workers'), in 2 processes.
    planned["decode-only-1consumer"] = reader_case(
        lrs, args, http=False, kind="decode-only", workers=0, decode_threads=2
    )
    planned["loader-only"] = reader_case(
        lrs, args, http=False, kind="loader-only", uint8=False, collate=False
    )
    planned["loader-only-uint8-collate"] = reader_case(lrs, args, http=False, kind="loader-only")
    if not args.no_hevc:
        hevc = build_hevc(lrs.parent, v3)
        planned["lrs1-hevc"] = reader_case(hevc, args, http=False)
        planned["decode-only-hevc"] = reader_case(hevc, args, http=False, kind="decode-only")
    for name, options in args.layout:
        planned.update(layout_cases(v3, lrs, args, name, options))
    if args.only:
        names = args.only.split(",")
        unknown = sorted(set(names) - set(planned))
        if unknown:
            raise SystemExit(
                f"Invalid --only ({', '.join(unknown)}). Expected some of: {', '.join(planned)}."
            )
        cases, rounds = run_cases({n: planned[n] for n in names}, args.repeat)
        first = cases[names[0]]["samples_per_s"]
        results: dict[str, Any] = {
            "busy_processes": args.busy,
            "rounds": rounds,
            "transports": {n: c.get("transport") for n, c in cases.items()},
            "cases": cases,
            f"vs_{names[0]}": {n: c["samples_per_s"] / first for n, c in cases.items()},
            **comparisons(cases),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
        print(json.dumps({**summary(results), f"vs_{names[0]}": results[f"vs_{names[0]}"]}, indent=2))
        return
    cases, rounds = run_cases(planned, args.repeat)
    decode = cases["decode-only"]["samples_per_s"]

    def floor(name: str) -> float:
        """Decoding and the DataLoader's collate + transport each take their time per sample."""
        settings = cases[name].get("settings", {})
        loader = (
            "loader-only-uint8-collate"
            if settings.get("uint8") and settings.get("collate")
            else "loader-only"
        )
        if settings.get("workers") == 0:  # nothing crosses a process boundary; one consumer's order
            return cases.get("decode-only-1consumer", cases["decode-only"])["samples_per_s"]
        return 1 / (1 / decode + 1 / cases[loader]["samples_per_s"])

    readers = {n: c for n, c in cases.items() if n.startswith(("lrs1", "v3"))}
    results = {
        "settings": {
            "episodes": args.episodes,
            "frames": cases["lrs1-single"]["samples"],
            "cameras": args.cameras,
            "height": args.height,
            "width": args.width,
            "batch_size": args.batch_size,
            "workers": args.workers,
            "context": args.context,
            "latency_ms": args.latency_ms,
            "cpus": os.cpu_count(),
            "prefetch_factor": PREFETCH_FACTOR,
            "persistent_workers": PERSISTENT_WORKERS,
            "load_average": os.getloadavg(),
            "busy_processes": args.busy,
        },  # fmt: skip
        "rounds": rounds,
        "transports": {n: c.get("transport") for n, c in cases.items()},
        "cases": cases,
        "vs_decode_plus_loader": {n: c["samples_per_s"] / floor(n) for n, c in readers.items()},
        "mixing": mixing_table(lrs, args),
        **comparisons(cases),
    }
    if "lrs1-hevc" in cases:
        results["hevc"] = {
            "decode_cpu_ms_per_sample_hevc_minus_av1": cases["decode-only-hevc"]["cpu_ms_per_sample"]
            - cases["decode-only"]["cpu_ms_per_sample"],
            "vs_av1_samples_per_s": cases["lrs1-hevc"]["samples_per_s"]
            / cases["lrs1-single-uint8-collate"]["samples_per_s"],
        }
    if args.sweep:
        results["sweep"] = sweep(lrs, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if args.chart:
        chart(results, args.chart)
    print(json.dumps(summary(results), indent=2))


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """What the run prints: the load of every round, samples/s ratios within a transport (fastest runs
    and per round), the labelled float32-baseline ratios, the floors, the HEVC figures."""

    def speed(table: dict[str, Any]) -> dict[str, Any]:
        return {
            group: {
                "baseline": t["baseline"],
                **{n: [round(r["samples_per_s"], 2), [round(x, 2) for x in r["samples_per_s_per_round"]]]
                   for n, r in t["cases"].items()},
            }
            for group, t in table.items()
        }  # fmt: skip

    out: dict[str, Any] = {"rounds": results["rounds"]}
    for key in ("vs_lerobot_same_transport", "vs_lancedb_same_transport"):
        if key in results:
            out[key + " [fastest, per round]"] = speed(results[key])
    if "float32_baseline_uint8_vs_lerobot_float32" in results:
        out["float32_baseline_uint8_vs_lerobot_float32 (across transports)"] = {
            mode: {n: round(r["samples_per_s"], 2) for n, r in table.items()}
            for mode, table in results["float32_baseline_uint8_vs_lerobot_float32"].items()
        }
    return {**out, **{k: results[k] for k in ("vs_decode_plus_loader", "mixing", "hevc") if k in results}}


def mixing_table(lrs: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """EpisodeStream's mixing at its defaults (computed from its schedule: the order is a pure function
    of it) against a shuffled map-style dataset (a uniform permutation of every frame, as lerobot's
    DataLoader(shuffle=True) draws), at each batch size, with `--workers` workers and with none (one
    consumer per rank, as `reader.BatchLoader` reads)."""
    from reader import EpisodeStream

    lengths = EpisodeStream(lrs).lengths
    rows = []
    for batch_size in (int(b) for b in args.mixing_batch_sizes.split(",")):
        ours = mixing(stream_batches(str(lrs), batch_size, args.workers))
        alone = mixing(stream_batches(str(lrs), batch_size, 0))  # one consumer: BatchLoader's batches
        uniform = mixing(uniform_batches(lengths, batch_size, seed=0))
        rows.append(
            {
                "batch_size": batch_size,
                "episode_stream": ours,
                "episode_stream_batch_loader": alone,
                "uniform_shuffle": uniform,
            }
        )
    return rows


def sweep(lrs: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The lrs/1 HTTP case over pool sizes, prefetch depths, decode threads and samples built ahead."""
    settings = [
        *({"episode_pool_size": k, "prefetch_episodes": args.prefetch} for k in (4, 16, 64)),
        *({"prefetch_episodes": p} for p in (0, 2, 32)),
        *({"prefetch_episodes": args.prefetch, "decode_threads": t} for t in (0, 1, 4)),
        *({"prefetch_episodes": args.prefetch, "decode_ahead": a} for a in (2, 32)),
    ]
    results, _ = run_cases(
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
