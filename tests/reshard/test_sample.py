"""The sample generator: lerobot-like layout, determinism for a seed, identifiable frames after decode."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from torchcodec.decoders import VideoDecoder

from reshard.demo.frame_marks import draw_frame, read_frame_id
from reshard.demo.sample import write_sample
from reshard.demo.sample_spec import SampleSpec
from reshard.source.checks import validate
from reshard.source.model import open_source


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample(tmp_path_factory.mktemp("s") / "ds", episodes=7, cameras=2)


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = write_sample(tmp_path / "a", episodes=4, cameras=1, seed=3)
    b = write_sample(tmp_path / "b", episodes=4, cameras=1, seed=3)
    c = write_sample(tmp_path / "c", episodes=4, cameras=1, seed=4)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


def test_layout_packs_episodes_like_lerobot(sample: Path) -> None:
    source = open_source(str(sample))
    validate(source)
    assert len(source.data_files()) == 3  # 7 episodes, 3 per file
    assert len(source.video_files()) == 2 * 3
    # lerobot 0.6.1 writes one row group per episode inside each data file.
    for rel, episodes in source.episodes_by_data_file().items():
        assert pq.ParquetFile(sample / rel).num_row_groups == len(episodes)
    lengths = {e.length for e in source.episodes}
    assert len(lengths) > 1, "episode lengths should vary"


def _packed_sample(path: Path, episodes: int, **options: Any) -> Path:
    """A sample of `episodes` short episodes (9 to 12 frames) that share one data file and one video file
    per camera: what the modes that show between episodes need."""
    files = {"episodes_per_data_file": episodes, "episodes_per_video_file": episodes}
    return write_sample(path, episodes=episodes, min_length=9, max_length=12, **files, **options)


def test_converted_mode_spans_episodes(tmp_path: Path) -> None:
    root = _packed_sample(tmp_path / "conv", 6, cameras=0, converted=True)
    pf = pq.ParquetFile(root / "data/chunk-000/file-000.parquet")
    assert pf.num_row_groups < 6
    first = pf.read_row_group(0, columns=["episode_index"]).column(0).to_pylist()
    assert len(set(first)) > 1


@pytest.mark.parametrize(
    "episode,frame,camera",
    [(0, 0, 0), (5, 17, 1), (1234, 4321, 3), (65535, 1, 2)],
    ids=["zeros", "small", "large", "max-episode"],
)
def test_frame_id_roundtrip_raw(episode: int, frame: int, camera: int) -> None:
    img = draw_frame(episode, frame, camera, height=64, width=96)
    assert read_frame_id(img) == (episode, frame, camera)
    assert read_frame_id(img.transpose(2, 0, 1).astype(np.float32) / 255) == (episode, frame, camera)


def test_every_frame_identifiable_after_av1_decode(sample: Path) -> None:
    source = open_source(str(sample))
    for cam, key in enumerate(source.video_keys):
        for rel, episodes in source.episodes_by_video_file(key).items():
            decoder = VideoDecoder(str(sample / rel))
            for episode in episodes:
                seg = episode.video(key)
                # lerobot maps a timestamp to the frame round(t * fps) of the file.
                times = [seg.from_timestamp + i / source.info.fps for i in range(episode.length)]
                frames = decoder.get_frames_at([round(t * source.info.fps) for t in times]).data
                got = [read_frame_id(f) for f in frames]
                assert got == [(episode.episode_index, i, cam) for i in range(episode.length)]


def _keyframe_times(path: Path) -> set[float]:
    """The presentation times of a video file's keyframes, in seconds rounded to 0.1 ms."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            round(float(p.pts * stream.time_base), 4)
            for p in container.demux(stream)
            if p.pts is not None and p.is_keyframe
        }


def test_episode_starts_are_keyframes(sample: Path) -> None:
    source = open_source(str(sample))
    key = source.video_keys[0]
    for rel, episodes in source.episodes_by_video_file(key).items():
        keyframes = _keyframe_times(sample / rel)
        for episode in episodes:
            assert round(episode.video(key).from_timestamp, 4) in keyframes


def test_unaligned_mode_has_mid_gop_starts(tmp_path: Path) -> None:
    root = _packed_sample(tmp_path / "u", 4, cameras=1, keyframe_aligned=False, gop=4)
    source = open_source(str(root))
    rel = source.video_files()[0]
    keyframes = _keyframe_times(root / rel)
    starts = {round(e.video(source.video_keys[0]).from_timestamp, 4) for e in source.episodes}
    assert starts - keyframes, "some episode should start between keyframes"


@pytest.mark.parametrize(
    "field,value",
    [("width", 62), ("height", 47), ("codec", "vp9"), ("min_length", 0)],
    ids=["narrow", "odd-height", "codec", "zero-length"],
)
def test_spec_validation(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"Invalid {field}"):
        SampleSpec(**{field: value})
