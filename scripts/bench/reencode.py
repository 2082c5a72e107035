"""Benchmark the H.265 re-encode of `reshard.video.write` against the `ffmpeg` command line.

Generates an AV1 sample dataset (lerobot's layout, 240x320, 2 cameras, 20 episodes by default), then:

1. re-encodes every (episode, camera) with `write_episode_video(mode="hevc", threads=1)` and with
   `/usr/bin/ffmpeg` (libx265, same crf / preset / GOP / no B-frames, one thread, `-ss` seek on the same
   episode), interleaved episode by episode so that background load hits both alike; reports frames/s,
   wall and CPU time and our overhead ratio (target: at most 1.10);
2. runs the same re-encodes through a `ProcessPoolExecutor` with 1 and with 2 workers (speed-up);
3. reports output bytes against the source's, PSNR against the source, and the lossless copy's speed.

Usage: `.venv/bin/python scripts/bench/reencode.py [--out FILE] [--episodes 20] [--height 240] ...`.
The JSON goes to stdout (or FILE). The two x265 builds differ (PyAV's wheel vs Debian's), so the ratio
measures the library version too; both versions are in the report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reshard.demo.sample import write_sample
from reshard.source.model import open_source
from reshard.video.write import (
    DEFAULT_CRF,
    DEFAULT_GOP,
    DEFAULT_PRESET,
    EncoderSettings,
    compare_episode_video,
    probe_video,
    write_episode_video,
)

FFMPEG = "/usr/bin/ffmpeg"


@dataclass(frozen=True)
class Task:
    """One (episode, camera) to re-encode."""

    src: str
    from_timestamp: float
    length: int
    fps: float
    out: str
    crf: int
    preset: str
    gop: int


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def ours(task: Task, out: str | None = None) -> int:
    """Re-encode with `write_episode_video`; returns the output size."""
    return write_episode_video(
        task.src,
        out or task.out,
        from_timestamp=task.from_timestamp,
        length=task.length,
        fps=task.fps,
        mode="hevc",
        gop=task.gop,
        crf=task.crf,
        preset=task.preset,
        threads=1,
    ).bytes


def ffmpeg_command(task: Task, out: str) -> list[str]:
    """The `ffmpeg` command encoding the same episode with the same x265 settings, one thread."""
    encoder = EncoderSettings("hevc", gop=task.gop, crf=task.crf, preset=task.preset, threads=1)
    params = encoder.options()["x265-params"]
    return [
        FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "error",
        "-threads", "1", "-ss", f"{task.from_timestamp:.6f}", "-i", task.src,
        "-frames:v", str(task.length), "-an", "-map", "0:v:0",
        "-c:v", "libx265", "-preset", task.preset, "-crf", str(task.crf), "-g", str(task.gop), "-bf", "0",
        "-x265-params", params, "-pix_fmt", "yuv420p", "-threads", "1",
        "-movflags", "+faststart", "-y", out,
    ]  # fmt: skip


def run_ffmpeg(task: Task, out: str) -> int:
    subprocess.run(ffmpeg_command(task, out), check=True)
    return os.path.getsize(out)


def compare_interleaved(tasks: list[Task], ffmpeg_dir: Path) -> dict[str, Any]:
    """Ours and ffmpeg's, one episode each in turn (alternating who goes first)."""
    totals = {name: {"wall_s": 0.0, "cpu_s": 0.0, "bytes": 0} for name in ("ours", "ffmpeg_cli")}
    frames = sum(t.length for t in tasks)
    for n, task in enumerate(tasks):
        runs = [
            ("ours", resource.RUSAGE_SELF, lambda t=task: ours(t)),
            (
                "ffmpeg_cli",
                resource.RUSAGE_CHILDREN,
                lambda t=task: run_ffmpeg(t, str(ffmpeg_dir / Path(t.out).name)),
            ),
        ]
        for name, who, fn in runs if n % 2 == 0 else runs[::-1]:
            cpu0, t0 = _cpu_s(who), time.perf_counter()
            size = fn()
            totals[name]["wall_s"] += time.perf_counter() - t0
            totals[name]["cpu_s"] += _cpu_s(who) - cpu0
            totals[name]["bytes"] += size
    for total in totals.values():
        total["frames_per_s"] = frames / total["wall_s"]
        total["frames_per_cpu_s"] = frames / total["cpu_s"]
    ffmpeg_frames = sum(probe_video(str(ffmpeg_dir / Path(t.out).name)).frames for t in tasks)
    return {
        **totals,
        "ffmpeg_cli_frames_written": ffmpeg_frames,
        "overhead_wall_ratio": totals["ours"]["wall_s"] / totals["ffmpeg_cli"]["wall_s"],
        "overhead_cpu_ratio": totals["ours"]["cpu_s"] / totals["ffmpeg_cli"]["cpu_s"],
    }


def pool_run(tasks: list[Task], workers: int) -> float:
    """Wall time of all re-encodes through a process pool (pool start-up included)."""
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(ours, tasks, chunksize=1))
    return time.perf_counter() - t0


