"""What `lrs verify --report` keeps while verify compares the episode videos with their source.

Nothing is decoded for it: the comparison's own frames pass through `VideoLook` (the `observe` of
`reshard.video.compare.compare_frames`), which keeps the worst frame of one episode video and clocks the
CPU its two decoders spend. A job keeps each camera's `keep` worst frames, one per episode at most, as
small PNGs beside their source frame and the amplified difference (`WorstFrames`); the parent merges the
jobs' frames as they come back, so memory holds `keep` frames per camera whatever the number of episodes
or workers, and the frames kept are the same for any number of workers. `camera_looks` sums it all per
camera for the page (`reshard.verify.report_page`).
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from PIL import Image

from reshard.source.model import V3Source
from reshard.video.compare import ColourFit

T = TypeVar("T")

# The difference image shows |output - source| per channel times this: a re-encode's errors of a few
# code values become visible.
AMPLIFY = 4
# A kept frame longer than this on a side is scaled down (box filter) to it: a report of many cameras
# stays a few MB.
MAX_SIDE = 640
REPORT_WORST_FRAMES = 3
"""The worst frames `lrs verify --report` keeps per camera (`verify(worst_frames=...)`)."""


@dataclass(frozen=True)
class WorstFrame:
    """One of a camera's worst frames: where it is, its error, and three PNGs of the same size.

    Attributes:
        episode, key, frame: the episode, the camera and the frame index in the episode.
        mse: mean squared error against the source frame (RGB, 8 bit).
        width, height: the PNGs' size (the frame's, or at most `MAX_SIDE`).
        source_png, output_png: the source's and the output's frame.
        difference_png: |output - source| x `AMPLIFY`.
    """

    episode: int
    key: str
    frame: int
    mse: float
    width: int
    height: int
    source_png: bytes = field(repr=False)
    output_png: bytes = field(repr=False)
    difference_png: bytes = field(repr=False)

    @classmethod
    def of(
        cls, episode: int, key: str, frame: int, source: np.ndarray, output: np.ndarray, mse: float
    ) -> WorstFrame:
        """The kept form of a pair of HxWx3 uint8 RGB frames of the same size."""
        difference = np.abs(output.astype(np.int16) - source.astype(np.int16)) * AMPLIFY
        images = [_small(image) for image in (source, output, np.minimum(difference, 255).astype(np.uint8))]
        return cls(episode, key, frame, mse, *images[0].size, *(_png(image) for image in images))

    @property
    def psnr_db(self) -> float:
        return math.inf if self.mse == 0 else 10.0 * math.log10(255.0**2 / self.mse)

    def rank(self) -> tuple[float, int, int]:
        """Worst first; equal errors by episode then frame, so that any split of the work keeps the same."""
        return (-self.mse, self.episode, self.frame)


def _small(rgb: np.ndarray) -> Image.Image:
    image = Image.fromarray(rgb, "RGB")
    longest = max(image.size)
    if longest > MAX_SIDE:
        scale = MAX_SIDE / longest
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.BOX)
    return image


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@dataclass(frozen=True)
class VideoCost:
    """What one episode video cost: its bytes and the CPU seconds spent decoding its frames, and the
    source's frames of the episode (from a seek in the source's file, as a reader of that layout pays).

    Attributes:
        bytes: the output video file's size.
        frames: the episode frames compared.
        decode_s, source_decode_s: CPU seconds of the output's and the source's decoder (one thread).
    """

    bytes: int
    frames: int
    decode_s: float
    source_decode_s: float


class DecodeClock:
    """CPU seconds a frame iterator spends producing its frames (its decoder's work, on this thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def timed(self, frames: Iterator[T]) -> Iterator[T]:
        while True:
            began = time.thread_time()
            item = next(frames, None)
            self.seconds += time.thread_time() - began
            if item is None:
                return
            yield item


class VideoLook:
    """One episode video while it is compared: its worst pair of frames (the `observe` of
    `compare_frames`) and its decoders' clocks."""

    def __init__(self, episode: int, key: str) -> None:
        self.episode, self.key = episode, key
        self.worst: tuple[float, int, np.ndarray, np.ndarray] | None = None
        self.output_clock, self.source_clock = DecodeClock(), DecodeClock()

    def __call__(self, frame: int, source: np.ndarray, output: np.ndarray, mse: float) -> None:
        # The decoder made new arrays for this pair: holding them costs no copy.
        if self.worst is None or mse > self.worst[0]:
            self.worst = (mse, frame, source, output)

    def cost(self, size: int, frames: int) -> VideoCost:
        return VideoCost(size, frames, self.output_clock.seconds, self.source_clock.seconds)


class WorstFrames:
    """The `keep` worst frames of each camera, one per episode video at most, worst first."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.by_camera: dict[str, list[WorstFrame]] = {}

    def offer(self, look: VideoLook) -> None:
        """Keep the worst frame of `look` if it ranks (its PNGs are made only then)."""
        if look.worst is None or self.keep <= 0:
            return
        mse, frame, source, output = look.worst
        kept = self.by_camera.get(look.key, [])
        if len(kept) >= self.keep and (-mse, look.episode, frame) >= kept[-1].rank():
            return
        self.add((WorstFrame.of(look.episode, look.key, frame, source, output, mse),))

    def add(self, frames: Iterable[WorstFrame]) -> None:
        for frame in frames:
            kept = self.by_camera.setdefault(frame.key, [])
            kept.append(frame)
            kept.sort(key=WorstFrame.rank)
            del kept[self.keep :]

    def frames(self) -> tuple[WorstFrame, ...]:
        return tuple(frame for kept in self.by_camera.values() for frame in kept)


@dataclass(frozen=True)
class CameraLook:
    """One camera as `lrs verify --report` shows it.

    Attributes:
        key: the camera.
        videos, frames: episode videos and frames compared.
        bytes, source_bytes: the output's video bytes; the source's, of the files holding these episodes.
        source_frames: the frames those source files hold (every episode in them).
        decode_s, source_decode_s: decoder CPU seconds over the compared frames (`VideoCost`).
        colour: the fit of the camera's re-encoded frames to the source's (None: none re-encoded).
        worst: its worst frames, worst first.
    """

    key: str
    videos: int
    frames: int
    bytes: int
    decode_s: float
    source_bytes: int
    source_frames: int
    source_decode_s: float
    colour: ColourFit | None
    worst: tuple[WorstFrame, ...] = field(repr=False)

    @property
    def bytes_per_frame(self) -> float:
        return self.bytes / self.frames if self.frames else 0.0

    @property
    def source_bytes_per_frame(self) -> float:
        return self.source_bytes / self.source_frames if self.source_frames else 0.0

    @property
    def decode_ms_per_frame(self) -> float:
        return 1000 * self.decode_s / self.frames if self.frames else 0.0

    @property
    def source_decode_ms_per_frame(self) -> float:
        return 1000 * self.source_decode_s / self.frames if self.frames else 0.0


@dataclass(frozen=True)
class ReportLook:
    """What the page shows beyond `VerifyReport`'s lines: the PSNR floor and each camera."""

    min_psnr: float
    cameras: tuple[CameraLook, ...]


def camera_looks(
    source: V3Source,
    costs: Sequence[tuple[str, VideoCost]],
    worst: WorstFrames,
    colours: dict[str, ColourFit],
) -> tuple[CameraLook, ...]:
    """Each camera of `source` that was compared: its videos' `costs` (camera, cost) summed, the source's
    bytes per frame read from the sizes of its files, its worst frames and its re-encoded colour fit."""
    looks = []
    for key in source.video_keys:
        mine = [cost for camera, cost in costs if camera == key]
        if not mine:
            continue
        whole = source.whole.episodes_by_video_file(key)
        files = source.episodes_by_video_file(key)
        fit = colours.get(key)
        looks.append(
            CameraLook(
                key=key,
                videos=len(mine),
                frames=sum(c.frames for c in mine),
                bytes=sum(c.bytes for c in mine),
                decode_s=sum(c.decode_s for c in mine),
                source_bytes=sum(source.remote.size(rel) for rel in files),
                source_frames=sum(e.length for rel in files for e in whole.get(rel, ())),
                source_decode_s=sum(c.source_decode_s for c in mine),
                colour=fit if fit is not None and fit.n else None,
                worst=tuple(worst.by_camera.get(key, ())),
            )
        )
    return tuple(looks)
