"""Per-episode videos: lossless copy split, fallback re-encode, H.265/H.264 re-encode, probe, compare, errors.

The oracle is independent of `reshard.video.write`: files are decoded whole with PyAV and frame `i` of an
episode is the source frame nearest to `from_timestamp + i / fps` (numpy argmin), and every frame carries
its (episode, frame, camera) in its pixels (`read_frame_id`).
"""

from __future__ import annotations

import functools
import io
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from av.video.frame import PictureType
from av.video.reformatter import ColorRange
from torchcodec.decoders import VideoDecoder

from reader.errors import DatasetError
from reshard.demo.frame_marks import draw_frame, read_frame_id
from reshard.demo.sample import write_sample
from reshard.demo.sample_video import concat_remux, encode_frames
from reshard.errors import ReshardError
from reshard.source.model import open_source
from reshard.video import write as videos
from reshard.video.compare import ColourFit
from reshard.video.encode import X265_NO_CUTREE_WIDTH, Colour, EncoderSettings, add_video_stream
from reshard.video.resize import Resize
from reshard.video.write import (
    DEFAULT_CRF,
    DEFAULT_GOP,
    EpisodeVideo,
    compare_episode_video,
    probe_video,
    write_episode_video,
)

FPS = 30
HEIGHT, WIDTH = 64, 96


# --- oracle ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decoded:
    """A whole file decoded with PyAV, in presentation order."""

    times: np.ndarray
    planes: tuple[np.ndarray, ...]  # native pixel format (yuv420p here)
    ids: tuple[tuple[int, int, int], ...]
    keyframe_times: tuple[float, ...]
    picture_types: str  # one letter per frame: I, P, B


@functools.lru_cache(maxsize=128)
def decode_all(path: str) -> Decoded:
    with av.open(path) as container:
        stream = container.streams.video[0]
        keys = tuple(
            sorted(
                float(p.pts * stream.time_base)
                for p in container.demux(stream)
                if p.pts is not None and p.is_keyframe
            )
        )
        container.seek(0)
        frames = list(container.decode(stream))
    return Decoded(
        times=np.array([f.time for f in frames]),
        planes=tuple(f.to_ndarray() for f in frames),
        ids=tuple(read_frame_id(f.to_ndarray(format="rgb24")) for f in frames),
        keyframe_times=keys,
        picture_types="".join(PictureType(f.pict_type).name for f in frames),
    )


def nearest_indices(decoded: Decoded, from_timestamp: float, length: int) -> list[int]:
    targets = from_timestamp + np.arange(length) / FPS
    return [int(np.argmin(np.abs(decoded.times - t))) for t in targets]


@dataclass(frozen=True)
class Case:
    """One episode of one camera in a packed source file."""

    src: str
    from_timestamp: float
    length: int
    episode: int
    camera: int
    key: str

    def write(self, out_dir: Path, **kwargs: object) -> EpisodeVideo:
        out = out_dir / f"ep{self.episode}-cam{self.camera}.mp4"
        return write_episode_video(
            self.src,
            str(out),
            from_timestamp=self.from_timestamp,
            length=self.length,
            fps=FPS,
            episode=self.episode,
            camera=self.key,
            **kwargs,
        )

    @property
    def starts_on_keyframe(self) -> bool:
        return any(abs(t - self.from_timestamp) < 1e-6 for t in decode_all(self.src).keyframe_times)


def cases(root: Path) -> list[Case]:
    source = open_source(str(root))
    return [
        Case(
            str(root / source.video_file(e, key)),
            e.video(key).from_timestamp,
            e.length,
            e.episode_index,
            cam,
            key,
        )
        for e in source.episodes
        for cam, key in enumerate(source.video_keys)
    ]


def assert_timing(out: str, length: int) -> None:
    got = decode_all(out)
    assert len(got.times) == length
    np.testing.assert_allclose(got.times, np.arange(length) / FPS, atol=1e-9)


def assert_ids(case: Case, out: str) -> None:
    assert list(decode_all(out).ids) == [(case.episode, i, case.camera) for i in range(case.length)]


def assert_bit_identical(case: Case, out: str) -> None:
    src, dst = decode_all(case.src), decode_all(out)
    assert_timing(out, case.length)
    for i, j in enumerate(nearest_indices(src, case.from_timestamp, case.length)):
        assert np.array_equal(dst.planes[i], src.planes[j]), f"frame {i} differs from source frame {j}"


def keyframe_indices(out: str) -> list[int]:
    return [round(t * FPS) for t in probe_video(out).keyframe_times_s]


def assert_gop_pattern(out: str, length: int, gop: int) -> None:
    """Keyframes every `gop` frames, P-frames between them (no intra frame forced by the source's)."""
    assert keyframe_indices(out) == list(range(0, length, gop))
    assert decode_all(out).picture_types == "".join("P" if i % gop else "I" for i in range(length))


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """AV1 as lerobot writes it: 7 episodes, 2 cameras, 3 episodes per file (3 files per camera)."""
    return write_sample(
        tmp_path_factory.mktemp("av1") / "ds", episodes=7, cameras=2, episodes_per_video_file=3
    )


