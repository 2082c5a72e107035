"""A synthetic LeRobot v3.0 dataset, written the way lerobot 0.6.1's recorder writes one.

Each episode's video is encoded on its own (AV1 by default: libsvtav1, g=2, crf=30, yuv420p) and the
episodes are then concatenated by remuxing into files that hold several episodes, so every episode
starts on a keyframe at `from_timestamp` inside its file, as lerobot does. Data files hold several
episodes with one row group per episode (lerobot 0.6.1), or, in `converted` mode, row groups that span
many episodes (datasets converted from v2.1 look like that).

Frames are identifiable from their pixels: a band of large black/white blocks at the top encodes the
episode index, the frame index and the camera index in binary, readable after lossy compression with
`read_frame_id`. Depth cameras (`depth_cameras`) are written as lerobot 0.6.1 writes them: depth in
metres (`depth_frame`, a known pattern) log-quantized to 12 bits (`reader.depth.Quantizer`) and
encoded as lossless HEVC `gray12le`, with the same `info` keys. Everything is deterministic for a seed.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reader.depth import Quantizer
from reader.format.v3 import CODEBASE_VERSION, DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH
from reshard.plan import chunk_file
from reshard.video.write import ENCODERS, add_video_stream, encoder_options  # noqa: F401 - encoder_options re-exported

Codec = Literal["av1", "hevc", "h264"]
# The sample favours generation speed: x264 / x265 at their fastest preset, SVT-AV1 at lerobot's 12.
SAMPLE_PRESETS: dict[str, str] = {"av1": "12", "hevc": "ultrafast", "h264": "ultrafast"}
STATE_DIM = 6
_BITS = 16  # bits per identity row: episode, frame, camera
_ROWS = 3
_DARK, _LIGHT = 16, 235


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
        height, width: frame size in pixels (width >= 64, height >= 48, both even).
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
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.episodes >= 0, "episodes", ">= 0"),
            (1 <= self.min_length <= self.max_length, "min_length/max_length", "1 <= min <= max"),
            (self.cameras >= 0, "cameras", ">= 0"),
            (self.depth_cameras >= 0, "depth_cameras", ">= 0"),
            (self.width >= 64 and self.width % 2 == 0, "width", "even and >= 64"),
            (self.height >= 48 and self.height % 2 == 0, "height", "even and >= 48"),
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


# --- identifiable pixels -----------------------------------------------------------------------------


def _block(width: int) -> int:
    return width // _BITS


def draw_frame(
    episode: int, frame: int, camera: int, *, height: int, width: int, seed: int = 0
) -> np.ndarray:
    """An HxWx3 uint8 frame whose top band encodes (episode, frame, camera) as black/white blocks."""
    yy, xx = np.mgrid[0:height, 0:width]
    phase = (frame * 3 + episode * 17 + camera * 29 + seed) % 256
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[..., 0] = (xx * 255 // max(1, width - 1) + phase) % 200 + 28
    img[..., 1] = (yy * 255 // max(1, height - 1) + 2 * phase) % 200 + 28
    img[..., 2] = ((xx + yy + phase) % 160) + 48
    b = _block(width)
    for row, value in enumerate((episode, frame, camera)):
        for bit in range(_BITS):
            on = (value >> bit) & 1
            img[row * b : (row + 1) * b, bit * b : (bit + 1) * b] = _LIGHT if on else _DARK
    return img


def depth_frame(episode: int, frame: int, camera: int, *, height: int, width: int) -> np.ndarray:
    """An HxW float32 depth map in metres (0.3 to about 2.5): a slope across the image that moves with the
    frame and differs per episode and camera, so a wrong frame reads as wrong depth (one frame is 8 mm,
    several 12-bit log quanta, apart)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = 0.3 + 0.05 * (episode % 20) + 0.1 * camera + 0.008 * (frame % 100)
    return (base + 0.004 * xx + 0.002 * yy).astype(np.float32)


