"""Benchmark a whole re-encode job, `lrs reshard --video hevc|h264`, against the `ffmpeg` command line at the
same settings on the same cores, with lerobot-edit-dataset's `reencode_videos` beside it for scale.

On the source (`--source DIR`, e.g. a lerobot-recorded dataset from scripts/lerobot/write_dataset.py; default:
a generated sample), each round runs, in an order that alternates between rounds:

1. `lrs reshard SRC --video hevc` and `--video h264 --tune fastdecode`, with `--workers` left to its default
   (one per CPU, each encoder on one thread), as a user runs it; before each, `estimate_reshard` (what
   `--dry-run` prints) so that the estimate is checked against the real wall time;
2. the `ffmpeg` command line at the same codec, crf, preset, GOP and x26x params, one process per episode
   video of a copy reshard (the same frames), as many at a time as there are CPUs, each with the
   encoder's own threading (as a user would run it);
3. with `--lerobot-python PY`: `lerobot-edit-dataset --operation.type reencode_videos` to HEVC at its
   defaults with `--operation.num_workers` = CPUs (another crf: bytes and quality differ, see the report).

Wall and CPU seconds (CPU from the children's rusage), frames/s and frames/s per core, output bytes, and
the worst and mean PSNR of lrs's outputs against the source (`compare_episode_video`, every episode).
`--table` adds the speed/quality table of x265 presets and crfs at 1 thread (CPU seconds per frame, bytes
per frame, worst and mean PSNR) over the first `--table-episodes` episodes of each camera.

Usage: `.venv/bin/python scripts/bench/reencode.py [--out FILE] [--source DIR] [--rounds 1] [--table]`.
The x265 of PyAV's wheel and Debian's ffmpeg differ; both versions are in the report.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from reshard.demo.sample import write_sample
from reshard.job import ReshardOptions, estimate_reshard
from reshard.job.execute import available_cpus
from reshard.source.model import open_source
from reshard.video.encode import DEFAULT_CRF, DEFAULT_GOP, DEFAULT_PRESET, EncoderSettings
from reshard.video.write import compare_episode_video, write_episode_video

FFMPEG = "/usr/bin/ffmpeg"
LRS = [sys.executable, "-c", "from reshard.cli import main; main()"]
# The cases of a round: name -> (codec, tune).
LRS_CASES = {"hevc": ("hevc", None), "h264-fastdecode": ("h264", "fastdecode")}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(fn: Any) -> dict[str, float]:
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    fn()
    return {"wall_s": time.perf_counter() - t0, "cpu_s": _children_cpu_s() - cpu0}


def lrs_job(src: Path, out: Path, codec: str, tune: str | None) -> dict[str, Any]:
    """`estimate_reshard`, then `lrs reshard --video codec` as a user runs it (its own estimate and progress
    lines to a log file): wall, CPU, bytes, and the estimate and the progress line's ETA against the wall."""
    options = ReshardOptions(video=codec, tune=tune)  # type: ignore[arg-type]
    estimate = estimate_reshard(str(src), out, options=options, quiet=True)
    argv = [
        *LRS,
        "reshard",
        str(src),
        "--out",
        str(out),
        "--video",
        codec,
        *(["--tune", tune] if tune else []),
    ]
    log = out.with_suffix(".log")
    with log.open("w") as stderr:
        timed = _timed(lambda: subprocess.run(argv, check=True, stderr=stderr, stdout=subprocess.DEVNULL))
    return {
        **timed,
        "estimate_s": estimate.seconds,
        "estimate_vs_wall": (estimate.seconds or 0) / timed["wall_s"],
        "eta_after_60s": eta_check(log.read_text()),
        "workers": estimate.workers,
        "bytes": sum(p.stat().st_size for p in out.rglob("*.mp4")),
    }


_BAR = re.compile(r"^videos:.*?(\d+)/(\d+) \[([\d:]+)<([\d:]+|\?)")


def _seconds(clock: str) -> float:
    value = 0.0
    for part in clock.split(":"):
        value = value * 60 + float(part)
    return value


def eta_check(log: str) -> dict[str, float] | None:
    """The first progress line of the videos bar at or after 60 s: its ETA against the time that was left
    (the bar's last line's elapsed minus its own); None when the bar ended before a minute."""
    lines = [m for line in log.splitlines() if (m := _BAR.match(line)) and m[4] != "?"]
    if not lines:
        return None
    end = _seconds(lines[-1][3])
    for m in lines:
        elapsed = _seconds(m[3])
        if elapsed >= 60 and end > elapsed:
            left = end - elapsed
            return {
                "at_s": elapsed,
                "eta_s": _seconds(m[4]),
                "actual_left_s": left,
                "ratio": _seconds(m[4]) / left,
            }
    return None