@pytest.fixture(scope="module")
def packed_by_codec(tmp_path_factory: pytest.TempPathFactory, packed: Path) -> dict[str, Path]:
    roots = {"av1": packed}
    for codec in ("hevc", "h264"):
        roots[codec] = write_sample(
            tmp_path_factory.mktemp(codec) / "ds",
            episodes=4,
            cameras=2,
            codec=codec,
            episodes_per_video_file=2,
        )
    return roots


@pytest.fixture(scope="module")
def unaligned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each video file encoded as one stream (g=2): some episodes start between keyframes."""
    return write_sample(
        tmp_path_factory.mktemp("unaligned") / "ds", episodes=5, cameras=1, keyframe_aligned=False
    )


BFRAME_LENGTHS = (13, 17, 11, 20)
BframeSources = dict[tuple[str, bool], list["Case"]]  # (codec, keyframe aligned) -> episodes


def _bframe_source(path: Path, codec: str, *, aligned: bool) -> list[Case]:
    def frames(ep: int) -> Iterator[np.ndarray]:
        return (draw_frame(ep, i, 0, height=HEIGHT, width=WIDTH) for i in range(BFRAME_LENGTHS[ep]))

    kwargs = dict(codec=codec, fps=FPS, gop=6, crf=20, height=HEIGHT, width=WIDTH, bframes=2)
    episodes = range(len(BFRAME_LENGTHS))
    if aligned:  # lerobot's way: each episode encoded on its own, then concatenated
        parts = []
        for ep in episodes:
            buf = io.BytesIO()
            encode_frames(frames(ep), buf, **kwargs)
            parts.append(buf.getvalue())
        starts = concat_remux(parts, str(path))
    else:
        encode_frames((f for ep in episodes for f in frames(ep)), str(path), **kwargs)
        starts = [sum(BFRAME_LENGTHS[:ep]) / FPS for ep in episodes]
    return [Case(str(path), starts[ep], BFRAME_LENGTHS[ep], ep, 0, "cam0") for ep in episodes]


@pytest.fixture(scope="module")
def bframe_sources(tmp_path_factory: pytest.TempPathFactory) -> BframeSources:
    root = tmp_path_factory.mktemp("bframes")
    return {
        (codec, aligned): _bframe_source(root / f"{codec}-{aligned}.mp4", codec, aligned=aligned)
        for codec in ("h264", "hevc")
        for aligned in (True, False)
    }


@pytest.fixture
def mid_case(packed: Path) -> Case:
    """Episode 1, camera 1: in the middle of its file, with episodes before and after it."""
    return next(c for c in cases(packed) if c.episode == 1 and c.camera == 1)


# --- copy --------------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("codec", ["av1", "hevc", "h264"])
def test_copy_split_is_bit_identical(packed_by_codec: dict[str, Path], codec: str, tmp_path: Path) -> None:
    all_cases = cases(packed_by_codec[codec])
    assert len({c.src for c in all_cases}) >= 4, "several files per camera, several cameras"
    for case in all_cases:
        result = case.write(tmp_path)
        assert (result.reencoded, result.reason, result.codec, result.frames) == (
            False,
            None,
            codec,
            case.length,
        )
        assert (result.pix_fmt, result.width, result.height) == ("yuv420p", WIDTH, HEIGHT)
        assert result.bytes == Path(result.path).stat().st_size
        assert_bit_identical(case, result.path)
        assert_ids(case, result.path)
        probe = probe_video(result.path)
        assert probe.starts_on_keyframe and probe.frames == case.length and probe.codec == codec
        data = Path(result.path).read_bytes()
        assert data.find(b"moov") < data.find(b"mdat"), "moov should come first (faststart)"


def test_copy_reports_the_source_gop(mid_case: Case, tmp_path: Path) -> None:
    assert mid_case.write(tmp_path).gop == 2  # estimated from the source's keyframes
    assert mid_case.write(tmp_path, gop=7, crf=33).gop == 7  # as the caller knows it (info.json video.g)


@pytest.mark.parametrize("codec", ["h264", "hevc"])
def test_copy_keeps_b_frames_bit_identical(bframe_sources: BframeSources, codec: str, tmp_path: Path) -> None:
    for case in bframe_sources[(codec, True)]:
        result = case.write(tmp_path)
        assert not result.reencoded, result.reason
        assert probe_video(result.path).reordered, "the copy keeps the source's B-frames"
        assert_bit_identical(case, result.path)
        assert_ids(case, result.path)


def test_copy_reencodes_episodes_that_start_between_keyframes(unaligned: Path, tmp_path: Path) -> None:
    kinds = set()
    for case in cases(unaligned):
        # An x265 preset name (a reshard-wide --preset) does not reach the AV1 encoder of the fallback.
        result = case.write(tmp_path, gop=2, crf=30, preset="fast")
        kinds.add(case.starts_on_keyframe)
        assert result.reencoded == (not case.starts_on_keyframe)
        assert (result.codec, result.gop, result.crf) == ("av1", 2, 30)
        assert_timing(result.path, case.length)
        assert_ids(case, result.path)
        assert probe_video(result.path).starts_on_keyframe
        if result.reencoded:
            assert re.match(
                r"the episode does not start on a keyframe \(first frame at \d+\.\d+ s", result.reason
            )
            # A second AV1 generation at the source's crf: close enough for verify's floor, not identical.
            comparison = compare_episode_video(
                case.src, case.from_timestamp, result.path, length=case.length, fps=FPS
            )
            assert not comparison.identical and comparison.passes(min_psnr_db=30), comparison
        else:
            assert_bit_identical(case, result.path)
    assert kinds == {True, False}, "the sample should have both aligned and unaligned episodes"


@pytest.mark.parametrize("codec", ["h264", "hevc"])
def test_copy_reencodes_when_b_frames_cross_the_boundary(
    bframe_sources: BframeSources, codec: str, tmp_path: Path
) -> None:
    expected = {
        0: None,
        1: "does not start on a keyframe",
        2: "interleaved in decode order",
        3: "does not start on a keyframe",
    }
    for case in bframe_sources[(codec, False)]:
        result = case.write(tmp_path)
        if expected[case.episode] is None:
            assert not result.reencoded
            assert_bit_identical(case, result.path)
        else:
            assert expected[case.episode] in result.reason
            assert result.codec == codec and not probe_video(result.path).reordered
        assert_timing(result.path, case.length)
        assert_ids(case, result.path)


def test_copy_without_an_encoder_for_the_codec(tmp_path: Path) -> None:
    src = tmp_path / "mpeg4.mp4"
    with av.open(str(src), "w") as container:
        stream = container.add_stream("mpeg4", rate=FPS)
        stream.width, stream.height, stream.pix_fmt, stream.codec_context.gop_size = (
            WIDTH,
            HEIGHT,
            "yuv420p",
            4,
        )
        for i in range(12):
            frame = av.VideoFrame.from_ndarray(
                draw_frame(0, i, 0, height=HEIGHT, width=WIDTH), format="rgb24"
            )
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    aligned = Case(str(src), 4 / FPS, 8, 0, 0, "cam0")
    result = aligned.write(tmp_path)
    assert (result.codec, result.reencoded) == ("mpeg4", False)
    unaligned = Case(str(src), 1 / FPS, 8, 0, 0, "cam0")
    with pytest.raises(
        ReshardError, match=r"does not start on a keyframe.*Invalid source codec for a re-encode \('mpeg4'\)"
    ):
        unaligned.write(tmp_path)


# --- re-encode -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("gop,threads", [(2, None), (5, 2)], ids=["gop2-1thread", "gop5-2threads"])
def test_hevc_reencode_properties(mid_case: Case, gop: int, threads: int | None, tmp_path: Path) -> None:
    result = mid_case.write(tmp_path, mode="hevc", gop=gop, threads=threads)
    assert (result.codec, result.pix_fmt, result.gop, result.crf) == (
        "hevc",
        "yuv420p",
        gop,
        DEFAULT_CRF["hevc"],
    )
    assert (result.reencoded, result.reason, result.frames) == (True, None, mid_case.length)
    probe = probe_video(result.path)
    assert (probe.codec, probe.profile, probe.pix_fmt, probe.fps) == ("hevc", "Main", "yuv420p", FPS)
    assert not probe.reordered, "no B-frames by default"
    assert_gop_pattern(result.path, mid_case.length, gop)
    assert_timing(result.path, mid_case.length)
    assert_ids(mid_case, result.path)
    comparison = compare_episode_video(
        mid_case.src, mid_case.from_timestamp, result.path, length=mid_case.length, fps=FPS
    )
    assert comparison.passes(min_psnr_db=33) and not comparison.identical


def test_hevc_gops_are_closed(mid_case: Case, tmp_path: Path) -> None:
    """Decoding from any keyframe gives the same frames as decoding from the start (random access)."""
    out = mid_case.write(tmp_path, mode="hevc", gop=4).path
    whole = decode_all(out)
    for k in keyframe_indices(out):
        with av.open(out) as container:
            stream = container.streams.video[0]
            container.seek(round(Fraction(k, FPS) / stream.time_base), stream=stream)
            frames = [f for f, _ in zip(container.decode(stream), range(4), strict=False)]
        assert [round(f.time * FPS) for f in frames] == list(range(k, min(k + 4, mid_case.length)))
        for f in frames:
            assert np.array_equal(f.to_ndarray(), whole.planes[round(f.time * FPS)])


def test_h264_reencode_properties(mid_case: Case, tmp_path: Path) -> None:
    result = mid_case.write(tmp_path, mode="h264", gop=5)
    assert (result.codec, result.pix_fmt, result.gop, result.reencoded) == ("h264", "yuv420p", 5, True)
    probe = probe_video(result.path)
    assert (probe.codec, probe.pix_fmt, probe.reordered) == ("h264", "yuv420p", False)
    assert_gop_pattern(result.path, mid_case.length, 5)
    assert_timing(result.path, mid_case.length)
    assert_ids(mid_case, result.path)
    comparison = compare_episode_video(
        mid_case.src, mid_case.from_timestamp, result.path, length=mid_case.length, fps=FPS
    )
    assert comparison.passes(min_psnr_db=33)


# x264 and x265 write their settings into the stream (an SEI message), e.g. x264's "cabac=0 ... deblock=0:".
FASTDECODE_SETTINGS = {"h264": (b" cabac=0 ", b" deblock=0:"), "hevc": (b" no-deblock ", b" no-sao ")}
DEFAULT_SETTINGS = {"h264": (b" cabac=1 ", b" deblock=1:"), "hevc": (b" deblock", b" sao ")}


@pytest.mark.parametrize("codec", ["h264", "hevc"])
def test_fastdecode_tune_drops_what_costs_cpu_decode(mid_case: Case, codec: str, tmp_path: Path) -> None:
    plain = mid_case.write(tmp_path / "plain", mode=codec)
    fast = mid_case.write(tmp_path / "fast", mode=codec, tune="fastdecode")
    assert all(s in Path(plain.path).read_bytes() for s in DEFAULT_SETTINGS[codec])
    assert all(s in Path(fast.path).read_bytes() for s in FASTDECODE_SETTINGS[codec])  # h264: CAVLC
    assert (fast.codec, fast.pix_fmt, fast.gop) == (codec, "yuv420p", DEFAULT_GOP)
    assert_gop_pattern(fast.path, mid_case.length, DEFAULT_GOP)
    assert_ids(mid_case, fast.path)
    comparison = compare_episode_video(
        mid_case.src, mid_case.from_timestamp, fast.path, length=mid_case.length, fps=FPS
    )
    assert comparison.passes(min_psnr_db=33) and not comparison.colour.moved()


@pytest.mark.parametrize("filter_name", ["area", "bicubic", "bilinear"])
def test_resize_scales_every_frame_as_verify_scales_the_source(
    mid_case: Case, filter_name: str, tmp_path: Path
) -> None:
    resize = Resize(64, 48, filter_name)
    result = mid_case.write(tmp_path, mode="h264", resize=resize)
    assert (result.width, result.height, result.pix_fmt) == (64, 48, "yuv420p")
    with av.open(result.path) as container:
        assert {(f.width, f.height) for f in container.decode(video=0)} == {(64, 48)}
    compare = functools.partial(
        compare_episode_video,
        mid_case.src,
        mid_case.from_timestamp,
        result.path,
        length=mid_case.length,
        fps=FPS,
    )
    comparison = compare(resize=resize)
    assert comparison.passes(min_psnr_db=30) and not comparison.colour.moved(), comparison
    # Without the resize the output is held to full-size frames, and fails.
    assert not compare().passes(min_psnr_db=30)


@pytest.mark.parametrize(
    "size,message",
    [
        ("224", r"Invalid resize \('224'\). Expected WIDTHxHEIGHT"),
        ("223x224", r"Invalid resize width \(223\). Expected an even number"),
        ("224x0", r"Invalid resize height \(0\). Expected an even number"),
    ],
    ids=["not-wxh", "odd", "zero"],
)
def test_resize_sizes_are_checked(size: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Resize.parse(size)
    assert str(Resize.parse(" 224X160 ")) == "224x160"
    with pytest.raises(ValueError, match=r"Invalid resize filter \('lanczos'\)"):
        Resize(224, 224, "lanczos")


def test_reencode_with_b_frames_when_asked(mid_case: Case, tmp_path: Path) -> None:
    result = mid_case.write(tmp_path, mode="hevc", gop=8, bframes=2)
    assert probe_video(result.path).reordered
    assert keyframe_indices(result.path) == list(range(0, mid_case.length, 8))
    assert_timing(result.path, mid_case.length)
    assert_ids(mid_case, result.path)


@pytest.mark.parametrize("mode", ["copy", "hevc"])
@pytest.mark.parametrize(
    "offset,shift",
    [(-0.45, 0), (-0.2, 0), (0.3, 0), (0.55, 1), (1.0, 1), (1.45, 1), (2.0, 2)],
    ids=["-0.45", "-0.2", "+0.3", "+0.55", "+1", "+1.45", "+2"],
)
def test_frames_are_the_nearest_to_each_timestamp(
    mid_case: Case, mode: str, offset: float, shift: int, tmp_path: Path
) -> None:
    """lerobot's rule: frame i is the source frame nearest to from_timestamp + i / fps."""
    start = mid_case.from_timestamp + offset / FPS
    result = write_episode_video(
        mid_case.src,
        str(tmp_path / "out.mp4"),
        from_timestamp=start,
        length=mid_case.length,
        fps=FPS,
        mode=mode,
    )
    first = round(mid_case.from_timestamp * FPS) + shift
    expected = decode_all(mid_case.src).ids[first : first + mid_case.length]
    assert decode_all(result.path).ids == expected
    assert expected[-1][0] == mid_case.episode + (shift > 0), "a shift reaches into the next episode"
    if mode == "copy":
        assert result.reencoded == (shift % 2 == 1)  # g=2: only even frames are keyframes


