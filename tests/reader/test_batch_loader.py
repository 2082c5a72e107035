"""`reader.BatchLoader` / `EpisodeStream.batches`: batches built by threads in the trainer's process equal,
batch for batch, what `DataLoader(stream, num_workers=0, collate_fn=collate)` gives, and resume exactly."""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from reader import BatchLoader, EpisodeStream, ResumableLoader, collate
from reader.errors import DecodeError
from tests.reader.loader_job import flip, job, torchrun
from tests.reader.reference import ReferenceDataset
from tests.reader.test_collate import _assert_batches_equal

TOTAL = 69  # frames of SMALL
FPS = 30
WINDOWS = {"action": [-1 / FPS, 0.0, 1 / FPS], "observation.images.cam0": [-1 / FPS, 0.0]}


def _stream(root: Any, **kwargs: Any) -> EpisodeStream:
    options = {"seed": 5, "episode_pool_size": 3, "delta_timestamps": WINDOWS}
    return EpisodeStream(root, **{**options, **kwargs})


def _dataloader(stream: EpisodeStream, batch_size: int) -> list[dict[str, Any]]:
    return list(DataLoader(stream, batch_size=batch_size, num_workers=0, collate_fn=collate))


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
def test_batches_equal_a_main_process_dataloader(small: tuple[Path, Path], threads: int, uint8: bool) -> None:
    want = _dataloader(_stream(small[1], return_uint8=uint8), 5)
    got = list(BatchLoader(_stream(small[1], return_uint8=uint8), 5, threads=threads))
    _assert_batches_equal(got, want)
    assert sum(len(b["index"]) for b in got) == TOTAL
    assert isinstance(got[0]["task"], list) and got[0]["observation.images.cam0"].is_contiguous()


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
def test_channels_last_batches_hold_the_same_values_laid_out_hwc(
    small: tuple[Path, Path], uint8: bool
) -> None:
    want = _dataloader(_stream(small[1], return_uint8=uint8), 5)
    got = list(BatchLoader(_stream(small[1], return_uint8=uint8), 5, channels_last=True))
    _assert_batches_equal(got, want)
    single, window = got[0]["observation.images.cam1"], got[0]["observation.images.cam0"]
    assert single.dim() == 4 and single.is_contiguous(memory_format=torch.channels_last)
    assert not single.is_contiguous()
    assert window.dim() == 5 and window.movedim(-3, -1).is_contiguous()  # (B, T, H, W, C) in memory
    assert got[0]["action"].is_contiguous()  # only the cameras


def test_a_mixture_and_a_transform_equal_the_dataloader_too(small: tuple[Path, Path]) -> None:
    def stream() -> EpisodeStream:
        return _stream([small[0], small[1]], weights=[1, 2], samples_per_epoch=50, image_transforms=flip)

    want = _dataloader(stream(), 8)
    got = list(BatchLoader(stream(), 8, threads=2, batches_ahead=1))
    _assert_batches_equal(got, want)
    assert "dataset_index" in got[0]


def test_transforms_run_one_at_a_time_across_the_batches_in_flight(small: tuple[Path, Path]) -> None:
    inside, most, lock = [0], [0], threading.Lock()

    def slow_transform(frames: torch.Tensor) -> torch.Tensor:  # not thread-safe, as a user's may be
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.002)
        with lock:
            inside[0] -= 1
        return frames

    stream = _stream(small[1], delta_timestamps=None, image_transforms=slow_transform)
    batches = list(BatchLoader(stream, 2, threads=3, batches_ahead=3))
    assert sum(len(b["index"]) for b in batches) == TOTAL and most[0] == 1


