"""What the sample generator writes (`SampleSpec`): episodes, cameras, sizes, codec, file packing and
seed, checked on creation. Below the generator (`reshard.demo.sample`) and the column schema
(`reshard.demo.schema`), which both read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from reshard.video.encode import ENCODERS

Codec = Literal["av1", "hevc", "h264"]
# Source pixel formats: lerobot's yuv420p, and what third-party writers use: full-range yuvj420p (an MJPEG
# webcam through FFmpeg) and yuv444p (which holds odd frame sizes). x264 and x265 only for the last two.
PIX_FMTS = ("yuv420p", "yuvj420p", "yuv444p")


@dataclass(frozen=True)
class SampleSpec:
    """What `write_sample` generates.

    Attributes:
        episodes: number of episodes.
        min_length, max_length: episode lengths are drawn uniformly in [min_length, max_length].
        cameras: number of video cameras (`observation.images.cam0`, ...).
        depth_cameras: number of depth cameras (`observation.images.depth0`, ...), 12-bit HEVC.
        image_cameras: number of cameras stored as images (`observation.images.image0`, ...,
            `dtype: image`): PNG bytes in the data files, as lerobot writes them when not recording video.
        height, width: frame size in pixels (width >= 64, height >= 48, both even but in yuv444p).
        fps: frames per second.
        tasks: number of distinct task strings (episode e does task e % tasks).
        codec: video codec of the source files.
        gop: keyframe interval (lerobot's `g`).
        crf: encoder quality (lerobot's default 30).
        episodes_per_data_file: episodes packed into one data parquet file.
        episodes_per_video_file: episodes concatenated into one MP4 per camera.
        chunks_size: files per chunk directory (lerobot's `chunks_size`).
        converted: write data row groups that span many episodes, as v2.1-converted datasets have.
        keyframe_aligned: encode each episode on its own so it starts on a keyframe (lerobot's way);
            False encodes each video file as one stream, so episode starts fall anywhere in the GOP.
        pix_fmt: the cameras' pixel format, one of `PIX_FMTS` (not the depth cameras').
        audio: the camera video files also hold an AAC audio track, as some recorders write.
        seed: the seed of every random choice.
    """

    episodes: int = 8
    min_length: int = 12
    max_length: int = 40
    cameras: int = 2
    depth_cameras: int = 0
    image_cameras: int = 0
    height: int = 64
    width: int = 96
    fps: int = 30
    tasks: int = 3
    codec: Codec = "av1"
    gop: int = 2
    crf: int = 30
    episodes_per_data_file: int = 3
    episodes_per_video_file: int = 3
    chunks_size: int = 1000
    converted: bool = False
    keyframe_aligned: bool = True
    pix_fmt: str = "yuv420p"
    audio: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        odd = self.pix_fmt == "yuv444p"  # the only format here that holds an odd size
        checks = [
            (self.episodes >= 0, "episodes", ">= 0"),
            (1 <= self.min_length <= self.max_length, "min_length/max_length", "1 <= min <= max"),
            (self.cameras >= 0, "cameras", ">= 0"),
            (self.depth_cameras >= 0, "depth_cameras", ">= 0"),
            (
                self.width >= 64 and (odd or self.width % 2 == 0),
                "width",
                "even (odd only in yuv444p) and >= 64",
            ),
            (
                self.height >= 48 and (odd or self.height % 2 == 0),
                "height",
                "even (odd only in yuv444p) and >= 48",
            ),
            (self.pix_fmt in PIX_FMTS, "pix_fmt", f"one of {PIX_FMTS}"),
            (self.pix_fmt == "yuv420p" or self.codec != "av1", "pix_fmt/codec", "yuv420p for av1"),
            (self.fps > 0, "fps", "> 0"),
            (self.tasks >= 1, "tasks", ">= 1"),
            (self.codec in ENCODERS, "codec", f"one of {sorted(ENCODERS)}"),
            (self.gop >= 1, "gop", ">= 1"),
            (self.episodes_per_data_file >= 1, "episodes_per_data_file", ">= 1"),
            (self.episodes_per_video_file >= 1, "episodes_per_video_file", ">= 1"),
            (self.chunks_size >= 1, "chunks_size", ">= 1"),
        ]
        for ok, name, expected in checks:
            if not ok:
                value = "/".join(str(getattr(self, part)) for part in name.split("/"))
                raise ValueError(f"Invalid {name} ({value}). Expected {expected}.")

    @property
    def camera_keys(self) -> list[str]:
        return [f"observation.images.cam{i}" for i in range(self.cameras)]

    @property
    def depth_keys(self) -> list[str]:
        return [f"observation.images.depth{i}" for i in range(self.depth_cameras)]

    @property
    def image_keys(self) -> list[str]:
        """Cameras stored as images; their frames carry camera index `cameras + i` (`read_frame_id`)."""
        return [f"observation.images.image{i}" for i in range(self.image_cameras)]

    def lengths(self) -> list[int]:
        """Episode lengths, deterministic for the seed."""
        rng = np.random.default_rng([self.seed, 1])
        return [int(x) for x in rng.integers(self.min_length, self.max_length + 1, size=self.episodes)]
