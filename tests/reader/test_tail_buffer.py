"""The random tail decoded ahead in file order: the same values, within its memory bound."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from reader import EpisodeStream
from reader.decode.frames import Frames
from reader.decode.tail import TailBuffer
from tests.reader.reference import assert_items_equal

FPS = 30
WINDOWS = {"action": [-1 / FPS, 0.0, 1 / FPS], "observation.images.cam0": [-2 / FPS, -1 / FPS, 0.0]}
FRAME_BYTES = 3 * 2 * 2


class _Decoder:
    """Frames that show their own index, with every call recorded."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def get_frames_at(self, *, indices: list[int]) -> Frames:
        self.calls.append(list(indices))
        data = torch.tensor(indices, dtype=torch.uint8)[:, None, None, None].expand(-1, 3, 2, 2).contiguous()
        return Frames(data, torch.tensor(indices, dtype=torch.float64) / FPS)


def _requests(seed: int, frames: int, span: int) -> list[list[int]]:
    """A piece's tail: its frames in a random order, each with the `span` frames before it (clamped)."""
    order = list(range(frames))
    random.Random(seed).shuffle(order)
    return [[max(0, f - d) for d in range(span, -1, -1)] for f in order]


@pytest.mark.parametrize("span", [0, 2], ids=["frame", "window"])
@pytest.mark.parametrize("capacity", [0, 1, 3, 10, 1000], ids=lambda c: f"frames{c}")
def test_the_buffer_holds_at_most_its_capacity_and_serves_every_request(capacity: int, span: int) -> None:
    for seed in range(5):
        requests = _requests(seed, 40, span)
        for position in (0, 17):  # from the tail's start, and from inside it (a resume)
            decoder = _Decoder()
            buffer = TailBuffer(requests, position, capacity * FRAME_BYTES)
            for want in requests[position:]:
                got = buffer.serve(decoder, want)
                assert got is not None
                assert got.data[:, 0, 0, 0].tolist() == want
                assert got.pts_seconds.tolist() == [i / FPS for i in want]
                assert buffer.held <= capacity * FRAME_BYTES
            assert buffer.peak <= capacity * FRAME_BYTES and not buffer and buffer.held == 0
            order = [i for call in decoder.calls for i in call]
            needed = len({i for r in requests[position:] for i in r})
            if capacity >= needed:  # room for the whole tail: each frame decoded once, in one pass
                # (after the first request's, which tells the frame size)
                assert sorted(order) == sorted(set(order)) and len(order) == needed
                first = len(set(requests[position]))
                assert order[first:] == sorted(order[first:])


def test_a_request_out_of_turn_is_left_to_the_caller() -> None:
    requests = _requests(0, 10, 0)
    buffer = TailBuffer(requests, 0, 100 * FRAME_BYTES)
    assert buffer.serve(_Decoder(), requests[1]) is None
    assert buffer.serve(_Decoder(), requests[0]) is not None


def epoch_with_tail_buffer(
    root: Path, budget: int, *, decoders: int | None = None, **options: Any
) -> list[dict[str, Any]]:
    """One epoch of the stream (uint8, `num_workers=0`) with a tail buffer of `budget` bytes (0: none),
    and `decoders` open decoders at most (fewer than the stream allows: they are closed and reopened)."""
    stream = EpisodeStream(root, return_uint8=True, **options)
    stream._options = dataclasses.replace(stream.options, tail_buffer_bytes=budget)
    if decoders is not None:
        stream._decoding = (decoders, *stream._decoding[1:])
    return list(stream)


@pytest.mark.parametrize("windows", [None, WINDOWS], ids=["frames", "windows"])
@pytest.mark.parametrize("pool", [2, 5], ids=lambda k: f"pool{k}")
@pytest.mark.parametrize("version", [0, 1], ids=["v3", "lrs1"])
def test_an_epoch_is_the_same_with_the_tail_buffer_on_off_or_tiny(
    small: tuple[Path, Path], held_bytes: list[int], version: int, pool: int, windows: Any
) -> None:
    frame_bytes = 3 * 96 * 128  # the small sample's frames (uint8 RGB)
    for seed in (0, 7):
        options = {"seed": seed, "episode_pool_size": pool, "delta_timestamps": windows}
        held_bytes.clear()
        want = epoch_with_tail_buffer(small[version], 0, **options)
        assert not held_bytes  # off: no buffer at all
        for budget in (256 * 2**20, 9 * frame_bytes):
            held_bytes.clear()
            got = epoch_with_tail_buffer(small[version], budget, **options)
            assert len(got) == len(want)
            for step, (a, b) in enumerate(zip(got, want, strict=True)):
                assert_items_equal(a, b, context=f"seed {seed} budget {budget} step {step}")
            assert held_bytes and min(held_bytes) >= 0  # every tail request served by the buffer
            assert max(held_bytes) <= budget  # within its bound


def test_decoders_closed_and_opened_again_inside_a_tail_keep_the_values_and_the_bound(
    small: tuple[Path, Path], held_bytes: list[int]
) -> None:
    # One decoder open at a time: each camera's cursor is reopened at every sample, inside its tail.
    options = {"seed": 3, "episode_pool_size": 3, "delta_timestamps": WINDOWS}
    want = epoch_with_tail_buffer(small[1], 0, **options)
    budget = 20 * 3 * 96 * 128
    got = epoch_with_tail_buffer(small[1], budget, decoders=1, **options)
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        assert_items_equal(a, b, context=f"step {step}")
    assert len(got) == len(want) and held_bytes and max(held_bytes) <= budget
