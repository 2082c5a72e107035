"""The demo's training loop: one pass of a multi-worker DataLoader over a fresh `EpisodeStream`, as a
trainer runs it (optionally resumed mid-epoch), recording every sample (`Sample`: where it is from, a
digest of its values, the markers its decoded frames show) and the reader's counters of every process."""

from __future__ import annotations

import hashlib
import multiprocessing
import queue
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from cache import CacheStats
from reader import ReaderStats
from reader.batch.collate import collate
from reader.plan.spec import ReadSpec
from reader.stream import EpisodeStream
from reshard.demo.config import DemoCheckError, DemoConfig
from reshard.demo.frame_marks import read_frame_id

_REPORT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Sample:
    """One streamed sample: where it is from, a digest of every value, and the markers its frames show.

    Attributes:
        episode: its `episode_index`.
        frame: its `frame_index`.
        digest: blake2b of every key's value, keys in sorted order.
        shown: per camera (in camera order), the (episode, frame, camera) marker drawn in the decoded frame.
    """

    episode: int
    frame: int
    digest: str
    shown: tuple[tuple[int, int, int], ...]

    def __repr__(self) -> str:
        return f"Sample(episode {self.episode}, frame {self.frame}, {self.digest[:12]})"


@dataclass(frozen=True)
class StreamRun:
    """One pass of a DataLoader over an `EpisodeStream`.

    Attributes:
        batches: the samples of each batch, in the order the trainer got them.
        start_batch: batches of the epoch consumed before this pass (a resume), else 0.
        first_batch_s: from building the stream to holding the first batch.
        seconds: from building the stream to the end of the pass.
        samples_per_s: samples per second after the first batch.
        stats: the reader's counters summed over the DataLoader's processes.
    """

    batches: tuple[tuple[Sample, ...], ...]
    start_batch: int
    first_batch_s: float
    seconds: float
    samples_per_s: float
    stats: ReaderStats

    def __repr__(self) -> str:
        return (
            f"StreamRun(batches={len(self.batches)}, samples={self.samples}, start_batch={self.start_batch}, "
            f"first_batch_s={self.first_batch_s:.2f}, samples_per_s={self.samples_per_s:.0f})"
        )

    @property
    def samples(self) -> int:
        """Samples of the pass."""
        return sum(len(b) for b in self.batches)

    def each(self) -> Iterator[Sample]:
        """Every sample of the pass, in the order the trainer got them."""
        for batch in self.batches:
            yield from batch


def stream_epoch(url: str, cache_dir: Path, config: DemoConfig, *, start_batch: int = 0) -> StreamRun:
    """Stream epoch 0 from `url` through a fresh `EpisodeStream` and DataLoader, as a trainer would.

    Args:
        url: the dataset (the bucket).
        cache_dir: the node cache.
        config: the stream's settings.
        start_batch: resume after this many batches of the epoch, through `load_state_dict` with the
            trainer's `{"batches_consumed", "batch_size", "num_workers"}`.

    Returns:
        The samples of every batch and how fast they came.
    """
    began = time.perf_counter()
    stream = open_stream(url, cache_dir, config, start_batch)
    cameras = {key: i for i, key in enumerate(config.sample.camera_keys)}
    reports: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    loader = DataLoader(
        _Reporting(stream, reports),
        batch_size=config.batch_size,
        num_workers=config.num_workers,
        collate_fn=collate,  # one shared buffer per batch (reader.batch.collate)
    )
    batches: list[tuple[Sample, ...]] = []
    first_at, first_samples = 0.0, 0
    try:
        for batch in loader:
            if not batches:
                first_at, first_samples = time.perf_counter(), len(batch["index"])
            batches.append(tuple(_samples(batch, cameras)))
        ended = time.perf_counter()
        if not batches:
            raise DemoCheckError(
                f"Invalid stream ({url}, start batch {start_batch}): no batch. Expected samples."
            )
        stats = _collect_stats(reports, max(1, config.num_workers), url)
    finally:
        reports.close()
    total = sum(len(b) for b in batches)
    return StreamRun(
        batches=tuple(batches),
        start_batch=start_batch,
        first_batch_s=first_at - began,
        seconds=ended - began,
        samples_per_s=(total - first_samples) / (ended - first_at) if ended > first_at else 0.0,
        stats=stats,
    )


def demo_spec(url: str, cache_dir: Path, config: DemoConfig) -> ReadSpec:
    """What the demo's trainer reads: one rank, the config's workers, seed and pool; what its prewarm plans."""
    return ReadSpec.of(
        url,
        world_size=1,
        num_workers=config.num_workers,
        cache_dir=cache_dir,
        seed=config.sample.seed,
        episode_pool_size=config.episode_pool_size,
        return_uint8=True,
    )


def open_stream(url: str, cache_dir: Path, config: DemoConfig, start_batch: int) -> EpisodeStream:
    """A fresh stream, as a (restarted) trainer builds it; `start_batch` > 0 loads the trainer's state.

    The demo is one process: rank 0 of 1, whatever RANK / WORLD_SIZE the environment holds.
    """
    stream = EpisodeStream(demo_spec(url, cache_dir, config), rank=0)
    if start_batch:
        state = {
            "batches_consumed": start_batch,
            "batch_size": config.batch_size,
            "num_workers": config.num_workers,
        }
        stream.load_state_dict(state)
    return stream


class _Reporting(IterableDataset):
    """The stream, sending its process's counters home once that process's share of the epoch ends."""

    def __init__(self, stream: EpisodeStream, reports: Any) -> None:
        self.stream, self.reports = stream, reports

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.stream
        self.reports.put(self.stream.stats().to_dict())


def _samples(batch: Mapping[str, Any], cameras: Mapping[str, int]) -> Iterator[Sample]:
    """The samples of a collated batch, each with a digest of its values and its frames' markers."""
    keys = sorted(batch)
    episodes, frames = batch["episode_index"].tolist(), batch["frame_index"].tolist()
    for i, (episode, frame) in enumerate(zip(episodes, frames, strict=True)):
        digest = hashlib.blake2b(digest_size=16)
        for key in keys:
            digest.update(key.encode())
            digest.update(_value_bytes(batch[key][i]))
        shown = tuple(_marker(batch[key][i]) for key in sorted(cameras, key=cameras.__getitem__))
        yield Sample(int(episode), int(frame), digest.hexdigest(), shown)


def _value_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return value.numpy().tobytes() if hasattr(value, "numpy") else repr(value).encode()


def _marker(image: torch.Tensor) -> tuple[int, int, int]:
    """The (episode, frame, camera) marker in the top band of a CxHxW uint8 frame (only that band is read)."""
    band = (image.shape[-1] // 16) * 3
    return read_frame_id(image[:, :band, :])


def _collect_stats(reports: Any, expected: int, url: str) -> ReaderStats:
    """Sum the counters each DataLoader process sent at the end of its stream."""
    got = []
    for _ in range(expected):
        try:
            got.append(reports.get(timeout=_REPORT_TIMEOUT_S))
        except queue.Empty as exc:
            raise DemoCheckError(
                f"Invalid stream ({url}): {len(got)} of {expected} processes reported their counters. "
                "Expected every DataLoader process to finish its stream."
            ) from exc
    cache = sum((CacheStats(**r.pop("cache")) for r in got), CacheStats())
    names = [f.name for f in fields(ReaderStats) if f.name != "cache"]
    return ReaderStats(**{n: sum(r[n] for r in got) for n in names}, cache=cache)
