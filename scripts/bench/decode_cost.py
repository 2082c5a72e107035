"""What decoding costs in each layout of one dataset, the source as recorded and its reshards: prints JSON.

For a local v3 source (best: one that lerobot's recorder wrote at a real size, `scripts/lerobot/write_dataset.py`)
and its `lrs reshard`s, each a named layout, made once into `--workdir` and reused while the source and
options are the same:

- `source`: the v3 files as recorded (lerobot: AV1, many episodes per file);
- `copy`: `--video copy`, the lossless split, one file per episode and camera;
- `hevc`, `h264`: `--video hevc`, `--video h264`, lrs's re-encodes at their defaults;
- every `--layout NAME="OPTIONS"`: `lrs reshard` with those options, e.g.
  `--layout fastdecode="--video h264 --tune fastdecode"` or `--layout hevc-g8="--video hevc --gop 8"`.

Per layout: CPU ms per decoded camera frame in two orders over the same frames, `stream order` (one consumer's epoch of `EpisodeStream(seed, batch_size)` with `num_workers=0`, as
`BatchLoader` reads it, each frame decoded where it is emitted) and `file order` (each file front to
back); bytes of video per camera frame; and for every layout but the source, each episode's frames
decoded against the source's: the worst frame's PSNR (RGB, 8 bit; null when every frame is identical).
The cases interleave: each of `--rounds` rounds decodes every (layout, order) once, in turn forward and
backward, and records `os.getloadavg()` before and after; each layout reports the median over rounds,
and every round is kept. One process, torch on one thread, one torchcodec decoder per file on one FFmpeg
thread, lerobot's approximate seek mode (the reader's settings); CPU is the process's CPU clock.

    python scripts/bench/decode_cost.py [SOURCE] [--rounds 3] [--layout NAME="OPTIONS"] ... [--out FILE]

Without SOURCE it measures the reader bench's generated AV1 sample (`--episodes`, `--cameras`, ...: 48
episodes of 40-120 frames, 2 cameras at 240x320), made in `--workdir`. The real-size sources and how to
write them: `scripts/lerobot/write_dataset.py`, e.g.

    python scripts/bench/decode_cost.py ~/.cache/lrs/bench-data/recorded-3x480x640 --rounds 3 \
        --out bench/decode-cost-3x480x640.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _json_report import emit
from _layouts import layout_parser
from bench_reader import (
    add_sample_options,
    build_dataset,
    consumer_episodes,
    decode_loop,
    reshard_once,
    source_spec,
)  # this folder

ORDERS = ("stream order", "file order")
BUILT_IN = {"copy": "--video copy", "hevc": "--video hevc", "h264": "--video h264"}

EpisodeFrames = list[tuple[int, int]]  # (episode index, frame in episode), in order
Job = list[tuple[str, int]]  # (dataset-relative video path, frame index) per decoded frame, in order


@dataclass(frozen=True)
class Layout:
    """One layout of the source's episodes: where it is and the `lrs reshard` options that made it
    (None for the source itself)."""

    name: str
    root: Path
    options: tuple[str, ...] | None


def make_layouts(source: Path, workdir: Path, extra: list[tuple[str, str]]) -> list[Layout]:
    """The source and its reshards, each made unless `workdir` holds it for the same source and options."""
    spec = source_spec(source)
    layouts = [Layout("source", source, None)]
    for name, options in [*BUILT_IN.items(), *extra]:
        argv = shlex.split(options)
        try:
            root = reshard_once(source, workdir / name, argv, f"{spec}\n{argv}")
        except subprocess.CalledProcessError as exc:  # its own message is on stderr above
            raise SystemExit(
                f"Error: layout {name}: lrs reshard {options} exited {exc.returncode}."
            ) from None
        layouts.append(Layout(name, root, tuple(argv)))
    return layouts


def stream_order(source: Path, seed: int, epoch: int, batch_size: int) -> EpisodeFrames:
    """(episode, frame) of every sample of one consumer's epoch (`EpisodeStream.schedule(0)`, the stream's
    pool sized for `batch_size`), in emission order: a pure function of the episode lengths, so the same
    order for every layout."""
    from reader import EpisodeStream

    stream = EpisodeStream(str(source), seed=seed, batch_size=batch_size, decode_threads=0)
    return [
        (ref.episode_index, frame)
        for _, ref, frame in consumer_episodes(stream, stream.schedule(0), 0, epoch)
    ]


def camera_job(layout: Layout, order: EpisodeFrames) -> tuple[Job, dict[str, Any]]:
    """`order`'s camera frames in `layout`'s files (each frame's index in its file), and what the layout
    holds: its codecs, video bytes and camera frames."""
    from reader import EpisodeStream

    catalog = EpisodeStream(str(layout.root)).catalog
    refs = {ref.episode_index: ref for ref in catalog.episodes}
    fps = catalog.info.fps
    # A file's frame shown at `from_timestamp + i / fps` is its frame round(from_timestamp * fps) + i, as
    # the reader's decode rounds a timestamp to an index.
    starts = {
        (ref.episode_index, v.path): round(v.from_timestamp * fps)
        for ref in refs.values()
        for v in ref.videos
    }
    job = [
        (v.path, starts[episode, v.path] + frame) for episode, frame in order for v in refs[episode].videos
    ]
    files = {v.path for ref in refs.values() for v in ref.videos}
    frames = sum(ref.length * len(ref.videos) for ref in refs.values())
    video_bytes = sum((layout.root / path).stat().st_size for path in files)
    codecs = sorted(
        {
            str(catalog.info.features[key].get("info", {}).get("video.codec"))
            for key in catalog.info.video_keys
        }
    )
    held = {"codecs": codecs, "files": len(files), "camera_frames": frames, "video_bytes": video_bytes}
    return job, held


def psnr_vs_source(source: Layout, layout: Layout) -> dict[str, Any]:
    """Every episode and camera of `layout` decoded against the source's frames: the worst frame's PSNR
    (None when every frame is identical), the mean of the episodes' PSNRs, and what does not match."""
    from reader import EpisodeStream
    from reshard.video.compare import compare_episode_video
    from reshard.video.resize import Resize

    src, out = (EpisodeStream(str(x.root)).catalog for x in (source, layout))
    # A resized layout is held to the source scaled as the reshard scaled it (what `lrs verify --against` does).
    recorded = json.loads((layout.root / "meta" / "lrs" / "layout.json").read_text())
    resize = Resize.of_params(recorded.get("params") or {})
    outs = {ref.episode_index: ref for ref in out.episodes}
    results = []
    for ref in src.episodes:
        for v, w in zip(ref.videos, outs[ref.episode_index].videos, strict=True):
            compared = compare_episode_video(
                str(source.root / v.path),
                v.from_timestamp,
                str(layout.root / w.path),
                length=ref.length,
                fps=src.info.fps,
                episode=ref.episode_index,
                camera=v.key,
                resize=resize,
            )
            results.append(compared)
    finite = [r for r in results if not r.identical]
    return {
        "episode_videos": len(results),
        "identical": len(results) - len(finite),
        "psnr_min_db": round(min(r.psnr_min_db for r in finite), 2) if finite else None,
        "psnr_mean_db": round(statistics.fmean(r.psnr_mean_db for r in finite), 2) if finite else None,
        "problems": [p for r in results for p in r.problems][:5],
    }


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


def measure(layouts: list[Layout], jobs: dict[str, dict[str, Job]], rounds: int) -> list[dict[str, Any]]:
    """Every (layout, order) once per round, in turn forward and backward (so that a load that rises or
    falls through the run weighs on every case alike); CPU ms per frame."""
    cases = [(layout.name, order) for layout in layouts for order in ORDERS]
    roots = {layout.name: layout.root for layout in layouts}
    done = []
    for number in range(rounds):
        ran = cases if number % 2 == 0 else cases[::-1]
        load_before = os.getloadavg()
        ms: dict[str, dict[str, float]] = {name: {} for name in roots}
        for name, order in ran:
            ms[name][order] = round(decode(roots[name], jobs[name][order]), 4)
        done.append(
            {
                "load_average": {"before": load_before, "after": os.getloadavg()},
                "cases_in_order": [list(case) for case in ran],
                "cpu_ms_per_frame": ms,
            }
        )
    return done


def summary(
    name: str, rounds: list[dict[str, Any]], jobs: dict[str, Job], held: dict[str, Any]
) -> dict[str, Any]:
    """One layout's row: median CPU ms per frame by order over the rounds, bytes per camera frame, the
    seeks of the stream order (`jumps`: a source file holding many episodes seeks more)."""
    median = {
        order: round(statistics.median(r["cpu_ms_per_frame"][name][order] for r in rounds), 4)
        for order in ORDERS
    }
    return {
        "cpu_ms_per_frame": median,
        "stream_over_file_order": round(median["stream order"] / median["file order"], 3),
        "bytes_per_frame": round(held["video_bytes"] / held["camera_frames"], 1),
        "decoded_frames_per_order": len(jobs["stream order"]),
        "stream_order_jumps": jumps(jobs["stream order"]),
        **held,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "source",
        type=Path,
        nargs="?",
        help="A local v3 dataset [default: the reader bench's generated sample, made in --workdir if missing].",
    )
    parser.add_argument(
        "--layout",
        type=layout_parser(("source", *BUILT_IN)),
        action="append",
        default=[],
        metavar='NAME="OPTIONS"',
        help="Also a layout made by `lrs reshard SOURCE --out DIR OPTIONS` (repeatable).",
    )
    parser.add_argument("--rounds", type=int, default=3, help="Rounds, every layout and order in each.")
    parser.add_argument("--seed", type=int, default=0, help="The stream's seed.")
    parser.add_argument("--epoch", type=int, default=0, help="The epoch whose order is decoded.")
    parser.add_argument("--batch-size", type=int, default=32, help="The stream's batch size (its pool).")
    parser.add_argument(
        "--no-psnr", action="store_true", help="Skip comparing each layout's frames with the source's."
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "lrs-bench-decode-cost",
        help="Where the layouts (and the generated sample) are made, kept for the next run.",
    )
    sample = parser.add_argument_group("the generated sample (without SOURCE)")
    add_sample_options(sample)
    parser.add_argument("--out", type=Path, help="Also write the JSON report here.")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"Invalid --rounds ({args.rounds}). Expected at least 1.")
    names = [name for name, _ in args.layout]
    if len(set(names)) != len(names):
        parser.error(f"Invalid --layout names ({', '.join(names)}). Expected each name once.")

    import torch

    torch.set_num_threads(1)
    began = time.perf_counter()
    source = (args.source or build_dataset(args.workdir / "sample", args)[0]).resolve()
    layouts = make_layouts(source, args.workdir / f"{source.name}-layouts", args.layout)
    order = stream_order(source, args.seed, args.epoch, args.batch_size)
    jobs, held = {}, {}
    for layout in layouts:
        job, held[layout.name] = camera_job(layout, order)
        jobs[layout.name] = {"stream order": job, "file order": file_order(job)}
    rounds = measure(layouts, jobs, args.rounds)
    table = {
        layout.name: summary(layout.name, rounds, jobs[layout.name], held[layout.name]) for layout in layouts
    }
    for layout in layouts[1:]:
        table[layout.name]["options"] = list(layout.options or ())
        table[layout.name]["psnr_vs_source"] = None if args.no_psnr else psnr_vs_source(layouts[0], layout)
    emit(
        {
            "source": str(source),
            "episodes": len({episode for episode, _ in order}),
            "samples": len(order),
            "camera_frames": len(jobs["source"]["stream order"]),
            "stream_order": {"seed": args.seed, "epoch": args.epoch, "batch_size": args.batch_size},
            "layouts": table,
            "rounds": rounds,
            "cpus": os.cpu_count(),
            "seconds": round(time.perf_counter() - began, 1),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