def read_frame_id(image: np.ndarray | Any) -> tuple[int, int, int]:
    """Decode (episode, frame, camera) from a frame drawn by `draw_frame`.

    Args:
        image: HxWx3 or 3xHxW, uint8 in [0, 255] or float in [0, 1] (numpy array or torch tensor).
    """
    arr = np.asarray(image.cpu() if hasattr(image, "cpu") else image)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[2] != 3:
        arr = arr.transpose(1, 2, 0)
    arr = arr.astype(np.float32)
    if arr.max() <= 1.0 + 1e-6:
        arr = arr * 255.0
    gray = arr.mean(axis=2)
    b = _block(gray.shape[1])
    margin = max(1, b // 4)
    values = []
    for row in range(_ROWS):
        value = 0
        for bit in range(_BITS):
            cell = gray[row * b + margin : (row + 1) * b - margin, bit * b + margin : (bit + 1) * b - margin]
            if cell.mean() > (_DARK + _LIGHT) / 2:
                value |= 1 << bit
        values.append(value)
    return values[0], values[1], values[2]


# --- tabular content -----------------------------------------------------------------------------


def episode_table(episode: int, length: int, first_index: int, task_index: int, fps: int) -> pa.Table:
    """The data rows of one episode, with lerobot's column types."""
    t = np.arange(length, dtype=np.float64)
    base = np.arange(STATE_DIM, dtype=np.float64)
    state = np.sin(t[:, None] / 7.0 + base[None, :] + episode).astype(np.float32)
    action = np.cos(t[:, None] / 5.0 + base[None, :] * 0.5 + episode * 0.1).astype(np.float32)

    def vec(x: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1), pa.float32()), STATE_DIM)

    return pa.table(
        {
            "observation.state": vec(state),
            "action": vec(action),
            "timestamp": pa.array((t / fps).astype(np.float32), pa.float32()),
            "frame_index": pa.array(np.arange(length), pa.int64()),
            "episode_index": pa.array(np.full(length, episode), pa.int64()),
            "index": pa.array(np.arange(first_index, first_index + length), pa.int64()),
            "task_index": pa.array(np.full(length, task_index), pa.int64()),
        }
    )


def _hf_metadata(image_keys: list[str] | None = None) -> dict[bytes, bytes]:
    vec = {"feature": {"dtype": "float32", "_type": "Value"}, "length": STATE_DIM, "_type": "List"}
    features = {
        "observation.state": vec,
        "action": vec,
        **{key: {"_type": "Image"} for key in image_keys or []},
        "timestamp": {"dtype": "float32", "_type": "Value"},
        **{
            k: {"dtype": "int64", "_type": "Value"}
            for k in ("frame_index", "episode_index", "index", "task_index")
        },
    }
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def _features(spec: SampleSpec) -> dict[str, Any]:
    names = [f"joint{i}" for i in range(STATE_DIM)]
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [STATE_DIM], "names": names},
        "action": {"dtype": "float32", "shape": [STATE_DIM], "names": names},
    }
    for key in spec.camera_keys:
        features[key] = {
            "dtype": "video",
            "shape": [spec.height, spec.width, 3],
            "names": ["height", "width", "channels"],
            "info": video_info(spec.codec, spec.height, spec.width, spec.fps, gop=spec.gop, crf=spec.crf),
        }
    for key in spec.depth_keys:
        info = video_info(
            "hevc", spec.height, spec.width, spec.fps, gop=spec.gop, crf=spec.crf, pix_fmt="gray12le"
        )
        info.update(
            {
                "video.channels": 1,
                "video.extra_options": {"x265-params": "lossless=1"},
                **Quantizer().info(),
                "is_depth_map": True,
                "depth_unit": "mm",  # the unit of the stats
            }
        )
        features[key] = {
            "dtype": "video",
            "shape": [spec.height, spec.width, 1],
            "names": ["height", "width", "channels"],
            "info": info,
        }
    for key in spec.image_keys:
        features[key] = {
            "dtype": "image",
            "shape": [spec.height, spec.width, 3],
            "names": ["height", "width", "channels"],
        }
    for key, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        features[key] = {"dtype": dtype, "shape": [1], "names": None}
    return features


