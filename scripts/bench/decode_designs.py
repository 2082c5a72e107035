"""Compare the decode designs considered for `EpisodeStream`, on the same files and the same pool order.

    python scripts/bench/decode_designs.py --out bench/decode_designs.json

One process, one FFmpeg thread per decoder, a pool of 16 per-episode videos x 2 cameras visited in the
reader's cyclic round order, at 240x320 and 480x640 (AV1, GOP 2, as lerobot writes). Designs:

- `random`: each emitted frame decoded by random access on an open decoder (the reader before 0.2);
- `runs-buffered`: each piece's frames in runs of 8; a run is decoded at once (`get_frames_at` of its 8
  indices) into a buffer the next 7 samples of the piece are served from;
- `runs-cursor`: the same order, one frame decoded per sample on the piece's open decoder, which reads
  forward (torchcodec skips the seek inside a GOP): no buffer (what `EpisodeStream` does);
- `runs-cursor-2threads`: the same, with 2 threads decoding the next samples (the reader's default).

Reported: decode ms per sample (2 cameras, wall clock, the fastest of `--repeat` interleaved rounds),
and the memory each design keeps per (piece, camera) beyond the open decoder: an open decoder's USS is
measured; a buffered run is 8 RGB frames.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(ROOT))  # this checkout's lrs, after this folder (see scripts/README.md)

RUN = 8
POOL = 16


def build(workdir: Path, height: int, width: int) -> Path:
    from reshard.demo.sample import write_sample
    from reshard.job.run import reshard

    out = workdir / f"{height}x{width}"
    if not (out / "lrs/meta/lrs/files.parquet").exists():
        write_sample(out / "v3", episodes=24, min_length=40, max_length=120, height=height, width=width)
        reshard(str(out / "v3"), out / "lrs", quiet=True)
    return out / "lrs"


def episodes(root: Path) -> list[list[str]]:
    from reader.format.catalog import Catalog

    catalog = Catalog.open(str(root))
    return [[str(root / v.path) for v in ref.videos] for ref in catalog.episodes]


def plan(
    lengths: list[int], order: Callable[[int, random.Random], list[int]], seed: int
) -> list[tuple[int, int]]:
    """(episode, frame) per sample: a pool of POOL pieces visited in one cyclic order per round."""
    rng = random.Random(seed)
    pool = list(range(min(POOL, len(lengths))))
    rng.shuffle(pool)
    frames = {p: order(lengths[p], rng) for p in pool}
    done, upcoming, out = dict.fromkeys(pool, 0), len(pool), []
    while pool:
        for p in list(pool):
            out.append((p, frames[p][done[p]]))
            done[p] += 1
            if done[p] == lengths[p]:
                pool.remove(p)
                if upcoming < len(lengths):
                    pool.insert(rng.randrange(len(pool) + 1), upcoming)
                    frames[upcoming], done[upcoming] = order(lengths[upcoming], rng), 0
                    upcoming += 1
    return out


def shuffled(n: int, rng: random.Random) -> list[int]:
    frames = list(range(n))
    rng.shuffle(frames)
    return frames


def in_runs(n: int, rng: random.Random) -> list[int]:
    runs = list(range(n // RUN))
    rng.shuffle(runs)
    return [r * RUN + i for r in runs for i in range(RUN)] + list(range(n // RUN * RUN, n))


def decoder(path: str) -> Any:
    from torchcodec.decoders import VideoDecoder

    return VideoDecoder(path, seek_mode="approximate", num_ffmpeg_threads=1)


def random_access(files: list[list[str]], samples: list[tuple[int, int]]) -> None:
    open_: dict[str, Any] = {}
    for episode, frame in samples:
        for path in files[episode]:
            d = open_.get(path) or open_.setdefault(path, decoder(path))
            d.get_frames_at(indices=[frame]).data  # noqa: B018


def runs_buffered(files: list[list[str]], samples: list[tuple[int, int]]) -> None:
    open_: dict[str, Any] = {}
    buffered: dict[int, tuple[int, list[Any]]] = {}
    for episode, frame in samples:
        run = frame // RUN
        if buffered.get(episode, (None,))[0] != run:
            batches = []
            for path in files[episode]:
                d = open_.get(path) or open_.setdefault(path, decoder(path))
                n = d.metadata.num_frames
                batches.append(d.get_frames_at(indices=list(range(run * RUN, min(n, run * RUN + RUN)))).data)
            buffered[episode] = (run, batches)
        [b[frame - run * RUN] for b in buffered[episode][1]]


def runs_cursor(files: list[list[str]], samples: list[tuple[int, int]], threads: int = 0) -> None:
    open_: dict[str, Any] = {}
    locks = {path: threading.Lock() for paths in files for path in paths}  # a decoder is not thread-safe

    def one(episode: int, frame: int) -> None:
        for path in files[episode]:
            with locks[path]:
                d = open_.get(path) or open_.setdefault(path, decoder(path))
                d.get_frames_at(indices=[frame]).data  # noqa: B018

    if not threads:
        for episode, frame in samples:
            one(episode, frame)
        return
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(one, e, f) for e, f in samples]:
            future.result()


DECODER_MB = """
import gc, json, sys, psutil
from torchcodec.decoders import VideoDecoder
paths = json.loads(sys.argv[1])
process = psutil.Process()
VideoDecoder(paths[0], seek_mode="approximate", num_ffmpeg_threads=1).get_frames_at(indices=[1])  # warm up
gc.collect()
before = process.memory_full_info().uss
kept = [VideoDecoder(p, seek_mode="approximate", num_ffmpeg_threads=1) for p in paths]
for d in kept:
    d.get_frames_at(indices=[1])
gc.collect()
print((process.memory_full_info().uss - before) / len(kept) / 2**20)
"""


def decoder_mb(files: list[list[str]]) -> float:
    """USS of an open decoder that has decoded a frame, measured in a fresh process."""
    paths = [path for paths in files for path in paths]
    out = subprocess.run(
        [sys.executable, "-c", DECODER_MB, json.dumps(paths)], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/decode_designs.json", help="JSON results.")
    parser.add_argument("--repeat", type=int, default=3, help="Interleaved rounds; the fastest run counts.")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "lrs-bench-designs", help="Samples."
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    designs: dict[str, tuple[Callable[..., None], Callable[[int, random.Random], list[int]]]] = {
        "random": (random_access, shuffled),
        "runs-buffered": (runs_buffered, in_runs),
        "runs-cursor": (runs_cursor, in_runs),
        "runs-cursor-2threads": (lambda f, s: runs_cursor(f, s, threads=2), in_runs),
    }
    results: dict[str, Any] = {}
    for height, width in ((240, 320), (480, 640)):
        root = build(args.workdir, height, width)
        files = episodes(root)
        lengths = [decoder(paths[0]).metadata.num_frames for paths in files]
        best: dict[str, float] = {}
        for round_ in range(args.repeat):
            for name, (run, order) in designs.items():
                samples = plan(lengths, order, seed=round_)
                began = time.perf_counter()
                run(files, samples)
                ms = 1000 * (time.perf_counter() - began) / len(samples)
                best[name] = min(best.get(name, ms), ms)
                print(f"{height}x{width} [{round_ + 1}] {name}: {ms:.3f} ms/sample", file=sys.stderr)
        frame_mb = 3 * height * width / 2**20
        results[f"{height}x{width}"] = {
            "ms_per_sample": best,
            "vs_random": {n: best["random"] / v for n, v in best.items()},
            "decoder_mb": decoder_mb(files),
            "buffered_run_mb": RUN * frame_mb,
            "frame_mb": frame_mb,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
