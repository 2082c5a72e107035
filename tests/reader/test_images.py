"""Cameras stored as images in the parquet files (`dtype: image`): read as lerobot reads them (PIL, then
`ToTensor`: float32 CHW / 255), windows stacked, through workers, and kept by reshard."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from PIL import Image
from torch.utils.data import DataLoader

from reader import EpisodeStream
from reader.decode.images import decode_image
from reader.errors import DecodeError
from reshard.cli import cli
from tests.support.datasets import resharded, verified

CAM = "observation.images.cam0"
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def to_images(v3: Path, dest: Path) -> Path:
    """The v3 sample with its first camera's frames as PNG bytes in the data files, and no videos."""
    shutil.copytree(v3, dest)
    info = json.loads((dest / "meta/info.json").read_text())
    cams = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    frames: dict[int, np.ndarray] = {}
    episodes = pq.read_table(sorted((dest / "meta/episodes").rglob("*.parquet"))[0]).to_pylist()
    for ep in episodes:
        rel = info["video_path"].format(
            video_key=CAM,
            chunk_index=ep[f"videos/{CAM}/chunk_index"],
            file_index=ep[f"videos/{CAM}/file_index"],
        )
        start = ep[f"videos/{CAM}/from_timestamp"]
        with av.open(str(dest / rel)) as container:
            for frame in container.decode(video=0):
                i = round((float(frame.time) - start) * info["fps"])
                if 0 <= i < ep["length"]:
                    frames[ep["dataset_from_index"] + i] = frame.to_ndarray(format="rgb24")
    for path in sorted((dest / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        column = [{"bytes": _png(frames[i]), "path": None} for i in table.column("index").to_pylist()]
        pq.write_table(table.append_column(CAM, pa.array(column, IMAGE)), path)
    info["features"][CAM] = {**info["features"][CAM], "dtype": "image"}
    info["features"][CAM].pop("info", None)
    for other in cams[1:]:
        info["features"].pop(other)
    info.pop("video_path")
    (dest / "meta/info.json").write_text(json.dumps(info))
    shutil.rmtree(dest / "videos")
    for path in sorted((dest / "meta/episodes").rglob("*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table.drop_columns([c for c in table.column_names if c.startswith("videos/")]), path)
    return dest


@pytest.fixture(scope="module")
def images(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return to_images(sample_ds, tmp_path_factory.mktemp("images") / "v3")


def _expected(root: Path, index: int) -> torch.Tensor:
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path, columns=["index", CAM]).to_pylist()
        for row in table:
            if row["index"] == index:
                pixels = np.array(Image.open(io.BytesIO(row[CAM]["bytes"])))
                return torch.from_numpy(pixels).permute(2, 0, 1).float().div(255)
    raise KeyError(index)


def test_images_read_as_lerobot_reads_them(images: Path) -> None:
    windows = {CAM: [-1 / 30, 0.0]}
    samples = list(EpisodeStream(images, delta_timestamps=windows, seed=2))
    assert len(samples) == json.loads((images / "meta/info.json").read_text())["total_frames"]
    for sample in samples[:40]:
        frames = sample[CAM]
        assert frames.dtype == torch.float32 and frames.shape[0] == 2 and frames.shape[1] == 3
        index = int(sample["index"])
        assert torch.equal(frames[1], _expected(images, index))
        pad = sample[f"{CAM}_is_pad"]
        previous = index if bool(pad[0]) else index - 1
        assert torch.equal(frames[0], _expected(images, previous))


def test_uint8_transforms_and_workers(images: Path) -> None:
    stream = EpisodeStream(images, return_uint8=True)
    first = next(iter(stream))
    assert first[CAM].dtype == torch.uint8 and first[CAM].ndim == 3
    loader = DataLoader(EpisodeStream(images, batch_size=4), batch_size=4, num_workers=2)
    total = sum(len(b["index"]) for b in loader)
    assert total == len(EpisodeStream(images))
    stats = EpisodeStream(images).meta
    assert stats.image_keys == [CAM] and stats.camera_keys == [CAM]


def test_reshard_keeps_images_and_the_stream_reads_the_same(images: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    verified(resharded(images, out), images)
    described = CliRunner().invoke(cli, ["describe", str(out)])  # what `lrs describe` says of it
    assert f"cameras   {CAM}  images in the parquet" in described.output, described.output
    a = {int(s["index"]): s[CAM] for s in EpisodeStream(images, seed=1)}
    b = {int(s["index"]): s[CAM] for s in EpisodeStream(out, seed=1)}
    assert a.keys() == b.keys() and all(torch.equal(a[i], b[i]) for i in a)


def test_a_broken_image_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="Invalid image cam of x: cannot decode"):
        decode_image(b"not a png", where="cam of x")
    with pytest.raises(DecodeError, match="no bytes"):
        decode_image(None, where="cam of x")
    depth = io.BytesIO()
    Image.fromarray(np.array([[1, 2], [3, 65535]], dtype=np.uint16)).save(depth, format="PNG")
    got = decode_image(depth.getvalue())
    assert got.dtype == torch.float32 and got.tolist() == [[[1.0, 2.0], [3.0, 65535.0]]]


def test_lrs_sample_writes_image_cameras_that_reshard_and_read(tmp_path: Path) -> None:
    from reshard.demo.frame_marks import read_frame_id
    from reshard.demo.sample import write_sample

    v3, out = tmp_path / "v3", tmp_path / "lrs"
    write_sample(v3, episodes=3, cameras=1, image_cameras=1, seed=3)
    info = json.loads((v3 / "meta/info.json").read_text())
    key = "observation.images.image0"
    assert info["features"][key]["dtype"] == "image" and key in json.loads(
        (v3 / "meta/stats.json").read_text()
    )
    verified(resharded(v3, out), v3)
    for root in (v3, out):
        seen = 0
        for item in EpisodeStream(root, return_uint8=True):
            episode, frame = int(item["episode_index"]), int(item["frame_index"])
            assert item[key].shape == (3, 64, 96) and item[key].dtype == torch.uint8
            assert read_frame_id(item[key]) == (episode, frame, 1)  # camera index: after the 1 video camera
            assert read_frame_id(item["observation.images.cam0"]) == (episode, frame, 0)
            seen += 1
        assert seen == info["total_frames"]


@pytest.mark.parametrize("return_uint8", [False, True], ids=["float", "uint8"])
def test_resize_scales_images_as_torchvision_does(images: Path, return_uint8: bool) -> None:
    size = (30, 41)
    full = {int(s["index"]): s[CAM] for s in EpisodeStream(images, seed=1, return_uint8=True)}
    stream = EpisodeStream(images, seed=1, return_uint8=return_uint8, resize=size)
    assert stream.meta.shapes[CAM] == (*size, 3)
    for sample in stream:
        # In uint8, before the float conversion, as a video frame is resized.
        want = torch.nn.functional.interpolate(
            full[int(sample["index"])][None], size, mode="bilinear", antialias=True
        )
        assert torch.equal(sample[CAM], want[0] if return_uint8 else want[0].float().div(255))


def test_resize_gives_video_and_image_cameras_one_size(tmp_path: Path) -> None:
    from reshard.demo.sample import write_sample

    v3 = write_sample(tmp_path / "v3", episodes=2, cameras=1, image_cameras=1, seed=3)
    keys = ("observation.images.cam0", "observation.images.image0")
    stream = EpisodeStream(v3, resize=(48, 64), delta_timestamps={keys[1]: [-1 / 30, 0.0]})
    assert [stream.meta.shapes[k] for k in keys] == [(48, 64, 3), (48, 64, 3)]
    for sample in stream:
        assert (sample[keys[0]].shape, sample[keys[1]].shape) == ((3, 48, 64), (2, 3, 48, 64))