def video_info(
    codec: str,
    height: int,
    width: int,
    fps: float,
    *,
    gop: int | None,
    crf: int | None,
    pix_fmt: str = "yuv420p",
) -> dict[str, Any]:
    """The `info` block lerobot writes under a video feature."""
    info: dict[str, Any] = {
        "video.height": height,
        "video.width": width,
        "video.codec": codec,
        "video.pix_fmt": pix_fmt,
        "video.fps": fps,
        "video.channels": 3,
        "has_audio": False,
        "is_depth_map": False,
    }
    if gop is not None:
        info["video.g"] = gop
    if crf is not None:
        info["video.crf"] = crf
    return info


# --- stats -----------------------------------------------------------------------------------------

_QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """lerobot's per-feature stats over axis 0: min, max, mean, std, count, q01..q99."""
    values = values.astype(np.float64)
    stats = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([len(values)]),
    }
    for q in _QUANTILES:
        stats[f"q{int(round(q * 100)):02d}"] = np.quantile(values, q, axis=0)
    return stats


def _channel_stats(pixels: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """Per-channel stats of pixels (P, C), shaped (C,1,1) like lerobot's, counting `frames` frames."""
    channels = pixels.shape[1]
    out = {k: v.reshape(channels, 1, 1) for k, v in feature_stats(pixels).items() if k != "count"}
    out["count"] = np.array([frames])
    return out


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of sampled frames (N,H,W,3 uint8), shaped (3,1,1) in [0,1] like lerobot's."""
    return _channel_stats(frames.reshape(-1, 3).astype(np.float64) / 255.0, len(frames))


def depth_stats(millimetres: np.ndarray) -> dict[str, np.ndarray]:
    """Stats of sampled depth frames (N,H,W, millimetres), shaped (1,1,1) like lerobot's."""
    return _channel_stats(millimetres.reshape(-1, 1), len(millimetres))


def aggregate_stats(per_episode: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, Any]]:
    """Dataset stats from episode stats: exact min/max/mean/std, count-weighted quantiles (as lerobot)."""
    out: dict[str, dict[str, Any]] = {}
    for key in per_episode[0] if per_episode else []:
        eps = [e[key] for e in per_episode]
        counts = np.array([float(e["count"][0]) for e in eps])
        total = counts.sum()
        w = counts / total
        shape = eps[0]["mean"].shape
        weights = w.reshape((-1,) + (1,) * len(shape))
        mean = (np.stack([e["mean"] for e in eps]) * weights).sum(axis=0)
        second = (np.stack([e["std"] ** 2 + e["mean"] ** 2 for e in eps]) * weights).sum(axis=0)
        agg = {
            "min": np.min(np.stack([e["min"] for e in eps]), axis=0),
            "max": np.max(np.stack([e["max"] for e in eps]), axis=0),
            "mean": mean,
            "std": np.sqrt(np.maximum(second - mean**2, 0)),
            "count": np.array([int(total)]),
        }
        for q in ("q01", "q10", "q50", "q90", "q99"):
            agg[q] = (np.stack([e[q] for e in eps]) * weights).sum(axis=0)
        out[key] = {k: v.tolist() for k, v in agg.items()}
    return out


# --- video -------------------------------------------------------------------------------------------


def encode_frames(
    frames: Iterator[np.ndarray],
    out: str | io.BytesIO,
    *,
    codec: str,
    fps: int,
    gop: int,
    crf: int,
    height: int,
    width: int,
    preset: str | int | None = None,
    bframes: int = 0,
) -> int:
    """Encode RGB frames into an MP4 (path or buffer); returns the number of frames written."""
    with av.open(out, mode="w", format="mp4") as container:
        preset = SAMPLE_PRESETS.get(codec) if preset is None else preset
        stream = add_video_stream(
            container,
            codec,
            fps=fps,
            width=width,
            height=height,
            gop=gop,
            crf=crf,
            preset=preset,
            bframes=bframes,
        )
        return _encode_all(container, stream, frames, pix_fmt="rgb24", fps=fps)


def _encode_all(container: Any, stream: Any, images: Iterator[np.ndarray], *, pix_fmt: str, fps: int) -> int:
    """Encode images (frame i at i / fps) and flush; returns how many."""
    count = 0
    for i, image in enumerate(images):
        frame = av.VideoFrame.from_ndarray(image, format=pix_fmt)
        frame.pts, frame.time_base = i, Fraction(1, fps)
        for packet in stream.encode(frame):
            container.mux(packet)
        count += 1
    for packet in stream.encode():
        container.mux(packet)
    return count