# --- torchcodec (the reader's decoder, system FFmpeg) ---------------------------------------------------


@pytest.mark.parametrize("mode", ["copy", "hevc", "h264"])
def test_torchcodec_decodes_the_outputs(packed: Path, mode: str, tmp_path: Path) -> None:
    for case in cases(packed)[:4]:
        out = case.write(tmp_path, mode=mode).path
        decoder = VideoDecoder(out)
        assert decoder.metadata.num_frames == case.length
        assert decoder.metadata.average_fps == pytest.approx(FPS)
        batch = decoder.get_frames_at(list(range(case.length)))
        np.testing.assert_allclose(batch.pts_seconds.numpy(), np.arange(case.length) / FPS, atol=1e-6)
        assert [read_frame_id(f) for f in batch.data] == [
            (case.episode, i, case.camera) for i in range(case.length)
        ]
        played = decoder.get_frames_played_at([i / FPS for i in range(case.length)])
        assert torch.equal(played.data, batch.data)
        if mode == "copy":
            # lerobot's torchcodec path on the source: frame index round(timestamp * average_fps).
            source = VideoDecoder(case.src)
            fps = source.metadata.average_fps
            indices = [round((case.from_timestamp + i / FPS) * fps) for i in range(case.length)]
            assert torch.equal(source.get_frames_at(indices).data, batch.data)


