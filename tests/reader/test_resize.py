"""`EpisodeStream(resize=(H, W))`: colour cameras decoded at full size and scaled in uint8 (bilinear,
antialiased): exactly torchvision's resize of the full-size frame; the metadata, batches, windows and
resume follow; depth cameras keep their size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.functional import interpolate
from torch.utils.data import DataLoader

from reader import BatchLoader, DatasetMeta, EpisodeStream, collate
from reader.plan.spec import ReadSpec

CAMS = ("observation.images.cam0", "observation.images.cam1")
SIZE = (30, 41)  # the sample's frames are 64x96: a downscale, with an odd side (the frames are RGB)


def stream(root: Path, **kwargs: Any) -> EpisodeStream:
    return EpisodeStream(root, return_uint8=True, **{"seed": 3, "episode_pool_size": 4, **kwargs})


def by_index(samples: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(s["index"]): s for s in samples}


def resized_like_torchvision(frame: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """torchvision's `Resize(size)` of a uint8 (..., C, H, W) frame (bilinear, antialiased)."""
    batch = frame.reshape(-1, *frame.shape[-3:])
    return interpolate(batch, size=size, mode="bilinear", antialias=True).reshape(*frame.shape[:-2], *size)


def test_the_frames_are_torchvisions_resize_of_the_full_frame(small_lrs: Path) -> None:
    """Exactly: decoded at full size, then scaled in uint8 as torchvision's `Resize` scales a tensor."""
    full = by_index(list(stream(small_lrs)))
    resized = by_index(list(stream(small_lrs, resize=SIZE)))
    assert full.keys() == resized.keys() and len(resized) == stream(small_lrs).num_frames
    for index, sample in resized.items():
        for cam in CAMS:
            frame = sample[cam]
            assert frame.dtype == torch.uint8 and frame.shape == (3, *SIZE)
            assert torch.equal(frame, resized_like_torchvision(full[index][cam], SIZE)), (index, cam)


def test_the_order_and_the_rest_of_a_sample_do_not_change(small_lrs: Path) -> None:
    full, resized = list(stream(small_lrs)), list(stream(small_lrs, resize=SIZE))
    assert [int(s["index"]) for s in full] == [int(s["index"]) for s in resized]
    for a, b in zip(full, resized, strict=True):
        assert list(a) == list(b)
        for key in set(a) - set(CAMS):
            assert a[key] == b[key] if isinstance(a[key], str) else torch.equal(a[key], b[key])


def test_meta_reports_the_resized_shapes(small_lrs: Path) -> None:
    stored = DatasetMeta.open(str(small_lrs))
    meta = stream(small_lrs, resize=SIZE).meta
    for cam in CAMS:
        assert stored.features[cam]["names"] == ["height", "width", "channels"]
        assert stored.shapes[cam] == (64, 96, 3)
        assert meta.features[cam]["shape"] == meta.shapes[cam] == (*SIZE, 3)
        info = meta.features[cam]["info"]
        assert (info["video.height"], info["video.width"]) == SIZE  # as `lrs reshard --resize` writes it
        assert stored.features[cam]["info"]["video.height"] == 64
    assert {k: v for k, v in meta.shapes.items() if k not in CAMS} == {
        k: v for k, v in stored.shapes.items() if k not in CAMS
    }
    assert DatasetMeta.open(str(small_lrs), resize=SIZE).shapes == meta.shapes


@pytest.mark.parametrize("channels_last", [False, True], ids=["chw", "channels-last"])
def test_batches_follow_the_size(small_lrs: Path, channels_last: bool) -> None:
    ds = EpisodeStream(small_lrs, resize=SIZE, seed=3, episode_pool_size=4)
    got = list(BatchLoader(ds, batch_size=4, channels_last=channels_last))
    want = list(DataLoader(ds, batch_size=4, num_workers=0, collate_fn=collate))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        for cam in CAMS:
            assert a[cam].dtype == torch.float32 and a[cam].shape == (len(a["index"]), 3, *SIZE)
            assert a[cam].is_contiguous(memory_format=torch.channels_last) == channels_last
            assert torch.equal(a[cam], b[cam])


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_workers_resize_too(small_lrs: Path) -> None:
    ds = stream(small_lrs, resize=SIZE, batch_size=4)
    single = by_index(list(ds))
    seen = 0
    for batch in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate):
        for row, index in enumerate(batch["index"].tolist()):
            assert all(torch.equal(batch[cam][row], single[index][cam]) for cam in CAMS)
            seen += 1
    assert seen == len(single)


def test_windows_and_transforms_see_resized_frames(small_lrs: Path) -> None:
    fps = stream(small_lrs).fps
    seen: list[tuple[int, ...]] = []

    def transform(frames: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(frames.shape))
        return frames

    windows = {CAMS[0]: [-1 / fps, 0.0]}
    single = by_index(list(stream(small_lrs, resize=SIZE)))
    windowed = stream(small_lrs, resize=SIZE, delta_timestamps=windows, image_transforms=transform)
    for sample in windowed:
        frames, index = sample[CAMS[0]], int(sample["index"])
        assert frames.shape == (2, 3, *SIZE) and sample[CAMS[1]].shape == (3, *SIZE)
        previous = index if bool(sample[f"{CAMS[0]}_is_pad"][0]) else index - 1
        assert torch.equal(frames[1], single[index][CAMS[0]])
        assert torch.equal(frames[0], single[previous][CAMS[0]])
    assert set(seen) == {(2, 3, *SIZE), (3, *SIZE)}


def test_depth_cameras_keep_their_size(sample_depth_ds: Path) -> None:
    full, resized = stream(sample_depth_ds), stream(sample_depth_ds, resize=SIZE)
    (depth,) = resized.meta.depth_keys
    (cam,) = [k for k in resized.meta.video_keys if k != depth]
    assert resized.meta.shapes[depth] == full.meta.shapes[depth]
    assert resized.meta.shapes[cam] == (*SIZE, 3)
    a, b = by_index(list(full)), by_index(list(resized))
    for index, sample in b.items():
        assert sample[cam].shape == (3, *SIZE)
        assert torch.equal(sample[depth], a[index][depth])


def test_a_resumed_stream_may_resize_differently(small_lrs: Path) -> None:
    """A resume state names the order, which resize does not change: a run may resume at another size."""
    whole = [int(s["index"]) for s in stream(small_lrs)]
    state = stream(small_lrs).state_dict(batches_consumed=5, batch_size=3, num_workers=0)
    assert "resize" not in state
    resumed = stream(small_lrs, resize=SIZE)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert [int(s["index"]) for s in rest] == whole[15:]
    assert all(s[cam].shape == (3, *SIZE) for s in rest for cam in CAMS)


@pytest.mark.parametrize(
    "size",
    [(0, 41), (30,), (30, 41, 3), (30.0, 41), (True, 41), (30, 8193), "30x41", 224],
    ids=["zero", "one-side", "three", "float", "bool", "too-big", "string", "int"],
)
def test_a_bad_size_is_refused(small_lrs: Path, size: Any) -> None:
    with pytest.raises(
        ValueError, match=r"^Invalid resize \(.+\)\. Expected \(height, width\) in pixels, each"
    ):
        EpisodeStream(small_lrs, resize=size)


def test_the_spec_holds_the_size(small_lrs: Path) -> None:
    spec = stream(small_lrs, resize=[30, 41]).spec
    assert spec.resize == SIZE
    assert ReadSpec.from_json(spec.to_json()) == spec
    assert EpisodeStream(spec).meta.shapes[CAMS[0]] == (*SIZE, 3)