def encode_depth(
    codes: Iterator[np.ndarray], out: str | io.BytesIO, *, fps: int, gop: int, height: int, width: int
) -> int:
    """Encode 12-bit depth codes (HxW uint16) as lossless HEVC `gray12le`, as lerobot does."""
    with av.open(out, mode="w", format="mp4") as container:
        stream = add_video_stream(
            container, "hevc", fps=fps, width=width, height=height, gop=gop, crf=0,
            preset=SAMPLE_PRESETS["hevc"], pix_fmt="gray12le", lossless=True,
        )  # fmt: skip
        return _encode_all(container, stream, codes, pix_fmt="gray12le", fps=fps)


def concat_remux(parts: list[bytes], out_path: str) -> list[float]:
    """Concatenate single-stream MP4s by remuxing (no re-encode); returns each part's start in seconds."""
    starts: list[float] = []
    with av.open(out_path, mode="w", format="mp4") as out:
        out_stream = None
        offset = 0  # in the output stream's time base
        for data in parts:
            with av.open(io.BytesIO(data)) as src:
                in_stream = src.streams.video[0]
                if out_stream is None:
                    out_stream = out.add_stream_from_template(in_stream, opaque=True)
                    out_stream.time_base = in_stream.time_base
                tb = in_stream.time_base
                starts.append(float(offset * tb))
                end = offset
                for packet in src.demux(in_stream):
                    if packet.dts is None:
                        continue
                    duration = packet.duration or 0
                    packet.pts = (packet.pts or 0) + offset
                    packet.dts = packet.dts + offset
                    end = max(end, packet.pts + duration)
                    packet.stream = out_stream
                    out.mux(packet)
                offset = end
    return starts


# --- writer ------------------------------------------------------------------------------------------