# --- compare -------------------------------------------------------------------------------------------


def test_compare_a_copy_is_identical(mid_case: Case, tmp_path: Path) -> None:
    out = mid_case.write(tmp_path).path
    comparison = compare_episode_video(
        mid_case.src, mid_case.from_timestamp, out, length=mid_case.length, fps=FPS
    )
    assert comparison.identical and comparison.passes()
    assert comparison.frames == mid_case.length and comparison.problems == ()
    assert comparison.psnr_min_db == comparison.psnr_mean_db == math.inf


@pytest.mark.parametrize(
    "change,problem",
    [
        ({"length": +1}, r"^output has {length} frames, expected {asked}$"),
        ({"length": -1}, r"^output has {length} frames, expected {asked}$"),
        ({"fps": 25}, r"output frames off their time i / fps by more than 0.0001 s \(first: frame 1 at"),
        ({"width": 128}, r"^output frame size 128x64, expected 96x64$"),
    ],
    ids=["output-short", "output-long", "timestamps", "frame-size"],
)
def test_compare_reports_problems(mid_case: Case, change: dict, problem: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out.mp4")
    if "fps" in change or "width" in change:
        fps, width = change.get("fps", FPS), change.get("width", WIDTH)
        frames = (
            draw_frame(mid_case.episode, i, mid_case.camera, height=HEIGHT, width=width)
            for i in range(mid_case.length)
        )
        encode_frames(frames, out, codec="hevc", fps=fps, gop=2, crf=10, height=HEIGHT, width=width)
    else:
        write_episode_video(
            mid_case.src, out, from_timestamp=mid_case.from_timestamp, length=mid_case.length, fps=FPS
        )
    asked = mid_case.length + change.get("length", 0)
    comparison = compare_episode_video(mid_case.src, mid_case.from_timestamp, out, length=asked, fps=FPS)
    assert not comparison.passes(min_psnr_db=0) and not comparison.identical
    problem = problem.format(length=mid_case.length, asked=asked)
    assert any(re.search(problem, p) for p in comparison.problems), comparison.problems


def test_compare_tells_a_reencode_from_another_episode(packed: Path, mid_case: Case, tmp_path: Path) -> None:
    out = mid_case.write(tmp_path, mode="hevc").path
    good = compare_episode_video(mid_case.src, mid_case.from_timestamp, out, length=mid_case.length, fps=FPS)
    assert good.passes(min_psnr_db=30) and not good.passes()
    assert 30 < good.psnr_min_db <= good.psnr_mean_db < math.inf
    other = next(c for c in cases(packed) if c.src == mid_case.src and c.episode == 0)
    length = min(other.length, mid_case.length)
    bad = compare_episode_video(other.src, other.from_timestamp, out, length=length, fps=FPS)
    assert bad.psnr_min_db < 20 and not bad.passes(min_psnr_db=30)


# --- colour and frame size (third-party sources) -------------------------------------------------------


def torchcodec_fit(src: str, out: str, length: int) -> tuple[float, float]:
    """`output = gain * source + offset` over every RGB value in [0, 1] of episode 0 (frames 0..length-1),
    both decoded by torchcodec as lerobot decodes them: the oracle, independent of `ColourFit`."""
    a = VideoDecoder(src)[:length].numpy().astype(np.float64).ravel() / 255
    b = VideoDecoder(out)[:length].numpy().astype(np.float64).ravel() / 255
    gain, offset = np.polyfit(a, b, 1)
    return float(gain), float(offset)


def color_range(path: str) -> int:
    with av.open(path) as container:
        return container.streams.video[0].codec_context.color_range


@pytest.mark.parametrize("mode", ["hevc", "h264"])
def test_full_range_reencode_keeps_colours(
    third_party: Callable[[str], Path], mode: str, tmp_path: Path
) -> None:
    case = cases(third_party("full-range-h264"))[0]
    assert color_range(case.src) == ColorRange.JPEG
    out = case.write(tmp_path, mode=mode).path
    gain, offset = torchcodec_fit(case.src, out, case.length)
    assert abs(gain - 1) < 0.03 and abs(offset) < 0.01, (gain, offset)  # was 1.15 and -0.069
    assert color_range(out) == ColorRange.JPEG
    result = compare_episode_video(case.src, case.from_timestamp, out, length=case.length, fps=FPS)
    assert result.passes(min_psnr_db=35) and not result.colour.moved()
    assert result.colour.gain == pytest.approx(gain, abs=0.01)


def test_reencode_keeps_the_matrix_primaries_and_transfer(tmp_path: Path) -> None:
    src, bt709 = str(tmp_path / "bt709.mp4"), Colour(ColorRange.MPEG, 1, 1, 1)  # AVCOL_*_BT709
    with av.open(src, mode="w", format="mp4") as container:
        stream = add_video_stream(
            container,
            EncoderSettings("h264", gop=2, crf=18),
            fps=FPS,
            width=WIDTH,
            height=HEIGHT,
            colour=bt709,
        )
        for i in range(4):
            frame = av.VideoFrame.from_ndarray(draw_frame(0, i, 0, height=HEIGHT, width=WIDTH), "rgb24")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    out = str(tmp_path / "out.mp4")
    write_episode_video(src, out, from_timestamp=0, length=4, fps=FPS, mode="hevc")
    with av.open(out) as container:
        assert Colour.of(container.streams.video[0]) == bt709


def test_odd_size_reencodes_to_hevc_444(third_party: Callable[[str], Path], tmp_path: Path) -> None:
    case = cases(third_party("odd-size-yuv444p"))[1]
    written = case.write(tmp_path, mode="hevc")
    assert (written.pix_fmt, written.width, written.height) == ("yuv444p", 101, 75)
    assert probe_video(written.path).profile == "Rext"  # HEVC 4:4:4: NVDEC from Turing on
    assert_ids(case, written.path)
    result = compare_episode_video(case.src, case.from_timestamp, written.path, length=case.length, fps=FPS)
    assert result.passes(min_psnr_db=30)


def test_odd_size_is_refused_for_h264(third_party: Callable[[str], Path], tmp_path: Path) -> None:
    case = cases(third_party("odd-size-yuv444p"))[0]
    message = (
        r"camera 'observation.images.cam0': Invalid frame size \(101x75\) for --video h264\. Expected an even"
    )
    with pytest.raises(ReshardError, match=message):
        case.write(tmp_path, mode="h264")
    assert list(tmp_path.iterdir()) == [], "neither the output nor a temp file"


# glibc's checking allocator: aborts at the first free of a block written past its end, every time.
MALLOC_CHECK = {"LD_PRELOAD": "libc_malloc_debug.so.0", "MALLOC_CHECK_": "3"}
_SMALL_WIDTHS = """
import sys
import reshard.video.encode as encode
from reshard.demo.sample import write_sample
from reshard.job import ReshardOptions, reshard
encode.X265_NO_CUTREE_WIDTH = int(sys.argv[2])
src = write_sample(sys.argv[1] + "/src", episodes=2, cameras=1)
for width in (16, 40, 48, 56):
    reshard(str(src), f"{sys.argv[1]}/out{width}", options=ReshardOptions(video="hevc", resize=f"{width}x32"),
            workers=1, quiet=True)
"""


@pytest.mark.integration
def test_hevc_at_widths_up_to_48_writes_nothing_past_x265s_buffers(tmp_path: Path) -> None:
    """x265's AVX2 cu-tree kernel writes past its buffer for frames at most 48 wide, which aborted whole
    re-encodes at 40 and 48 (docs/limits.md): without the cu-tree there, glibc's checking allocator finds
    nothing; the control, with the cu-tree kept, aborts."""
    env = {**os.environ, **MALLOC_CHECK, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def run(work: Path, no_cutree_width: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", _SMALL_WIDTHS, str(work), str(no_cutree_width)]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)

    fixed = run(tmp_path / "fixed", X265_NO_CUTREE_WIDTH)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert all((tmp_path / "fixed" / f"out{w}" / "meta/lrs/layout.json").exists() for w in (16, 40, 48, 56))
    control = run(tmp_path / "control", 0)
    assert control.returncode == -signal.SIGABRT, control.stderr[-2000:]


def test_only_frames_up_to_48_wide_lose_x265s_cutree() -> None:
    settings = EncoderSettings("hevc", gop=2, crf=21, threads=1)
    assert "cutree=0" in settings.options(48)["x265-params"]
    assert (
        "cutree" not in settings.options(50)["x265-params"]
        and "cutree" not in settings.options()["x265-params"]
    )
    assert "cutree" not in EncoderSettings("h264", gop=2, crf=18).options(40)["x264-params"]


def test_colour_fit_finds_a_stretch_and_a_shift() -> None:
    rng = np.random.default_rng(0)
    src = rng.integers(20, 230, size=(32, 48, 3)).repeat(8, axis=0).repeat(8, axis=1).astype(np.uint8)
    stretched = np.clip(np.round(src * 1.14 - 0.065 * 255), 0, 255).astype(np.uint8)
    fit = ColourFit.of(src, stretched)
    assert fit.gain == pytest.approx(1.14, abs=0.002) and fit.offset == pytest.approx(-0.065, abs=0.002)
    assert fit.moved() and not ColourFit.of(src, src).moved()
    flat = np.full((16, 16, 3), 100, np.uint8)
    shifted = ColourFit.of(flat, flat + 5)  # no spread to fit a gain on: the mean shift alone
    assert (shifted.gain, shifted.offset) == (1.0, pytest.approx(5 / 255)) and shifted.moved()
    halves = ColourFit.of(src[:128], stretched[:128]) + ColourFit.of(src[128:], stretched[128:])
    assert halves.gain == pytest.approx(fit.gain) and halves.offset == pytest.approx(fit.offset)


# --- errors and atomicity ------------------------------------------------------------------------------


def _faststart_truncated(src: bytes, tmp: Path) -> bytes:
    whole = tmp / "whole.mp4"
    write_episode_video(str(tmp / "src.mp4"), str(whole), from_timestamp=0, length=20, fps=FPS)
    data = whole.read_bytes()
    return data[: len(data) * 2 // 3]


def _corrupt_middle(src: bytes, tmp: Path) -> bytes:
    data = bytearray(src)
    for i in range(len(data) // 10, len(data) // 10 + 2000):  # inside episode 0's frames
        data[i] = (data[i] * 7 + 13) % 256
    return bytes(data)


BROKEN = {
    "truncated": (lambda src, tmp: src[: len(src) // 2], "not a readable video"),
    "garbage": (lambda src, tmp: b"\x00" * 1000, "not a readable video"),
    "empty": (lambda src, tmp: b"", "not a readable video"),
    "missing": (None, r"not a readable video \(\[Errno 2\] No such file"),
    "truncated-faststart": (
        _faststart_truncated,
        r"Invalid video segment \(frame \d+ of 20 wanted at|corrupt video data",
    ),
    "corrupt-middle": (_corrupt_middle, "corrupt video data"),
}


@pytest.mark.parametrize(
    "kind,mode",
    # A copy does not decode, so it cannot see corrupt frame data; verify's compare does.
    [
        (kind, mode)
        for kind in BROKEN
        for mode in ("copy", "hevc")
        if (kind, mode) != ("corrupt-middle", "copy")
    ],
)
def test_broken_source_names_file_episode_camera(packed: Path, kind: str, mode: str, tmp_path: Path) -> None:
    make, message = BROKEN[kind]
    case = next(c for c in cases(packed) if c.episode == 0 and c.camera == 0)
    (tmp_path / "src.mp4").write_bytes(Path(case.src).read_bytes())
    bad = tmp_path / "bad.mp4"
    if make is not None:
        bad.write_bytes(make(Path(case.src).read_bytes(), tmp_path))
    start, length = (0.0, 20) if kind == "truncated-faststart" else (case.from_timestamp, case.length)
    out = tmp_path / "out" / "ep.mp4"
    with pytest.raises(
        DatasetError, match=rf"^{re.escape(str(bad))}, episode 3: camera 'cam0': .*(?:{message})"
    ):
        write_episode_video(
            str(bad),
            str(out),
            from_timestamp=start,
            length=length,
            fps=FPS,
            mode=mode,
            episode=3,
            camera="cam0",
        )
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir()), "no temp file left behind"


def test_episode_beyond_the_end_of_its_file(mid_case: Case, tmp_path: Path) -> None:
    frames = len(decode_all(mid_case.src).times)
    with pytest.raises(DatasetError, match=r"Invalid video segment \(frame 2 of 4 wanted at .*nearest frame"):
        write_episode_video(
            mid_case.src, str(tmp_path / "o.mp4"), from_timestamp=(frames - 2) / FPS, length=4, fps=FPS
        )


@pytest.mark.parametrize("mode", ["copy", "hevc"])
def test_failed_write_leaves_the_target_untouched(
    mid_case: Case, mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "ep.mp4"
    out.write_bytes(b"previous")
    muxed = []

    def failing_mux(container: av.container.OutputContainer, packets: object) -> None:
        for packet in packets:  # type: ignore[attr-defined]
            if len(muxed) == 5:
                raise OSError("No space left on device")
            container.mux(packet)
            muxed.append(packet)

    monkeypatch.setattr(videos, "mux", failing_mux)
    with pytest.raises(OSError, match="No space left"):
        write_episode_video(
            mid_case.src,
            str(out),
            from_timestamp=mid_case.from_timestamp,
            length=mid_case.length,
            fps=FPS,
            mode=mode,
        )
    assert len(muxed) == 5
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.mp4"], "no temp file left behind"


def test_killed_write_leaves_no_file_at_the_target(mid_case: Case, tmp_path: Path) -> None:
    out = tmp_path / "ep.mp4"
    script = textwrap.dedent(f"""
        import os
        from reshard.video import write as videos
        calls = []
        def dying_mux(container, packets):
            for packet in packets:
                container.mux(packet)
                calls.append(1)
                if len(calls) == 5:
                    os._exit(9)  # as if SIGKILLed mid-encode: no cleanup runs
        videos.mux = dying_mux
        videos.write_episode_video({mid_case.src!r}, {str(out)!r}, from_timestamp={mid_case.from_timestamp!r},
                                   length={mid_case.length}, fps={FPS}, mode="hevc")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=Path(__file__).parents[2], capture_output=True, timeout=120
    )
    assert proc.returncode == 9, proc.stderr.decode()
    assert not out.exists()
    assert [p.name for p in tmp_path.glob(".ep.mp4.*.part")], "the partial write stays a temp file"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"mode": "av1"}, r"Invalid mode \('av1'\). Expected one of copy, hevc, h264."),
        ({"length": 0}, r"Invalid length \(0\). Expected >= 1."),
        ({"fps": 0}, r"Invalid fps \(0\). Expected > 0."),
        ({"from_timestamp": -0.1}, r"Invalid from_timestamp \(-0.1\). Expected >= 0."),
        ({"gop": 0}, r"Invalid gop \(0\). Expected >= 1."),
        ({"crf": 99}, r"Invalid crf \(99\). Expected in \[0, 63\]."),
        ({"bframes": -1}, r"Invalid bframes \(-1\). Expected >= 0."),
        ({"mode": "hevc", "preset": "8"}, r"Invalid preset \('8'\). Expected one of \('ultrafast', "),
        ({"tune": "fastdecode"}, r"Invalid tune \('fastdecode'\). Expected None: a copy keeps the source's"),
        ({"resize": Resize(32, 32)}, r"Invalid resize \(Resize\(width=32, .*\)\). Expected None: a copy"),
        ({"mode": "hevc", "tune": "film"}, r"Invalid tune \('film'\). Expected one of \('psnr', "),
    ],
    ids=[
        "mode",
        "length",
        "fps",
        "from_timestamp",
        "gop",
        "crf",
        "bframes",
        "preset",
        "tune-copy",
        "resize-copy",
        "tune-x265",
    ],
)
def test_invalid_arguments(mid_case: Case, kwargs: dict, message: str, tmp_path: Path) -> None:
    args = {"from_timestamp": 0.0, "length": 3, "fps": FPS, **kwargs}
    with pytest.raises(ValueError, match=message):
        write_episode_video(mid_case.src, str(tmp_path / "o.mp4"), **args)
    assert not (tmp_path / "o.mp4").exists()


# --- probe and encoder settings -------------------------------------------------------------------------


def test_probe_a_packed_file(packed: Path) -> None:
    file_cases = [c for c in cases(packed) if c.camera == 0]
    src = file_cases[0].src
    lengths = [c.length for c in file_cases if c.src == src]
    probe = probe_video(src)
    assert (probe.codec, probe.pix_fmt, probe.width, probe.height, probe.fps) == (
        "av1",
        "yuv420p",
        WIDTH,
        HEIGHT,
        FPS,
    )
    assert probe.frames == sum(lengths) and probe.duration_s == pytest.approx(sum(lengths) / FPS)
    assert probe.gop == 2 and probe.starts_on_keyframe and not probe.reordered
    starts = np.cumsum([0, *lengths[:-1]])
    assert {round(t * FPS) for t in probe.keyframe_times_s} >= set(starts.tolist()), (
        "every episode starts on one"
    )
    with pytest.raises(DatasetError, match=r"nope.mp4, episode 2: camera 'cam1': not a readable video"):
        probe_video(str(packed / "nope.mp4"), episode=2, camera="cam1")


@pytest.mark.parametrize(
    "codec,threads,expected",
    [
        (
            "hevc",
            1,
            "keyint=2:min-keyint=2:scenecut=0:bframes=0:open-gop=0:log-level=error:lookahead-slices=0:weightp=0"
            ":pools=1:frame-threads=1",
        ),
        (
            "hevc",
            None,
            "keyint=2:min-keyint=2:scenecut=0:bframes=0:open-gop=0:log-level=error:lookahead-slices=0:weightp=0",
        ),
        ("h264", 1, "keyint=2:min-keyint=2:scenecut=0:bframes=0"),
    ],
    ids=["hevc-1-thread", "hevc-default-threads", "h264"],
)
def test_encoder_settings_options(codec: str, threads: int | None, expected: str) -> None:
    options = EncoderSettings(codec, gop=2, crf=21, threads=threads).options()
    assert options[f"{'x265' if codec == 'hevc' else 'x264'}-params"] == expected
    assert options["crf"] == "21" and options["preset"] == "fast"
    assert EncoderSettings("av1", gop=2, crf=30).options() == {"g": "2", "crf": "30", "preset": "8"}


@pytest.mark.parametrize(
    "codec,lossless,match",
    [("vp9", False, r"Invalid codec \('vp9'\)\. Expected one of"), ("h264", True, "for a lossless encode")],
    ids=["unknown-codec", "lossless-h264"],
)
def test_encoder_settings_are_checked_on_creation(codec: str, lossless: bool, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EncoderSettings(codec, gop=2, crf=20, lossless=lossless)
