"""Delta windows: lerobot's validation, offsets, clamping and padding, as pure functions."""

from __future__ import annotations

import numpy as np
import pytest

from reader.plan.windows import Windows, check_delta_timestamps, delta_indices

FPS = 30
KEYS = ["action", "observation.state", "observation.images.cam0"]


@pytest.mark.parametrize(
    "deltas",
    [[0.0], [-1 / 30, 0, 1 / 30], [-0.5, 0.0, 2.0], [0.1 + 1e-5]],
    ids=["zero", "neighbours", "far", "within-tolerance"],
)
def test_on_grid_deltas_are_accepted(deltas: list[float]) -> None:
    check_delta_timestamps({"action": deltas}, FPS, 1e-4)


@pytest.mark.parametrize(
    "deltas", [[0.01], [0, 1 / 60], [0.1 + 1e-3]], ids=["hundredth", "half-frame", "beyond-tolerance"]
)
def test_off_grid_deltas_are_refused(deltas: list[float]) -> None:
    with pytest.raises(
        ValueError, match=r"Invalid delta_timestamps \(\{'action': \[.*\]\}\)\. Expected multiples of 1/30"
    ):
        check_delta_timestamps({"action": deltas}, FPS, 1e-4)


def test_delta_indices_round_like_lerobot() -> None:
    got = delta_indices(
        {"action": [-2 / 30, 0, 1 / 30, 0.5], "observation.images.cam0": [-1 / 30, 0]},
        fps=FPS,
        tolerance_s=1e-4,
        keys=KEYS,
    )
    assert got == {"action": (-2, 0, 1, 15), "observation.images.cam0": (-1, 0)}
    assert delta_indices(None, fps=FPS, tolerance_s=1e-4, keys=KEYS) == {}


@pytest.mark.parametrize(
    ("delta_timestamps", "message"),
    [
        ({"nope": [0.0]}, r"Invalid delta_timestamps key \('nope'\)\. Expected one of"),
        ({"action": []}, r"Invalid delta_timestamps\['action'\] \(\[\]\)\. Expected a non-empty list"),
        ({"action": "0.1"}, r"Invalid delta_timestamps\['action'\] \('0.1'\)"),
        ({"action": [0.0, "x"]}, r"Invalid delta_timestamps\['action'\] value \('x'\)"),
        ({"action": [True]}, r"Invalid delta_timestamps\['action'\] value \(True\)"),
        ([("action", [0.0])], r"Invalid delta_timestamps \(list\)\. Expected a dict"),
    ],
    ids=["unknown-key", "empty", "string", "non-number", "bool", "not-a-dict"],
)
def test_bad_delta_timestamps_are_refused(delta_timestamps: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        delta_indices(delta_timestamps, fps=FPS, tolerance_s=1e-4, keys=KEYS)  # type: ignore[arg-type]


def _lerobot_window(abs_idx: int, start: int, end: int, deltas: list[int]) -> tuple[list[int], list[bool]]:
    """lerobot's `_get_query_indices`, on absolute indices."""
    query = [max(start, min(end - 1, abs_idx + d)) for d in deltas]
    pad = [(abs_idx + d < start) | (abs_idx + d >= end) for d in deltas]
    return query, pad


@pytest.mark.parametrize("seed", range(5), ids=lambda s: f"seed{s}")
def test_windows_match_lerobot_on_absolute_indices(seed: int) -> None:
    rng = np.random.default_rng(seed)
    deltas = sorted(rng.integers(-6, 7, size=rng.integers(1, 6)).tolist())
    windows = Windows({"action": tuple(deltas)})
    for _ in range(50):
        length = int(rng.integers(1, 12))
        start = int(rng.integers(0, 100))
        frame = int(rng.integers(0, length))
        window = windows.window("action", frame, length)
        query, pad = _lerobot_window(start + frame, start, start + length, deltas)
        assert (window.rows + start).tolist() == query
        assert window.pad.tolist() == pad


@pytest.mark.parametrize(
    ("frame", "length", "rows", "pad"),
    [
        (0, 5, [0, 0, 1], [True, False, False]),
        (4, 5, [3, 4, 4], [False, False, True]),
        (0, 1, [0, 0, 0], [True, False, True]),
        (2, 5, [1, 2, 3], [False, False, False]),
    ],
    ids=["episode-start", "episode-end", "single-frame", "inside"],
)
def test_window_clamps_and_pads(frame: int, length: int, rows: list[int], pad: list[bool]) -> None:
    window = Windows({"k": (-1, 0, 1)}).window("k", frame, length)
    assert window.rows.tolist() == rows
    assert window.pad.tolist() == pad
    assert window.pad.dtype == np.bool_


def test_windows_are_frozen_and_keep_key_order() -> None:
    windows = Windows({"b": [1], "a": [0, 2]})
    assert list(windows.offsets) == ["b", "a"]
    assert "a" in windows and "c" not in windows
    assert bool(windows) and not bool(Windows({}))
    with pytest.raises(TypeError):
        windows.offsets["c"] = (0,)  # type: ignore[index]
