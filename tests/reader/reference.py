"""A plain reference reader of LeRobot v3 datasets, written from the v3 spec and lerobot 0.6.1's `get_item`.

It shares no code with `reader/`: pyarrow reads every data file whole, torchcodec opens the video file
for every query (seek_mode="approximate", as lerobot), and an item is built the way `LeRobotDataset`
builds it: the row's columns as tensors, delta windows clamped to the episode with `<key>_is_pad`,
frames of each camera at the queried timestamps shifted by the episode's `from_timestamp`, the task
string. The reader's tests compare `EpisodeStream` against it sample by sample.

Also here: building the small test datasets (a v3 sample and its `lrs reshard` copy), cached per session.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torchcodec.decoders import VideoDecoder

from tests.support.datasets import resharded, v3_sample


class ReferenceDataset:
    """Items of a v3 dataset by (episode, frame), exactly as lerobot 0.6.1 returns them."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        delta_timestamps: dict[str, list[float]] | None = None,
        tolerance_s: float = 1e-4,
        return_uint8: bool = False,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.root = Path(root)
        self.info = json.loads((self.root / "meta/info.json").read_text())
        self.fps = self.info["fps"]
        features = self.info["features"]
        self.video_keys = [k for k, f in features.items() if f["dtype"] == "video"]
        self.columns = [k for k, f in features.items() if f["dtype"] != "video"]
        files = sorted(glob.glob(str(self.root / "data/*/*.parquet")))
        table = pa.concat_tables([pq.read_table(f) for f in files])
        self.rows = table.sort_by("index").to_pylist()
        episodes = pa.concat_tables(
            [pq.read_table(f) for f in sorted(glob.glob(str(self.root / "meta/episodes/*/*.parquet")))]
        )
        self.episodes = {e["episode_index"]: e for e in episodes.to_pylist()}
        tasks = pq.read_table(self.root / "meta/tasks.parquet").to_pylist()
        self.tasks = {t["task_index"]: t["task"] for t in tasks}
        self.delta = {k: [round(d * self.fps) for d in v] for k, v in (delta_timestamps or {}).items()}
        self.tolerance_s = tolerance_s
        self.return_uint8 = return_uint8
        self.image_transforms = image_transforms

    def get(self, episode: int, frame: int) -> dict[str, Any]:
        """The item of frame `frame` of episode `episode`."""
        ep = self.episodes[episode]
        start, end = ep["dataset_from_index"], ep["dataset_to_index"]
        i = start + frame
        item: dict[str, Any] = {k: torch.tensor(self.rows[i][k]) for k in self.columns}
        queries = {k: [max(start, min(end - 1, i + d)) for d in ds] for k, ds in self.delta.items()}
        for key, ds in self.delta.items():
            item[f"{key}_is_pad"] = torch.BoolTensor([(i + d < start) | (i + d >= end) for d in ds])
        for key, q in queries.items():
            if key not in self.video_keys:
                item[key] = torch.stack([torch.tensor(self.rows[j][key]) for j in q])
        current_ts = item["timestamp"].item()
        frames = {}
        for key in self.video_keys:
            if key in queries:
                ts = torch.stack([torch.tensor(self.rows[j]["timestamp"]) for j in queries[key]]).tolist()
            else:
                ts = [current_ts]
            shifted = [ep[f"videos/{key}/from_timestamp"] + t for t in ts]
            frames[key] = self._decode(self.video_path(episode, key), shifted).squeeze(0)
        item = {**frames, **item}
        if self.image_transforms is not None:
            for key in self.video_keys:
                item[key] = self.image_transforms(item[key])
        item["task"] = self.tasks[item["task_index"].item()]
        return item

    def video_path(self, episode: int, key: str) -> Path:
        ep = self.episodes[episode]
        template = self.info["video_path"]
        rel = template.format(
            video_key=key,
            chunk_index=ep[f"videos/{key}/chunk_index"],
            file_index=ep[f"videos/{key}/file_index"],
        )
        return self.root / rel

    def _decode(self, path: Path, timestamps: list[float]) -> torch.Tensor:
        decoder = VideoDecoder(str(path), seek_mode="approximate")
        fps = decoder.metadata.average_fps
        batch = decoder.get_frames_at(indices=[round(ts * fps) for ts in timestamps])
        loaded = [pts.item() for pts in batch.pts_seconds]
        query, loaded_t = torch.tensor(timestamps), torch.tensor(loaded)
        distance, closest = torch.cdist(query[:, None], loaded_t[:, None], p=1).min(1)
        if not (distance < self.tolerance_s).all():
            raise AssertionError(f"reference: frames too far from {timestamps} in {path}: {loaded}")
        frames = torch.stack([batch.data[j] for j in closest])
        return frames if self.return_uint8 else (frames / 255.0).type(torch.float32)


def assert_items_equal(got: dict[str, Any], want: dict[str, Any], *, context: str = "") -> None:
    """Same keys in the same order, tensors equal in dtype, shape and value, strings equal."""
    assert list(got) == list(want), f"{context}: keys {list(got)} != {list(want)}"
    for key, value in want.items():
        other = got[key]
        if isinstance(value, torch.Tensor):
            assert isinstance(other, torch.Tensor), f"{context}: {key} is {type(other)}"
            assert other.dtype == value.dtype, f"{context}: {key} dtype {other.dtype} != {value.dtype}"
            assert other.shape == value.shape, f"{context}: {key} shape {other.shape} != {value.shape}"
            assert torch.equal(other, value), f"{context}: {key} values differ"
        else:
            assert other == value, f"{context}: {key} {other!r} != {value!r}"


def sample_pair(base: Path, name: str, **spec: Any) -> tuple[Path, Path]:
    """A v3 sample dataset and its lrs/1 copy (`lrs reshard`), built once under `base`."""
    v3, lrs = base / f"{name}-v3", base / f"{name}-lrs"
    if not (v3 / "meta/info.json").exists():
        v3_sample(v3, **spec)
    if not (lrs / "meta/lrs/files.parquet").exists():
        resharded(v3, lrs)
    return v3, lrs


# Episode lengths 8, 22, 8, 21, 4, 5, 1: windows cross starts and ends, a single-frame episode included.
SMALL = {"episodes": 7, "min_length": 1, "max_length": 24, "cameras": 2, "seed": 2}
