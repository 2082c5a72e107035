"""What the stream's order costs torchcodec's decode, against reading each file front to back: prints JSON.

The benchmarks' decode-only floor (docs/benchmarks.md) decodes the frames one consumer emits, in the order it emits them
(`scripts/bench/bench_reader.py`). That order mixes episodes: each piece is read in runs of `RUN_FRAMES`
frames in a pseudo-random order, and once the pool can no longer be refilled and holds fewer pieces
than a batch, the remaining frames come one at a time in random order (`reader.schedule.emission`), so
that the last batches of an epoch are not runs of neighbouring frames. A frame after a jump costs a seek:
the decoder is flushed and decodes again from the keyframe before it. This script measures that cost
on a dataset, per camera frame, alternating over `--rounds`:

- `stream order`: the frames of one consumer's epoch (`EpisodeStream.schedule(0)`, as `BatchLoader`
  and `num_workers=0` read), in emission order, one torchcodec decoder per file;
- `file order`: the same frames, each file's read front to back, one file after another.

Also reported: the share of frames that follow a jump in their decoder (a seek), and of those the
share that jump backwards. One process, torch on one thread, every decoder on one FFmpeg thread (the
reader's settings); CPU is the process's user + system time.

With `--lanes`, also where `BatchLoader`'s CPU goes over the same epoch (2 lanes, `channels_last`, torch
on one thread as above):
the thread CPU its lanes spend in torchcodec's decode, in building the rest of each sample and in
copying samples into the batch, and the process's CPU outside the lanes, per sample. It times private
methods of `reader.runtime.pool` and `reader.decode.video` by wrapping them: a measurement, not an API.

With `--tail`, also one epoch of the same consumer through `EpisodeStream` itself (`num_workers=0`, no
decode threads, uint8), with its tail buffer (`reader.decode.tail`: the random tail decoded ahead in file
order) and without it: the process's CPU and the thread CPU in `DecodeCursor.get_frames_at`, per camera
frame, and the share of the frames torchcodec decodes that follow a jump in their decoder (`--tail-mb`
sets the buffer's size; default: the reader's).

    python scripts/bench/decode_order.py DATASET [--rounds 2] [--seed 0] [--epoch 0] [--batch-size 32]
        [--lanes] [--tail [--tail-mb MB]]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from _json_report import emit
from bench_reader import consumer_frames, cpu_seconds, decode_loop  # this folder: the floor's own pieces

Job = list[tuple[str, int]]  # (dataset-relative video path, frame index) per decoded frame, in order


def stream_order(root: Path, seed: int, epoch: int, batch_size: int) -> Job:
    """Every camera frame of one consumer's epoch, in the order the stream emits its samples (the
    stream's pool sized for `batch_size`, as in training)."""
    from reader import EpisodeStream

    stream = EpisodeStream(str(root), seed=seed, batch_size=batch_size, decode_threads=0)
    samples = consumer_frames(stream, stream.schedule(0), 0, epoch)
    return [(path, frame) for _, paths, frame in samples for path in paths]


def file_order(job: Job) -> Job:
    """The same frames, each file's in ascending order, files in the order they first appear."""
    first: dict[str, int] = {}
    for position, (path, _) in enumerate(job):
        first.setdefault(path, position)
    return sorted(job, key=lambda item: (first[item[0]], item[1]))


def jumps(job: Job) -> dict[str, float]:
    """The share of frames that are not their file's previous frame + 1, and of those the backward ones."""
    last: dict[str, int] = {}
    forward = backward = 0
    for path, frame in job:
        previous = last.get(path)
        if previous is not None and frame != previous + 1:
            if frame <= previous:
                backward += 1
            else:
                forward += 1
        last[path] = frame
    seeks = forward + backward
    return {
        "frames_after_a_jump": round(seeks / len(job), 4),
        "backward_share_of_jumps": round(backward / seeks, 4) if seeks else 0.0,
    }


def decode(root: Path, job: Job) -> float:
    """CPU milliseconds per frame to decode `job` in its order (the floor's `decode_loop`), from this
    process's CPU clock (nanoseconds; `os.times` counts 10 ms ticks, coarse for a small job)."""
    cpu = time.process_time()
    decode_loop(str(root), [([path], frame) for path, frame in job])
    return 1000 * (time.process_time() - cpu) / len(job)


def instrument() -> dict[str, float]:
    """Wrap the lanes' methods once so that each adds its thread CPU seconds to the returned dict."""
    import threading

    from reader.batch.fill import BatchFill
    from reader.decode.video import DecodeCursor
    from reader.runtime.pool import Consumer

    spent = {"decode": 0.0, "build": 0.0, "copy": 0.0, "lanes": 0.0}
    lock = threading.Lock()

    def timed(owner: Any, name: str, key: str) -> None:
        method = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                with lock:
                    spent[key] += time.thread_time() - began

        setattr(owner, name, wrapper)

    timed(DecodeCursor, "get_frames_at", "decode")
    timed(Consumer, "_build", "build")
    timed(BatchFill, "put", "copy")
    timed(Consumer, "_fill", "lanes")
    return spent


def lane_breakdown(root: Path, seed: int, batch_size: int, spent: dict[str, float]) -> dict[str, float]:
    """CPU ms per sample of one `BatchLoader` epoch (2 lanes, channels_last), split by where it goes
    (`spent`: what `instrument` returned)."""
    from reader import BatchLoader, EpisodeStream

    spent.update(dict.fromkeys(spent, 0.0))
    stream = EpisodeStream(str(root), seed=seed, batch_size=batch_size, return_uint8=True, decode_threads=2)
    cpu = cpu_seconds()
    samples = sum(len(batch["index"]) for batch in BatchLoader(stream, batch_size, channels_last=True))
    total = 1000 * (cpu_seconds() - cpu) / samples
    ms = {key: 1000 * value / samples for key, value in spent.items()}
    return {
        "total": round(total, 3),
        "decode": round(ms["decode"], 3),
        "rest_of_sample": round(ms["build"] - ms["decode"], 3),
        "copy_into_batch": round(ms["copy"], 3),
        "rest_of_lanes": round(ms["lanes"] - ms["build"] - ms["copy"], 3),
        "outside_lanes": round(total - ms["lanes"], 3),
    }


