"""A synthetic LeRobot v3.0 dataset, written the way lerobot 0.6.1's recorder writes one.

Each episode's video is encoded on its own (AV1 by default: libsvtav1, g=2, crf=30, yuv420p) and the
episodes are then concatenated by remuxing into files that hold several episodes, so every episode
starts on a keyframe at `from_timestamp` inside its file, as lerobot does. Data files hold several
episodes with one row group per episode (lerobot 0.6.1), or, in `converted` mode, row groups that span
many episodes (datasets converted from v2.1 look like that).

Frames are identifiable from their pixels (`reshard.demo.frame_marks`): a band of large black/white blocks at
the top encodes the episode index, the frame index and the camera index in binary, readable after lossy
compression with `read_frame_id`. Depth cameras (`depth_cameras`) are written as lerobot 0.6.1 writes
them: depth in metres (`depth_frame`, a known pattern) log-quantized to 12 bits (`reader.decode.depth.Quantizer`)
and encoded as lossless HEVC `gray12le`, with the same `info` keys. Everything is deterministic for a
seed. `schema`, `lerobot_stats` and `sample_video` write lerobot's columns, statistics and video files;
`sample_spec` says what to write.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reader.decode.depth import Quantizer
from reader.format.v3 import (
    CODEBASE_VERSION,
    DEFAULT_DATA_PATH,
    DEFAULT_EPISODES_PATH,
    DEFAULT_VIDEO_PATH,
    INDEX_COLUMNS,
)
from reshard.demo.frame_marks import depth_frame, draw_frame
from reshard.demo.lerobot_stats import dataset_stats, depth_stats, feature_stats, image_stats
from reshard.demo.sample_spec import SampleSpec
from reshard.demo.sample_video import add_audio, concat_remux, encode_depth, encode_frames
from reshard.demo.schema import episode_table, hf_metadata, info_features, tasks_table
from reshard.job.plan import chunk_file

# v3 datasets written by hand, the way third-party converters and recorders write them, as
# `write_sample` overrides: `write_sample(root, **THIRD_PARTY["full-range-h264"])`. `scripts/third_party.py`
# writes them all; the tests use them at a smaller size.
THIRD_PARTY: dict[str, dict[str, Any]] = {
    "full-range-h264": {"codec": "h264", "pix_fmt": "yuvj420p"},
    "odd-size-yuv444p": {"codec": "h264", "pix_fmt": "yuv444p", "height": 75, "width": 101},
    "audio-track": {"codec": "h264", "audio": True},
}


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
            for col in INDEX_COLUMNS:
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

    _write_meta(root, spec, lengths, tasks, episodes_rows, dataset_stats(ep_stats))


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
            encode_frames(
                frames, out, codec=spec.codec, fps=spec.fps, gop=spec.gop, crf=spec.crf,
                pix_fmt=spec.pix_fmt, **size,
            )  # fmt: skip

    if not spec.keyframe_aligned:
        encode((f for ep in group for f in frames(ep)), str(path))
        offsets = np.concatenate([[0], np.cumsum([lengths[e] for e in group])])[:-1]
        starts = [float(o) / spec.fps for o in offsets]
    else:
        parts = []
        for ep in group:
            buf = io.BytesIO()
            encode(frames(ep), buf)
            parts.append(buf.getvalue())
        starts = concat_remux(parts, str(path))
    if spec.audio and not depth:
        add_audio(path)
    return starts


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
    table = table.replace_schema_metadata(hf_metadata(spec.image_keys))
    with pq.ParquetWriter(path, table.schema, compression="snappy") as writer:
        if spec.converted:
            # v2.1 conversions write big row groups regardless of episode boundaries.
            writer.write_table(table, row_group_size=max(64, 2 * spec.max_length + 1))
        else:
            for t in tables:
                writer.write_table(t.replace_schema_metadata(hf_metadata(spec.image_keys)))


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
        "features": info_features(spec),
    }
    (meta / "info.json").write_text(json.dumps(info, indent=4))
