"""What checking every file at its first open costs the reader: `EpisodeStream` epochs over the reader
bench's lrs/1 sample read in place, with the per-process sha256 check (`cache.store.Verified`, the
default) and without it (the check patched out in this process), rounds interleaved; and the sha256 of
every video file alone, per MB and per sample.

    python scripts/bench/integrity.py --out bench/integrity.json [--height 480 --width 640 --cameras 3]

Prints one JSON object: per round, samples/s of both cases and their ratio; the hash's ms per MB and
microseconds per sample (every video hashed once per epoch, the most a consumer does); the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(ROOT))  # this checkout's lrs, after this folder (see scripts/README.md)


def epoch(lrs: Path, *, check: bool) -> dict[str, float]:
    """One epoch of `EpisodeStream` (no DataLoader workers, uint8): samples and seconds."""
    from cache import store
    from reader import EpisodeStream

    original = store.Verified.mismatch
    if not check:
        store.Verified.mismatch = lambda self, fd, sha256: None  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        samples = sum(1 for _ in EpisodeStream(str(lrs), return_uint8=True, seed=0))
        return {"samples": samples, "seconds": time.perf_counter() - started}
    finally:
        store.Verified.mismatch = original  # type: ignore[method-assign]


def hash_all(lrs: Path) -> dict[str, float]:
    """The sha256 of every video file of the dataset, once."""
    from cache.store import file_sha256

    videos = sorted((lrs / "videos").rglob("*.mp4"))
    started, size = time.perf_counter(), 0
    for path in videos:
        fd = os.open(path, os.O_RDONLY)
        try:
            file_sha256(fd)
            size += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return {"files": len(videos), "bytes": size, "seconds": time.perf_counter() - started}


def main() -> None:
    from bench_reader import add_sample_options, build_dataset

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="Also write the JSON here.")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "lrs-bench-integrity")
    add_sample_options(parser, episodes=24)
    parser.add_argument("--repeat", type=int, default=3, help="Interleaved rounds.")
    args = parser.parse_args()
    from _json_report import emit

    _v3, lrs = build_dataset(args.workdir / f"{args.cameras}x{args.height}x{args.width}", args)
    epoch(lrs, check=True)  # warm the page cache and imports
    rounds: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        load = os.getloadavg()[0]
        checked, unchecked, hashed = epoch(lrs, check=True), epoch(lrs, check=False), hash_all(lrs)
        rounds.append(
            {
                "checked_samples_per_s": checked["samples"] / checked["seconds"],
                "unchecked_samples_per_s": unchecked["samples"] / unchecked["seconds"],
                "ratio_checked_over_unchecked": unchecked["seconds"] / checked["seconds"],
                "hash_ms_per_mb": hashed["seconds"] * 1000 / (hashed["bytes"] / 2**20),
                "hash_us_per_sample": hashed["seconds"] * 1e6 / checked["samples"],
                "epoch_us_per_sample": checked["seconds"] * 1e6 / checked["samples"],
                "load_average_1m": load,
            }
        )
    result = {
        "dataset": {
            "episodes": args.episodes,
            "cameras": args.cameras,
            "frame": f"{args.height}x{args.width}",
            "video_files": hashed["files"],
            "video_bytes": hashed["bytes"],
            "samples": checked["samples"],
        },
        "rounds": rounds,
    }
    emit(result, args.out)


if __name__ == "__main__":
    main()
