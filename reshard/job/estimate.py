"""What a reshard will cost, said before it starts: episodes, frames and bytes, and how long a re-encode
will take here, from a short calibration encode on this machine.

A re-encode's time is the encoder's: every other step costs less than a tenth of it. So the estimate
encodes the first `CALIBRATION_FRAMES` frames of one unfinished episode per output frame size, on one
thread, with the job's own settings and code (`write_episode_video`), into a temp file that is then
deleted; the
job's encodes run one per worker on one thread each (`reshard.job.execute.reencode_jobs`), so

    seconds = sum over cameras (frames left x calibrated seconds per frame) / encodes at once

where the encodes at once are the workers, at most the CPUs this job may use and the episodes left. A
copy is bound by reading and writing, which no short trial predicts: its line says so and gives none.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cache.progress import human_bytes, plural
from reader.decode.depth import is_depth
from reader.format.v3 import frame_size
from reshard.job.execute import (
    ReshardOptions,
    Workspace,
    available_cpus,
    default_workers,
    list_files,
    local_copy,
    reencode_pixels,
    write_output_video,
)
from reshard.job.plan import DataTask, Task, VideoOutput, VideoTask
from reshard.source.model import V3Source

# Frames of a calibration encode: about 3 s of one core at 480x640 (x265 `fast`), enough for the
# encoder's start and its lookahead's drain to weigh about as much as in an episode of 100 frames.
CALIBRATION_FRAMES = 32


@dataclass(frozen=True)
class Calibration:
    """One camera's calibration encode.

    Attributes:
        camera: the camera key.
        episode: the source episode encoded.
        frames: frames encoded.
        seconds: wall time of the encode (decode, conversion, encoder, mux).
        size: the output frame size, `WxH`.
    """

    camera: str
    episode: int
    frames: int
    seconds: float
    size: str

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class JobEstimate:
    """What this call of a reshard will do, and for a re-encode how long it will take.

    Attributes:
        episodes: episodes of the output.
        episodes_left: episodes with an output not written yet (this part's, when a part runs).
        frames_left: camera frames not written yet.
        frames_reencoded: of those, the frames to re-encode (depth cameras and copies are not).
        source_bytes: bytes of the source files the tasks read; None where the store lists no sizes.
        video: the video mode.
        workers: worker processes.
        cpus: the CPUs this job may use (`available_cpus`).
        calibrations: the calibration encodes (none for a copy).
        seconds: the estimated wall time of the re-encode; None without one.
    """

    episodes: int
    episodes_left: int
    frames_left: int
    frames_reencoded: int
    source_bytes: int | None
    video: str
    workers: int
    cpus: int
    calibrations: tuple[Calibration, ...] = ()
    seconds: float | None = None

    def lines(self) -> list[str]:
        """The estimate for people, in two or three lines."""
        read = (
            "" if self.source_bytes is None else f", {human_bytes(self.source_bytes)} of source files to read"
        )
        lines = [
            f"plan: {plural(self.episodes_left, 'episode')} of {self.episodes} to write, "
            f"{self.frames_left:,} camera frames{read}; {plural(self.workers, 'worker')} on "
            f"{plural(self.cpus, 'CPU')}."
        ]
        if self.seconds is None:
            what = "no frame to re-encode" if self.video != "copy" else "a copy (no re-encode)"
            lines.append(f"estimate: {what}: bound by reading and writing, no time estimated.")
            return lines
        speeds = ", ".join(f"{c.camera} {c.frames_per_s:.1f} frames/s at {c.size}" for c in self.calibrations)
        lines.append(
            f"estimate: {self.frames_reencoded:,} frames to re-encode ({self.video}) in about "
            f"{duration(self.seconds)} here, from a calibration encode on one thread: {speeds}."
        )
        return lines


def duration(seconds: float) -> str:
    """`45 s`, `12 min`, `3 h 20 min` (minutes rounded)."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"


def estimate_job(
    source: V3Source,
    tasks: Sequence[Task],
    options: ReshardOptions,
    ws: Workspace,
    *,
    workers: int | None,
    data_sizes: dict[str, int],
    calibrate: bool = True,
) -> JobEstimate:
    """The estimate of running `tasks` (their outputs with a completion record in `ws` are done).

    Args:
        source: the (selected) source.
        tasks: the tasks this call runs.
        options: the job's options.
        ws: the job's workspace (read only: nothing is written to it).
        workers: worker processes (None: `default_workers`).
        data_sizes: the byte size of each source data file (`reshard.job.run.source_sizes`).
        calibrate: run the calibration encodes (else no time is estimated).
    """
    workers = default_workers(reencode_pixels(options, source, tasks)) if workers is None else workers
    videos = [v for t in tasks if isinstance(t, VideoTask) for v in t.videos if not ws.is_done(v.path)]
    data = [t for t in tasks if isinstance(t, DataTask) and not ws.is_done(t.path)]
    reencoding = options.video != "copy"
    encoded = [v for v in videos if reencoding and not is_depth(source.info.features[v.key])]
    source_files = {t.source for t in tasks if isinstance(t, VideoTask)}
    listed = list_files(source.remote, "videos") if source_files else {}
    video_bytes = [listed.get(rel) for rel in source_files]
    known = all(size is not None for size in video_bytes)
    cpus = available_cpus()
    estimate = JobEstimate(
        episodes=len(source.episodes),
        episodes_left=len({v.episode for v in videos} | {e for t in data for e in t.episodes}),
        frames_left=sum(v.length for v in videos),
        frames_reencoded=sum(v.length for v in encoded),
        source_bytes=(
            sum(data_sizes.get(rel, 0) for rel in {r for t in data for r in t.sources})
            + sum(s or 0 for s in video_bytes)
            if known
            else None
        ),
        video=options.video,
        workers=workers,
        cpus=cpus,
    )
    if not encoded or not calibrate:
        return estimate
    of_camera = _calibrate(source, tasks, options, encoded)
    calibrations = tuple(dict.fromkeys(of_camera[key] for key in sorted(of_camera)))
    per_camera: dict[str, int] = defaultdict(int)
    for video in encoded:
        per_camera[video.key] += video.length
    speed = {key: c.seconds / c.frames for key, c in of_camera.items()}
    at_once = max(1, min(workers, cpus, len(encoded)))
    seconds = sum(frames * speed[key] for key, frames in per_camera.items()) / at_once
    return JobEstimate(**{**estimate.__dict__, "calibrations": calibrations, "seconds": seconds})


def _calibrate(
    source: V3Source, tasks: Sequence[Task], options: ReshardOptions, encoded: list[VideoOutput]
) -> dict[str, Calibration]:
    """One calibration encode per output frame size (the encoder's cost follows the size, far more than
    the content): of the first unfinished episode of the first camera of that size, in a temp directory
    of its own (a remote source file is fetched there). Returns each camera's."""
    size_of = {key: _output_size(source, key, options) for key in {v.key for v in encoded}}
    first: dict[tuple[int, int] | None, VideoOutput] = {}
    for video in encoded:
        first.setdefault(size_of[video.key], video)
    file_of = {v.path: t.source for t in tasks if isinstance(t, VideoTask) for v in t.videos}
    by_size: dict[tuple[int, int] | None, Calibration] = {}
    with tempfile.TemporaryDirectory(prefix="lrs-calibrate-") as tmp:
        for size, video in first.items():
            with local_copy(source.remote, file_of[video.path], Path(tmp)) as src:
                started = time.perf_counter()
                out = str(Path(tmp) / f"{len(by_size)}.mp4")
                length = min(video.length, CALIBRATION_FRAMES)
                result = write_output_video(source, options, video, src, out, length=length, threads=1)
                seconds = time.perf_counter() - started
            by_size[size] = Calibration(
                video.key, video.episode, result.frames, seconds, f"{result.width}x{result.height}"
            )
    return {key: by_size[size] for key, size in size_of.items()}


def _output_size(source: V3Source, key: str, options: ReshardOptions) -> tuple[int, int] | None:
    """A camera's output (height, width): the resize's, else the one info.json declares (None: unknown)."""
    resize = options.resizing
    return (resize.height, resize.width) if resize else frame_size(source.info.features[key])