def write_sample(
    root: str | os.PathLike[str],
    spec: SampleSpec | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    **overrides: Any,
) -> Path:
    """Write a sample v3.0 dataset to `root` (which must not exist or be empty).

    Args:
        root: the dataset directory to create.
        spec: what to generate; keyword overrides replace its fields (e.g. `episodes=20`).
        progress: called with 1 after each episode is written.

    Returns:
        The dataset root.
    """
    spec = SampleSpec(**{**(asdict(spec) if spec else {}), **overrides})
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"Invalid sample directory ({root}). Expected a new or empty directory.")
    stage = Path(tempfile.mkdtemp(prefix=".sample-", dir=root.parent if root.parent.exists() else None))
    try:
        _write(stage, spec, progress)
        root.mkdir(parents=True, exist_ok=True)
        for item in stage.iterdir():
            os.replace(item, root / item.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return root


def _write(root: Path, spec: SampleSpec, progress: Callable[[int], None] | None) -> None:
    lengths = spec.lengths()
    tasks = [f"task {t}: pick the cube number {t} and place it in the bin" for t in range(spec.tasks)]
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(int) if lengths else np.array([0])
    episodes_rows: list[dict[str, Any]] = []
    ep_stats: list[dict[str, dict[str, np.ndarray]]] = []

    # Video: per camera, encode each episode, then concatenate groups of episodes into files.
    video_ptrs: dict[int, dict[str, tuple[int, int, float, float]]] = {e: {} for e in range(spec.episodes)}
    image_samples: dict[int, dict[str, np.ndarray]] = {e: {} for e in range(spec.episodes)}
    cameras = [(cam, key, False) for cam, key in enumerate(spec.camera_keys)]
    cameras += [(cam, key, True) for cam, key in enumerate(spec.depth_keys)]
    quantizer = Quantizer()
    for cam, key, depth in cameras:
        for first in range(0, spec.episodes, spec.episodes_per_video_file):
            group = list(range(first, min(first + spec.episodes_per_video_file, spec.episodes)))
            chunk, file = chunk_file(first // spec.episodes_per_video_file, spec.chunks_size)
            path = root / DEFAULT_VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            ep_starts = _write_video_file(path, group, lengths, cam, spec, depth=depth)
            for ep, start in zip(group, ep_starts, strict=True):
                video_ptrs[ep][key] = (chunk, file, start, start + lengths[ep] / spec.fps)
                idx = np.linspace(0, lengths[ep] - 1, num=min(lengths[ep], 4)).astype(int)
                size = {"height": spec.height, "width": spec.width}
                if depth:  # the stats of what the reader returns: dequantized, in millimetres
                    import torch  # here only: `lrs` commands start without torch

                    codes = np.stack([quantizer.quantize(depth_frame(ep, int(i), cam, **size)) for i in idx])
                    mm = quantizer.dequantize(torch.from_numpy(codes.astype(np.int32))[:, None], "mm")
                    image_samples[ep][key] = mm.numpy()[:, 0]
                else:
                    image_samples[ep][key] = np.stack(
                        [draw_frame(ep, int(i), cam, seed=spec.seed, **size) for i in idx]
                    )

    # Data files (cameras stored as images are columns of PNG bytes there).
    tables = [
        _with_images(episode_table(ep, lengths[ep], int(starts[ep]), ep % spec.tasks, spec.fps), ep, spec)
        for ep in range(spec.episodes)
    ]
    for ep in range(spec.episodes):
        idx = np.linspace(0, lengths[ep] - 1, num=min(lengths[ep], 4)).astype(int)
        for i, key in enumerate(spec.image_keys):
            image_samples[ep][key] = np.stack(
                [
                    draw_frame(
                        ep, int(f), spec.cameras + i, seed=spec.seed, height=spec.height, width=spec.width
                    )
                    for f in idx
                ]
            )
    for first in range(0, spec.episodes, spec.episodes_per_data_file):
        group = list(range(first, min(first + spec.episodes_per_data_file, spec.episodes)))
        chunk, file = chunk_file(first // spec.episodes_per_data_file, spec.chunks_size)
        path = root / DEFAULT_DATA_PATH.format(chunk_index=chunk, file_index=file)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_data_file(path, [tables[e] for e in group], spec)
        for ep in group:
            table = tables[ep]
            stats = {
                "observation.state": feature_stats(
                    np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
                ),
                "action": feature_stats(np.stack(table.column("action").to_numpy(zero_copy_only=False))),
            }
            for key in [*spec.camera_keys, *spec.image_keys]:
                stats[key] = image_stats(image_samples[ep][key])
            for key in spec.depth_keys:
                stats[key] = depth_stats(image_samples[ep][key])
            for col in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
                stats[col] = feature_stats(table.column(col).to_numpy().reshape(-1, 1))
            ep_stats.append(stats)
            row: dict[str, Any] = {
                "episode_index": ep,
                "tasks": [tasks[ep % spec.tasks]],
                "length": lengths[ep],
                "data/chunk_index": chunk,
                "data/file_index": file,
                "dataset_from_index": int(starts[ep]),
                "dataset_to_index": int(starts[ep] + lengths[ep]),
            }
            for key in [*spec.camera_keys, *spec.depth_keys]:
                vchunk, vfile, t0, t1 = video_ptrs[ep][key]
                row.update(
                    {
                        f"videos/{key}/chunk_index": vchunk,
                        f"videos/{key}/file_index": vfile,
                        f"videos/{key}/from_timestamp": t0,
                        f"videos/{key}/to_timestamp": t1,
                    }
                )
            for feat, st in stats.items():
                for name, value in st.items():
                    row[f"stats/{feat}/{name}"] = value.tolist()
            row["meta/episodes/chunk_index"] = 0
            row["meta/episodes/file_index"] = 0
            episodes_rows.append(row)
        if progress:
            for _ in group:
                progress(1)

    _write_meta(root, spec, lengths, tasks, episodes_rows, aggregate_stats(ep_stats))


def _write_video_file(
    path: Path, group: list[int], lengths: list[int], cam: int, spec: SampleSpec, *, depth: bool = False
) -> list[float]:
    size = {"height": spec.height, "width": spec.width}
    quantizer = Quantizer()

    def frames(ep: int) -> Iterator[np.ndarray]:
        for i in range(lengths[ep]):
            if depth:
                yield quantizer.quantize(depth_frame(ep, i, cam, **size))
            else:
                yield draw_frame(ep, i, cam, seed=spec.seed, **size)

    def encode(frames: Iterator[np.ndarray], out: str | io.BytesIO) -> None:
        if depth:
            encode_depth(frames, out, fps=spec.fps, gop=spec.gop, **size)
        else:
            encode_frames(frames, out, codec=spec.codec, fps=spec.fps, gop=spec.gop, crf=spec.crf, **size)

    if not spec.keyframe_aligned:
        encode((f for ep in group for f in frames(ep)), str(path))
        offsets = np.concatenate([[0], np.cumsum([lengths[e] for e in group])])[:-1]
        return [float(o) / spec.fps for o in offsets]
    parts = []
    for ep in group:
        buf = io.BytesIO()
        encode(frames(ep), buf)
        parts.append(buf.getvalue())
    return concat_remux(parts, str(path))


_IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _with_images(table: pa.Table, episode: int, spec: SampleSpec) -> pa.Table:
    """`table` with a column of PNG frames (lerobot's image struct: bytes, path) per image camera."""
    from PIL import Image  # here only: `lrs` commands start without it

    for i, key in enumerate(spec.image_keys):
        cells = []
        for frame in range(table.num_rows):
            pixels = draw_frame(
                episode, frame, spec.cameras + i, seed=spec.seed, height=spec.height, width=spec.width
            )
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="PNG")
            cells.append({"bytes": out.getvalue(), "path": f"frame_{frame:06d}.png"})
        table = table.append_column(key, pa.array(cells, _IMAGE))
    return table


def _write_data_file(path: Path, tables: list[pa.Table], spec: SampleSpec) -> None:
    table = pa.concat_tables(tables)
    table = table.replace_schema_metadata(_hf_metadata(spec.image_keys))
    with pq.ParquetWriter(path, table.schema, compression="snappy") as writer:
        if spec.converted:
            # v2.1 conversions write big row groups regardless of episode boundaries.
            writer.write_table(table, row_group_size=max(64, 2 * spec.max_length + 1))
        else:
            for t in tables:
                writer.write_table(t.replace_schema_metadata(_hf_metadata(spec.image_keys)))


def _pandas_tasks_metadata() -> bytes:
    return json.dumps(
        {
            "index_columns": ["task"],
            "column_indexes": [
                {
                    "name": None,
                    "field_name": None,
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": {"encoding": "UTF-8"},
                }
            ],
            "columns": [
                {
                    "name": "task_index",
                    "field_name": "task_index",
                    "pandas_type": "int64",
                    "numpy_type": "int64",
                    "metadata": None,
                },
                {
                    "name": "task",
                    "field_name": "task",
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": None,
                },
            ],
            "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": "2.3.3",
        }
    ).encode()


def tasks_table(tasks: list[str]) -> pa.Table:
    """`meta/tasks.parquet` as lerobot writes it (a pandas frame indexed by the task string)."""
    table = pa.table(
        {"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())}
    )
    return table.replace_schema_metadata({b"pandas": _pandas_tasks_metadata()})


def _write_meta(
    root: Path,
    spec: SampleSpec,
    lengths: list[int],
    tasks: list[str],
    episodes_rows: list[dict[str, Any]],
    stats: dict[str, Any],
) -> None:
    meta = root / "meta"
    (meta / "episodes").mkdir(parents=True, exist_ok=True)
    ep_path = root / DEFAULT_EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    if episodes_rows:
        pq.write_table(pa.Table.from_pylist(episodes_rows), ep_path)
    pq.write_table(tasks_table(tasks), meta / "tasks.parquet")
    (meta / "stats.json").write_text(json.dumps(stats, indent=4))
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": "lrs_sample",
        "total_episodes": spec.episodes,
        "total_frames": int(sum(lengths)),
        "total_tasks": len(tasks),
        "chunks_size": spec.chunks_size,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": spec.fps,
        "splits": {"train": f"0:{spec.episodes}"},
        "data_path": DEFAULT_DATA_PATH,
        "video_path": DEFAULT_VIDEO_PATH if spec.cameras or spec.depth_cameras else None,
        "features": _features(spec),
    }
    (meta / "info.json").write_text(json.dumps(info, indent=4))