def ffmpeg_command(src: Path, out: Path, codec: str, tune: str | None) -> list[str]:
    """The `ffmpeg` command at lrs's settings for `codec`, the encoder's threading left to it."""
    settings = EncoderSettings(codec, gop=DEFAULT_GOP, crf=DEFAULT_CRF[codec], tune=tune)
    options = settings.options()
    params = (
        ["-x265-params", options["x265-params"]]
        if codec == "hevc"
        else ["-x264-params", options["x264-params"]]
    )
    return [
        FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", str(src), "-an", "-map", "0:v:0",
        "-c:v", {"hevc": "libx265", "h264": "libx264"}[codec], "-preset", DEFAULT_PRESET[codec],
        "-crf", str(DEFAULT_CRF[codec]), "-g", str(DEFAULT_GOP), "-bf", "0", *(["-tune", tune] if tune else []),
        *params, "-pix_fmt", "yuv420p", "-movflags", "+faststart", "-y", str(out),
    ]  # fmt: skip


def ffmpeg_job(episodes: list[Path], out: Path, codec: str, tune: str | None, at_once: int) -> dict[str, Any]:
    """Every episode video through its own `ffmpeg`, `at_once` at a time."""
    out.mkdir(parents=True)
    targets = [out / f"{i:05d}.mp4" for i in range(len(episodes))]

    def run_all() -> None:
        with ThreadPoolExecutor(at_once) as pool:
            commands = [ffmpeg_command(s, t, codec, tune) for s, t in zip(episodes, targets, strict=True)]
            list(pool.map(lambda argv: subprocess.run(argv, check=True), commands))

    return {**_timed(run_all), "bytes": sum(t.stat().st_size for t in targets)}