def test_len_is_the_batches_of_an_epoch_and_every_frame_comes_once(small: tuple[Path, Path]) -> None:
    loader = BatchLoader(_stream(small[1], delta_timestamps=None), 8)
    batches = list(loader)
    assert len(loader) == len(batches) == -(-TOTAL // 8)
    seen = Counter(
        (int(e), int(f)) for b in batches for e, f in zip(b["episode_index"], b["frame_index"], strict=True)
    )
    assert len(seen) == TOTAL and max(seen.values()) == 1
    loader.set_epoch(1)
    again = [
        (int(e), int(f)) for b in loader for e, f in zip(b["episode_index"], b["frame_index"], strict=True)
    ]
    assert sorted(again) == sorted(seen) and again != list(seen)  # another order, the same frames


@pytest.mark.integration
def test_resume_in_a_new_process_continues_at_the_next_batch(
    small: tuple[Path, Path], tmp_path: Path
) -> None:
    spec = {
        "root": str(small[1]),
        "num_workers": 0,
        "loader": "batch",
        "threads": 2,
        "batch_size": 4,
        "seed": 4,
    }
    whole = job(spec, tmp_path, "whole")["batches"]
    first = job({**spec, "stop_after": 7}, tmp_path, "first")
    assert first["state"]["batches_consumed"] == 7 and first["state"]["num_workers"] == 0
    rest = job({**spec, "state": first["state"]}, tmp_path, "rest")
    assert first["batches"] + rest["batches"] == whole
    # Its state is a main-process DataLoader's: that resumes it exactly, and it resumes that.
    dataloader = job({**spec, "loader": None, "state": first["state"]}, tmp_path, "dataloader")
    assert dataloader["batches"] == rest["batches"]
    # A DataLoader with workers streams the rest of the epoch on its own topology: each frame once.
    elastic = job({**spec, "loader": None, "num_workers": 2, "state": first["state"]}, tmp_path, "elastic")
    after = Counter(tuple(p) for b in first["batches"] + elastic["batches"] for p in b)
    assert len(after) == TOTAL and max(after.values()) == 1


def test_a_state_mid_batch_resumes_by_its_batches(small: tuple[Path, Path]) -> None:
    loader = BatchLoader(_stream(small[1]), 6)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    state = loader.state_dict()
    assert state["batches_consumed"] == 3 and state["batch_size"] == 6
    resumed = BatchLoader(_stream(small[1]), 6)
    resumed.load_state_dict(state)
    want = _dataloader(_stream(small[1]), 6)[3:]
    _assert_batches_equal(list(resumed), want)


@pytest.mark.integration
def test_torchrun_two_ranks_each_read_their_half(small: tuple[Path, Path], tmp_path: Path) -> None:
    spec = {"root": str(small[1]), "num_workers": 0, "loader": "batch", "threads": 2, "batch_size": 4}
    per_rank = torchrun(spec, tmp_path)
    samples = [[tuple(p) for b in r["batches"] for p in b] for r in per_rank]
    assert len(samples[0]) == len(samples[1]) == TOTAL // 2
    seen = Counter(p for s in samples for p in s)
    assert max(seen.values()) == 1 and len(seen) == TOTAL - TOTAL % 2


def test_a_broken_video_is_a_decode_error_naming_episode_camera_file(
    small: tuple[Path, Path], tmp_path: Path
) -> None:
    rel = str(ReferenceDataset(small[1]).video_path(2, "observation.images.cam1").relative_to(small[1]))
    copy = tmp_path / "copy"
    shutil.copytree(small[1], copy)
    # The size the index lists, other bytes: refused when the video is first opened (its sha256).
    (copy / rel).write_bytes(b"\x00" * (copy / rel).stat().st_size)
    loader = BatchLoader(EpisodeStream(copy, episodes=[1, 2], shuffle=False), 4)
    with pytest.raises(
        DecodeError, match=rf"Invalid video .*{rel} \(episode 2, camera 'observation.images.cam1'\)"
    ):
        list(loader)


def test_batches_are_refused_in_a_dataloader_worker_and_bad_arguments_named(small: tuple[Path, Path]) -> None:
    class Inside(torch.utils.data.IterableDataset):
        def __init__(self, stream: EpisodeStream) -> None:
            self.stream = stream

        def __iter__(self):  # type: ignore[no-untyped-def]
            return self.stream.batches(4)

    with pytest.raises(ValueError, match=r"Invalid stream.batches\(\) call in a DataLoader worker"):
        list(DataLoader(Inside(_stream(small[1])), batch_size=None, num_workers=1))
    with pytest.raises(ValueError, match=r"Invalid batch_size \(0\)"):
        BatchLoader(_stream(small[1]), 0)
    with pytest.raises(ValueError, match=r"Invalid threads \(0\)"):
        BatchLoader(_stream(small[1]), 4, threads=0)
    with pytest.raises(
        ValueError, match=r"Invalid num_workers for this stream .*one consumer per rank.* num_workers=2"
    ):
        list(BatchLoader(_stream(small[1], num_workers=2), 4))
    with pytest.raises(ValueError, match=r"a DataLoader with 0 workers|one consumer per rank"):
        list(DataLoader(_stream(small[1], num_workers=2), batch_size=4))
    assert list(BatchLoader(_stream(small[1], num_workers=0), 40))  # what lrs prewarm --spec then plans
    with pytest.raises(ValueError, match=r"Invalid stream \(DataLoader\)"):
        BatchLoader(DataLoader(_stream(small[1])), 4)  # type: ignore[arg-type]


def test_a_dataloader_state_resumes_a_batch_loader(small: tuple[Path, Path]) -> None:
    loader = ResumableLoader(DataLoader(_stream(small[1]), batch_size=5, num_workers=0, collate_fn=collate))
    for i, _ in enumerate(loader):
        if i == 4:
            break
    resumed = BatchLoader(_stream(small[1]), 5)
    resumed.load_state_dict(loader.state_dict())
    _assert_batches_equal(list(resumed), _dataloader(_stream(small[1]), 5)[5:])