def reader_epoch(
    root: Path, seed: int, batch_size: int, budget: int, spent: dict[str, float]
) -> dict[str, float]:
    """CPU ms per camera frame of one epoch of consumer 0 through `EpisodeStream` with a tail buffer of
    `budget` bytes (0: none), in all and in the cursors' decode (`spent`: what `instrument` returned),
    and the share of torchcodec's decoded frames that follow a jump in their decoder."""
    import dataclasses

    from torchcodec.decoders import VideoDecoder

    from reader import EpisodeStream

    decoded: Job = []
    get_frames_at = VideoDecoder.get_frames_at

    def logged(self: VideoDecoder, indices: list[int]) -> Any:
        decoded.extend((str(id(self)), i) for i in indices)
        return get_frames_at(self, indices)

    spent.update(dict.fromkeys(spent, 0.0))
    stream = EpisodeStream(str(root), seed=seed, batch_size=batch_size, return_uint8=True, decode_threads=0)
    # the buffer's size set on the stream's options: a measurement, not an API
    stream._options = dataclasses.replace(stream.options, tail_buffer_bytes=budget)
    cameras = set(stream.catalog.info.video_keys)
    VideoDecoder.get_frames_at = logged  # type: ignore[method-assign,assignment]
    try:
        cpu = time.process_time()
        frames = sum(len(cameras.intersection(item)) for item in stream)
        cpu = time.process_time() - cpu
    finally:
        VideoDecoder.get_frames_at = get_frames_at  # type: ignore[method-assign]
    return {
        "cpu_ms": round(1000 * cpu / frames, 4),
        "decode_ms": round(1000 * spent["decode"] / frames, 4),
        "frames_after_a_jump": jumps(decoded)["frames_after_a_jump"],
    }


def default_dataset() -> Path:
    """The reader bench's lrs/1 sample with its default spec (`bench_reader.build_dataset`)."""
    import tempfile
    from types import SimpleNamespace

    from bench_reader import build_dataset

    spec = SimpleNamespace(episodes=48, min_length=40, max_length=120, cameras=2, height=240, width=320)
    return build_dataset(Path(tempfile.gettempdir()) / "lrs-bench-reader", spec)[1]  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "dataset",
        type=Path,
        nargs="?",
        help="An lrs/1 dataset (local directory) [default: the reader bench's sample, made if missing].",
    )
    parser.add_argument("--rounds", type=int, default=2, help="Rounds, both orders in each.")
    parser.add_argument("--seed", type=int, default=0, help="The stream's seed.")
    parser.add_argument("--epoch", type=int, default=0, help="The epoch whose order is decoded.")
    parser.add_argument("--batch-size", type=int, default=32, help="The stream's batch size (its pool).")
    parser.add_argument("--lanes", action="store_true", help="Also split BatchLoader's CPU per sample.")
    parser.add_argument(
        "--tail", action="store_true", help="Also the reader's epoch with its tail buffer and without."
    )
    parser.add_argument(
        "--tail-mb", type=int, help="With --tail: the tail buffer's MiB [default: the reader's, 256]."
    )
    parser.add_argument("--out", type=Path, help="Also write the JSON report here.")
    args = parser.parse_args()
    if args.dataset is None:
        args.dataset = default_dataset()

    import torch

    torch.set_num_threads(1)
    root = args.dataset.resolve()
    ordered = stream_order(root, args.seed, args.epoch, args.batch_size)
    jobs = {"stream order": ordered, "file order": file_order(ordered)}
    rounds: dict[str, list[float]] = {name: [] for name in jobs}
    from reader.decode.tail import TAIL_BUFFER_BYTES

    spent = instrument() if args.lanes or args.tail else {}
    lanes: list[dict[str, float]] = []
    tails: dict[str, list[dict[str, float]]] = {"buffer": [], "no buffer": []}
    load_before = os.getloadavg()
    began = time.perf_counter()
    for _ in range(args.rounds):
        for name, job in jobs.items():
            rounds[name].append(round(decode(root, job), 4))
        if args.lanes:
            lanes.append(lane_breakdown(root, args.seed, args.batch_size, spent))
        if args.tail:
            size = TAIL_BUFFER_BYTES if args.tail_mb is None else args.tail_mb * 2**20
            for name, budget in (("buffer", size), ("no buffer", 0)):
                tails[name].append(reader_epoch(root, args.seed, args.batch_size, budget, spent))
    mean = {name: sum(values) / len(values) for name, values in rounds.items()}
    emit(
        {
            "dataset": str(args.dataset),
            "batch_size": args.batch_size,
            "frames": len(ordered),
            "files": len({path for path, _ in ordered}),
            "stream_order": jumps(ordered),
            "cpu_ms_per_frame_by_round": rounds,
            "batchloader_cpu_ms_per_sample_by_round": lanes or None,
            "reader_cpu_ms_per_frame_by_round": tails if args.tail else None,
            "stream_over_file_order": round(mean["stream order"] / mean["file order"], 3),
            "seconds": round(time.perf_counter() - began, 1),
            "load_average": {"before": load_before, "after": os.getloadavg()},
        },
        args.out,
    )


if __name__ == "__main__":
    main()