def lerobot_job(python: str, src: Path, out: Path, workers: int) -> dict[str, Any]:
    """lerobot-edit-dataset's reencode_videos to HEVC at its defaults, `workers` processes."""
    argv = [
        python, "-m", "lerobot.scripts.lerobot_edit_dataset", "--repo_id=bench/src", f"--root={src}",
        "--new_repo_id=bench/out", f"--new_root={out}", "--operation.type=reencode_videos",
        "--operation.rgb_encoder.vcodec=hevc", f"--operation.num_workers={workers}",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    timed = _timed(lambda: subprocess.run(argv, check=True, env=env, capture_output=True))
    return {**timed, "bytes": sum(p.stat().st_size for p in out.rglob("*.mp4"))}


def quality(src: Path, out: Path) -> dict[str, float]:
    """Worst and mean PSNR of every episode video of an lrs output against the source."""
    source, output = open_source(str(src)), open_source(str(out))
    comparisons = [
        compare_episode_video(
            str(src / source.video_file(e, key)),
            e.video(key).from_timestamp,
            str(out / output.video_file(o, key)),
            length=e.length,
            fps=source.info.fps,
        )
        for e, o in zip(source.episodes, output.episodes, strict=True)
        for key in source.video_keys
    ]
    return {
        "psnr_min_db": min(c.psnr_min_db for c in comparisons),
        "psnr_mean_db": sum(c.psnr_mean_db for c in comparisons) / len(comparisons),
    }


def preset_table(
    src: Path, presets: list[str], crfs: list[int], episodes: int, work: Path
) -> list[dict[str, Any]]:
    """x265 at each preset and crf, one thread: CPU s per frame, bytes per frame, worst / mean PSNR over the
    first `episodes` episodes of every camera (interleaved: each episode runs every setting in turn)."""
    source = open_source(str(src))
    jobs = [(e, key) for e in source.episodes[:episodes] for key in source.video_keys]
    rows: dict[tuple[str, int], dict[str, Any]] = {
        (p, c): {"preset": p, "crf": c, "cpu_s": 0.0, "bytes": 0, "frames": 0, "psnr": []}
        for p in presets
        for c in crfs
    }
    for n, (episode, key) in enumerate(jobs):
        settings = list(rows) if n % 2 == 0 else list(rows)[::-1]
        for preset, crf in settings:
            row, target = rows[preset, crf], work / f"table-{preset}-{crf}.mp4"
            path = str(src / source.video_file(episode, key))
            start = episode.video(key).from_timestamp
            cpu0 = time.process_time()
            written = write_episode_video(
                path, str(target), from_timestamp=start, length=episode.length, fps=source.info.fps,
                mode="hevc", crf=crf, preset=preset, threads=1,
            )  # fmt: skip
            row["cpu_s"] += time.process_time() - cpu0
            row["bytes"] += written.bytes
            row["frames"] += written.frames
            compared = compare_episode_video(
                path, start, str(target), length=episode.length, fps=source.info.fps
            )
            row["psnr"].append((compared.psnr_min_db, compared.psnr_mean_db))
    table = []
    for row in rows.values():
        psnr = row.pop("psnr")
        table.append({
            **row,
            "frames_per_cpu_s": row["frames"] / row["cpu_s"],
            "bytes_per_frame": row["bytes"] / row["frames"],
            "psnr_min_db": min(p[0] for p in psnr),
            "psnr_mean_db": sum(p[1] for p in psnr) / len(psnr),
        })  # fmt: skip
    return table


def x26x_versions() -> dict[str, str | None]:
    """x265's version as PyAV links it and as the ffmpeg command line does (parsed from x265's info log)."""
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
    return {"x265_pyav": found[0] and found[0].group(1), "x265_ffmpeg_cli": found[1] and found[1].group(1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the JSON report here instead of stdout")
    parser.add_argument("--source", type=Path, help="a v3 dataset (default: a generated sample)")
    parser.add_argument("--episodes", type=int, default=8, help="episodes of the generated sample")
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--length", type=int, default=60, help="frames per episode of the generated sample")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--lerobot-python", help="lerobot's Python (scripts/lerobot/env.sh), for its re-encode"
    )
    parser.add_argument("--table", action="store_true", help="also the x265 preset and crf table")
    parser.add_argument("--presets", default="ultrafast,superfast,veryfast,faster,fast,medium")
    parser.add_argument("--crfs", default="21,23,25")
    parser.add_argument("--table-episodes", type=int, default=2)
    args = parser.parse_args()
    if not os.access(FFMPEG, os.X_OK):
        sys.exit(f"Invalid ffmpeg ({FFMPEG}). Expected the ffmpeg command line (apt install ffmpeg).")
    work = Path(tempfile.mkdtemp(prefix="bench-reencode-"))
    try:
        report = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    src = args.source or write_sample(
        work / "sample", episodes=args.episodes, cameras=args.cameras, height=args.height, width=args.width,
        min_length=args.length, max_length=args.length,
    )  # fmt: skip
    source = open_source(str(src))
    frames = sum(e.length for e in source.episodes) * len(source.video_keys)
    subprocess.run([*LRS, "reshard", str(src), "--out", str(work / "copy"), "--quiet"], check=True)
    episodes = sorted((work / "copy" / "videos").rglob("*.mp4"))
    cpus = available_cpus()
    cases: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        runs: list[tuple[str, Callable[[], dict[str, Any]]]] = []
        for name, (codec, tune) in LRS_CASES.items():
            runs.append((f"lrs {name}", partial(lrs_job, src, work / f"lrs-{name}-{r}", codec, tune)))
            cli = partial(ffmpeg_job, episodes, work / f"cli-{name}-{r}", codec, tune, cpus)
            runs.append((f"ffmpeg_cli {name}", cli))
        if args.lerobot_python:
            runs.append(
                (
                    "lerobot_edit hevc",
                    partial(lerobot_job, args.lerobot_python, src, work / f"lerobot-{r}", cpus),
                )
            )
        for name, fn in runs if r % 2 == 0 else runs[::-1]:
            result = fn()
            result.update(frames_per_s=frames / result["wall_s"], frames_per_cpu_s=frames / result["cpu_s"])
            cases.setdefault(name, []).append(result)
    ratios = {
        f"lrs/ffmpeg_cli wall, {name}": [
            a["wall_s"] / b["wall_s"]
            for a, b in zip(cases[f"lrs {name}"], cases[f"ffmpeg_cli {name}"], strict=True)
        ]
        for name in LRS_CASES
    }
    report: dict[str, Any] = {
        "source": {
            "path": str(args.source) if args.source else "generated sample",
            "episodes": len(source.episodes),
            "cameras": len(source.video_keys),
            "camera_frames": frames,
            "episode_videos": len(episodes),
        },
        "cpus": cpus,
        "versions": x26x_versions(),
        "cases": cases,
        "ratios": ratios,
        "quality_vs_source": {name: quality(src, work / f"lrs-{name}-0") for name in LRS_CASES},
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
    }
    if args.table:
        report["x265_table"] = preset_table(
            src, args.presets.split(","), [int(c) for c in args.crfs.split(",")], args.table_episodes, work
        )
    return report


if __name__ == "__main__":
    main()
