"""Decoding frames by timestamp: lerobot's semantics, both seek modes, the decoder LRU, clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torchcodec.decoders import VideoDecoder

from reader.decode.video import Decoders, VideoWhere, _closest, check_device, decode_frames
from reader.errors import DecodeError
from reshard.demo.frame_marks import read_frame_id

WHERE = VideoWhere(episode=3, camera="observation.images.cam1", file="videos/x.mp4")
CAM = "observation.images.cam1"


def _packed_file(root: Path) -> Path:
    return root / f"videos/{CAM}/chunk-000/file-000.mp4"


@pytest.mark.parametrize("return_uint8", [False, True], ids=["float", "uint8"])
def test_decode_matches_a_fresh_lerobot_style_decode(small: tuple[Path, Path], return_uint8: bool) -> None:
    path = str(_packed_file(small[0]))
    decoders = Decoders(2)
    reference = VideoDecoder(path, seek_mode="approximate")
    fps = reference.metadata.average_fps
    timestamps = [i / fps for i in range(reference.metadata.num_frames)]
    for ts in ([timestamps[5]], timestamps[3:7], [timestamps[0], timestamps[-1]]):
        got = decode_frames(
            decoders.get(path, WHERE), ts, tolerance_s=1e-4, return_uint8=return_uint8, where=WHERE
        )
        want = reference.get_frames_at([round(t * fps) for t in ts]).data
        want = want if return_uint8 else (want / 255.0).type(torch.float32)
        assert got.dtype == (torch.uint8 if return_uint8 else torch.float32)
        assert torch.equal(got, want)


@pytest.mark.integration
def test_approximate_and_exact_seek_give_identical_frames(small: tuple[Path, Path]) -> None:
    for root in small:
        for path in sorted(root.glob(f"videos/{CAM}/*/*.mp4")):
            approx = Decoders(1, seek_mode="approximate").get(str(path), WHERE)
            exact = Decoders(1, seek_mode="exact").get(str(path), WHERE)
            count = exact.metadata.num_frames
            timestamps = [i / exact.metadata.average_fps for i in range(count)]
            order = list(range(count))[::-1]  # backwards: every query seeks
            got = [
                decode_frames(approx, [timestamps[i]], tolerance_s=1e-4, return_uint8=True, where=WHERE)
                for i in order
            ]
            want = [
                decode_frames(exact, [timestamps[i]], tolerance_s=1e-4, return_uint8=True, where=WHERE)
                for i in order
            ]
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), path


def test_frames_are_the_ones_asked_for(small: tuple[Path, Path]) -> None:
    path = small[1] / f"videos/{CAM}/chunk-000/file-001.mp4"  # lrs/1: episode 1 alone
    decoder = Decoders(1).get(str(path), WHERE)
    frames = decode_frames(decoder, [0.0, 5 / 30, 21 / 30], tolerance_s=1e-4, return_uint8=True, where=WHERE)
    assert [read_frame_id(f) for f in frames] == [(1, 0, 1), (1, 5, 1), (1, 21, 1)]


def test_timestamps_off_the_frame_grid_are_refused(small: tuple[Path, Path]) -> None:
    decoder = Decoders(1).get(str(_packed_file(small[0])), WHERE)
    with pytest.raises(
        DecodeError,
        match=r"Invalid frame timestamps in videos/x\.mp4 \(episode 3, camera 'observation\.images\.cam1'\): "
        r"queried \[0\.0\d*, 0\.01\d*\] s.*Expected within tolerance_s=0\.0001",
    ):
        decode_frames(decoder, [0.0, 0.012], tolerance_s=1e-4, return_uint8=True, where=WHERE)


def test_frames_beyond_the_end_are_a_decode_error(small: tuple[Path, Path]) -> None:
    decoder = Decoders(1).get(str(_packed_file(small[0])), WHERE)
    with pytest.raises(
        DecodeError,
        match=r"Invalid video videos/x\.mp4 \(episode 3, camera .*cannot decode the frames at \[100\.0\] s",
    ):
        decode_frames(decoder, [100.0], tolerance_s=1e-4, return_uint8=True, where=WHERE)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"Invalid video videos/x\.mp4 \(episode 3, camera 'observation\.images\.cam1'\): missing"),
        (
            b"not a video at all" * 100,
            r"Invalid video videos/x\.mp4 \(episode 3, camera 'observation\.images\.cam1'\): cannot open",
        ),
    ],
    ids=["missing", "garbage"],
)
def test_unreadable_files_are_decode_errors(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "bad.mp4"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DecodeError, match=message):
        Decoders(1).get(str(path), WHERE)


def test_a_cursor_serves_windows_from_the_frames_it_keeps(
    small: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(small[1] / f"videos/{CAM}/chunk-000/file-001.mp4")  # lrs/1: episode 1 alone, 22 frames
    cursor = Decoders(1).get(path, WHERE, keep=2)
    reference = VideoDecoder(path, seek_mode="approximate")
    asked: list[list[int]] = []
    real = cursor.decoder.get_frames_at
    monkeypatch.setattr(
        cursor.decoder, "get_frames_at", lambda indices: (asked.append(indices), real(indices=indices))[1]
    )
    for frame in range(2, 12):  # a window [-2, -1, 0] slid forward one frame at a time
        window = [(frame + d) / 30 for d in (-2, -1, 0)]
        got = decode_frames(cursor, window, tolerance_s=1e-4, return_uint8=True, where=WHERE)
        assert torch.equal(got, reference.get_frames_at([frame - 2, frame - 1, frame]).data)
    assert asked == [[0, 1, 2]] + [[f] for f in range(3, 12)]  # each frame decoded once
    # Another run starts earlier in the episode: only the window's frames stay kept, none beyond.
    decode_frames(cursor, [3 / 30, 4 / 30], tolerance_s=1e-4, return_uint8=True, where=WHERE)
    assert asked[-1] == [3, 4] and sorted(cursor._kept) == [3, 4]


def test_a_cursor_past_the_end_of_its_video_is_a_decode_error(small: tuple[Path, Path]) -> None:
    # A video with fewer frames than its table: the frame the table asks for is not there.
    path = str(small[1] / f"videos/{CAM}/chunk-000/file-001.mp4")
    cursor = Decoders(1).get(path, WHERE, keep=1)
    with pytest.raises(
        DecodeError,
        match=r"Invalid video videos/x\.mp4 \(episode 3, camera 'observation\.images\.cam1'\): cannot decode the frames at \[0\.7",
    ):
        decode_frames(cursor, [21 / 30, 22 / 30], tolerance_s=1e-4, return_uint8=True, where=WHERE)


def test_decoder_lru_is_bounded_and_reuses_open_decoders(small: tuple[Path, Path]) -> None:
    paths = [str(p) for p in sorted(small[1].glob(f"videos/{CAM}/*/*.mp4"))][:3]
    decoders = Decoders(2)
    first = decoders.get(paths[0], WHERE)
    decoders.get(paths[1], WHERE)
    assert decoders.get(paths[0], WHERE) is first and decoders.opened == 2
    decoders.get(paths[2], WHERE)  # evicts paths[1], the least recently used
    assert len(decoders) == 2
    assert decoders.get(paths[0], WHERE) is first and decoders.opened == 3
    decoders.get(paths[1], WHERE)
    assert decoders.opened == 4
    decoders.clear()
    assert len(decoders) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"capacity": 0}, r"Invalid decoder capacity \(0\)\. Expected an integer >= 1\."),
        (
            {"capacity": 1, "seek_mode": "fast"},
            r"Invalid seek_mode \('fast'\)\. Expected 'exact' or 'approximate'\.",
        ),
    ],
    ids=["capacity", "seek-mode"],
)
def test_decoder_arguments_are_checked(args: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Decoders(**args)


def test_decode_device_is_checked() -> None:
    assert check_device("cpu") == "cpu"
    with pytest.raises(
        ValueError, match=r"Invalid decode_device \('tpu'\)\. Expected 'cpu' or 'cuda\[:<index>\]'\."
    ):
        check_device("tpu")
    if torch.cuda.is_available():
        assert check_device("cuda") == "cuda"
    else:
        with pytest.raises(ValueError, match=r"Invalid decode_device \('cuda'\): CUDA is not available here"):
            check_device("cuda")


@pytest.mark.parametrize("tolerance_s", [1e-4, 1e-3, 0.02], ids=["1e-4", "1e-3", "0.02"])
def test_single_query_check_is_lerobots_float32_check(tolerance_s: float) -> None:
    rng = np.random.default_rng(0)
    for _ in range(3000):
        query = float(rng.uniform(0, 100))
        loaded = query + tolerance_s * float(rng.choice([-1, 1])) * (1 + float(rng.normal(0, 1e-6)))
        distance = torch.cdist(torch.tensor([query])[:, None], torch.tensor([loaded])[:, None], p=1).min(1)[0]
        lerobot_accepts = bool((distance < tolerance_s).all())
        try:
            _closest(
                [query], torch.tensor([loaded], dtype=torch.float64), tolerance_s=tolerance_s, where=WHERE
            )
            accepted = True
        except DecodeError:
            accepted = False
        assert accepted == lerobot_accepts, (query, loaded)


def test_tolerance_is_compared_in_float32_like_lerobot() -> None:
    # float32(1e-4) < 1e-4: a gap of exactly float32(1e-4) passes a float64 check but not lerobot's.
    gap = float(np.float32(1e-4))
    distance = torch.cdist(torch.tensor([0.0])[:, None], torch.tensor([gap])[:, None], p=1).min(1)[0]
    assert not bool((distance < 1e-4).all()) and gap < 1e-4
    with pytest.raises(DecodeError, match="Invalid frame timestamps"):
        _closest([0.0], torch.tensor([gap], dtype=torch.float64), tolerance_s=1e-4, where=WHERE)


def _blank_video(path: Path, width: int, height: int) -> Path:
    """Two black frames of `width` x `height` (H.264)."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(2):
            frame = av.VideoFrame.from_ndarray(np.zeros((height, width, 3), np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def test_a_frame_larger_than_8192_is_refused_before_decoding(tmp_path: Path) -> None:
    wide = _blank_video(tmp_path / "wide.mp4", 8208, 16)
    pattern = (
        r"Invalid video videos/x\.mp4 \(episode 3, camera 'observation\.images\.cam1'\): frame size 8208x16\. "
        r"Expected at most 8192x8192"
    )
    with pytest.raises(DecodeError, match=pattern):
        Decoders(1).get(str(wide), WHERE)
    widest = _blank_video(tmp_path / "widest.mp4", 8192, 16)
    frames = decode_frames(
        Decoders(1).get(str(widest), WHERE), [0.0], tolerance_s=1e-4, return_uint8=True, where=WHERE
    )
    assert frames.shape == (1, 3, 16, 8192)