def copy_run(tasks: list[Task], out_dir: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    for task in tasks:
        write_episode_video(
            task.src,
            str(out_dir / Path(task.out).name),
            from_timestamp=task.from_timestamp,
            length=task.length,
            fps=task.fps,
            mode="copy",
        )
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "frames_per_s": sum(t.length for t in tasks) / wall}


def quality(tasks: list[Task]) -> dict[str, float]:
    comparisons = [
        compare_episode_video(t.src, t.from_timestamp, t.out, length=t.length, fps=t.fps) for t in tasks
    ]
    return {
        "psnr_min_db": min(c.psnr_min_db for c in comparisons),
        "psnr_mean_db": sum(c.psnr_mean_db for c in comparisons) / len(comparisons),
        "all_pass_30db": all(c.passes(min_psnr_db=30.0) for c in comparisons),
    }


def x265_versions() -> dict[str, str | None]:
    """x265's version as linked by PyAV and by the ffmpeg command line (parsed from x265's info log)."""
    pattern = re.compile(r"HEVC encoder version (\S+)")
    probe = (
        "import av, numpy as np\n"
        "with av.open('/dev/null', 'w', format='mp4') as c:\n"
        "    s = c.add_stream('libx265', rate=30, options={'x265-params': 'log-level=info'})\n"
        "    s.width, s.height, s.pix_fmt = 64, 64, 'yuv420p'\n"
        "    s.encode(av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format='rgb24'))\n"
    )
    pyav = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    cli = subprocess.run(
        [FFMPEG, "-hide_banner", "-f", "lavfi", "-i", "color=size=64x64", "-frames:v", "1", "-c:v", "libx265",
         "-f", "null", "-"], capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = [pattern.search(p.stderr) for p in (pyav, cli)]
    return {"pyav": found[0] and found[0].group(1), "ffmpeg_cli": found[1] and found[1].group(1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the JSON report here instead of stdout")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--min-length", type=int, default=30)
    parser.add_argument("--max-length", type=int, default=60)
    parser.add_argument("--crf", type=int, default=DEFAULT_CRF["hevc"])
    parser.add_argument("--preset", default=DEFAULT_PRESET["hevc"])
    parser.add_argument("--gop", type=int, default=DEFAULT_GOP)
    parser.add_argument("--workdir", type=Path, help="keep the sample and outputs here (default: a temp dir)")
    args = parser.parse_args()
    if not os.access(FFMPEG, os.X_OK):
        sys.exit(f"Invalid ffmpeg ({FFMPEG}). Expected the ffmpeg command line (apt install ffmpeg).")

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-reencode-"))
    try:
        report = run(args, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    started, load_before = time.perf_counter(), os.getloadavg()
    root = write_sample(
        work / "sample",
        episodes=args.episodes,
        cameras=args.cameras,
        height=args.height,
        width=args.width,
        min_length=args.min_length,
        max_length=args.max_length,
    )
    source = open_source(str(root))
    for name in ("ours", "ffmpeg", "copy"):
        (work / name).mkdir(exist_ok=True)
    tasks = [
        Task(
            str(root / source.video_file(e, key)),
            e.video(key).from_timestamp,
            e.length,
            source.info.fps,
            str(work / "ours" / f"ep{e.episode_index:03d}-cam{cam}.mp4"),
            args.crf,
            args.preset,
            args.gop,
        )
        for e in source.episodes
        for cam, key in enumerate(source.video_keys)
    ]
    source_bytes = sum((root / f).stat().st_size for f in source.video_files())
    head_to_head = compare_interleaved(tasks, work / "ffmpeg")
    pool_1, pool_2 = pool_run(tasks, 1), pool_run(tasks, 2)
    return {
        "sample": {
            "episodes": args.episodes,
            "cameras": args.cameras,
            "size": f"{args.width}x{args.height}",
            "codec": "av1",
            "fps": source.info.fps,
            "episode_videos": len(tasks),
            "frames": sum(t.length for t in tasks),
            "source_bytes": source_bytes,
        },
        "settings": {
            "codec": "hevc",
            "crf": args.crf,
            "preset": args.preset,
            "gop": args.gop,
            "bframes": 0,
            "threads": 1,
            "x265": x265_versions(),
        },
        "reencode": head_to_head,
        "pool": {
            "workers_1_wall_s": pool_1,
            "workers_2_wall_s": pool_2,
            "speedup_2_vs_1": pool_1 / pool_2,
            "cpus": os.cpu_count(),
        },
        "bytes_vs_source": {
            "ours": head_to_head["ours"]["bytes"] / source_bytes,
            "ffmpeg_cli": head_to_head["ffmpeg_cli"]["bytes"] / source_bytes,
        },
        "quality_vs_source": quality(tasks),
        "copy": copy_run(tasks, work / "copy"),
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "total_s": time.perf_counter() - started,
    }


if __name__ == "__main__":
    main()
