"""One peer case of `bench_reader.py`: lerobot 0.6.1's `LeRobotDataset` or lerobot-lancedb's
`LanceDBDataset`, shuffled as lerobot-train shuffles, through lerobot-train's DataLoader settings.
Prints one JSON line (samples/s, first-batch latency, CPU per sample, the batches' episode and frame
indices).

Runs in lerobot's reference venv (not this project's), started by the bench with one JSON argument:

    python scripts/bench/_peer_case.py '{"kind": "lerobot", "root": DIR, "batch_size": 32, "workers": 2,
        "warmup": 5, "context": "spawn", "uint8": true, "delta": null, "prefetch": 4, "persistent": true,
        "resize": null}'

`kind` is "lerobot" (a v3 dataset at `root`) or "lancedb" (lerobot-lancedb's conversion at `root`).
`resize` ([width, height, filter], lerobot only): its `image_transforms` resize every camera frame, as a
user who trains at a smaller size than recorded would.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from _tree_cpu import tree_cpu_seconds  # this folder
from torch.utils.data import DataLoader

began = time.perf_counter()


class Resizing:
    """`image_transforms` that resize each camera frame (C, H, W, or T, C, H, W with a window) to
    (width, height) with the filter `lrs reshard --resize-filter` names: torch's antialiased bilinear or
    bicubic (torchvision's `Resize` on tensors), or area averaging. A class, not a closure: spawned
    DataLoader workers unpickle the dataset and its transforms."""

    def __init__(self, width: int, height: int, name: str) -> None:
        self.size = (height, width)
        self.mode, self.kw = ("area", {}) if name == "area" else (name, {"antialias": True})

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        batch = frames if frames.dim() == 4 else frames[None]
        if self.mode == "area" and batch.dtype == torch.uint8:  # torch averages areas of floats only
            out = F.interpolate(batch.float(), size=self.size, mode="area").round_().to(batch.dtype)
        else:
            out = F.interpolate(batch, size=self.size, mode=self.mode, **self.kw)
        return out if frames.dim() == 4 else out[0]


def resizing(size: list[Any] | None) -> Resizing | None:
    """The transform of a case's `resize` ([width, height, filter]), or None."""
    return None if size is None else Resizing(*size)


def open_dataset(params: dict[str, Any]) -> Any:
    if params["kind"] == "lancedb":  # lerobot-lancedb's map-style LanceDBDataset over its conversion
        from lerobot_lancedb import LanceDBDataset

        return LanceDBDataset(
            root=params["root"], return_uint8=params["uint8"], delta_timestamps=params["delta"]
        )
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(
        "local/bench",
        root=params["root"],
        video_backend="torchcodec",
        return_uint8=params["uint8"],
        delta_timestamps=params["delta"],
        image_transforms=resizing(params.get("resize")),
    )


def main() -> None:  # spawned DataLoader workers import this file: run only as __main__
    from lerobot.datasets import EpisodeAwareSampler

    params = json.loads(sys.argv[1])
    workers, warmup = params["workers"], params["warmup"]
    t = os.times()
    cpu0 = t.user + t.system
    ds = open_dataset(params)
    opened = time.perf_counter() - began
    # As lerobot-train 0.6.1 builds it (lerobot_train.py, _dataloader_worker_kwargs): the shuffled
    # EpisodeAwareSampler, prefetch 4, persistent workers, pin_memory only on CUDA, no drop_last.
    sampler = EpisodeAwareSampler(
        ds.meta.episodes["dataset_from_index"],
        ds.meta.episodes["dataset_to_index"],
        episode_indices_to_use=ds.episodes,
        shuffle=True,
        seed=0,
        absolute_to_relative_idx=ds.absolute_to_relative_idx,
    )
    workers_kw: dict[str, Any] = (
        {
            "prefetch_factor": params["prefetch"],
            "persistent_workers": params["persistent"],
            "multiprocessing_context": params["context"],
        }
        if workers
        else {}
    )
    loader = DataLoader(
        ds,
        batch_size=params["batch_size"],
        sampler=sampler,
        num_workers=workers,
        drop_last=False,
        **workers_kw,
    )
    first = warm_cpu = 0.0
    warm: float | None = None
    samples = warm_samples = 0
    dtypes: list[str] = []
    arrivals: list[float] = []
    batches: list[list[tuple[int, int]]] = []
    for i, batch in enumerate(loader):
        now = time.perf_counter()
        batches.append(list(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist(), strict=True)))
        samples += len(batches[-1])
        if i == 0:
            first = now - began
            dtypes = sorted(
                {str(v.dtype).removeprefix("torch.") for k, v in batch.items() if k in ds.meta.camera_keys}
            )
        if i + 1 >= warmup:
            arrivals.append(now)
        if i + 1 == warmup:
            warm, warm_samples, warm_cpu = now, samples, tree_cpu_seconds()
    end, end_cpu = time.perf_counter(), tree_cpu_seconds()
    if warm is None:
        raise RuntimeError(f"only {samples} samples: too few batches to measure after warm-up")
    del loader
    gc.collect()  # see join_workers in bench_reader.py: reap every worker, so that its CPU is counted
    for child in multiprocessing.active_children():
        child.join(120)
    assert not multiprocessing.active_children(), "DataLoader workers still running"
    t = os.times()
    cpu = t.user + t.system + t.children_user + t.children_system - cpu0
    gaps = sorted(1000 * (b - a) for a, b in zip(arrivals, arrivals[1:], strict=False))
    report = {
        "samples": samples,
        "first_batch_s": first,
        "open_s": opened,
        "frame_dtypes": dtypes,
        "cpu_ms_per_sample": 1000 * cpu / samples,
        "samples_per_s": (samples - warm_samples) / (end - warm),
        "steady_cpu_ms_per_sample": 1000 * (end_cpu - warm_cpu) / (samples - warm_samples),
        **{f"batch_ms_p{q}": gaps[min(len(gaps) - 1, len(gaps) * q // 100)] for q in (50, 95, 99)},
        "batches": batches,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
