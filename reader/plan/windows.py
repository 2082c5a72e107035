"""Delta windows: which rows of an episode one sample reads, exactly as lerobot's `LeRobotDataset` does.

lerobot turns `delta_timestamps[key]` (seconds) into frame offsets `round(d * fps)`; for the sample at
frame `i` of an episode of `length` frames, offset `d` reads row `clamp(i + d, 0, length - 1)` and marks
`<key>_is_pad` where `i + d` falls outside the episode. Everything here is pure: offsets in, index arrays
out, so that the reader, the reference reader of the tests and the schedule never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

__all__ = ["Window", "Windows", "check_delta_timestamps", "delta_indices"]


def check_delta_timestamps(
    delta_timestamps: Mapping[str, Sequence[float]], fps: float, tolerance_s: float
) -> None:
    """Reject deltas that are not multiples of `1 / fps` within `tolerance_s` (lerobot's rule).

    Raises:
        ValueError: naming every key and delta outside the tolerance.
    """
    outside: dict[str, list[float]] = {}
    for key, deltas in delta_timestamps.items():
        bad = [d for d in deltas if abs(d * fps - round(d * fps)) / fps > tolerance_s]
        if bad:
            outside[key] = bad
    if outside:
        raise ValueError(
            f"Invalid delta_timestamps ({outside}). Expected multiples of 1/{fps} s within "
            f"tolerance_s={tolerance_s}."
        )


def delta_indices(
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    *,
    fps: float,
    tolerance_s: float,
    keys: Iterable[str],
) -> dict[str, tuple[int, ...]]:
    """Frame offsets per key, `round(d * fps)`, after validating keys and values.

    Args:
        delta_timestamps: seconds relative to the sample, per feature key; None means no windows.
        fps: the dataset's frame rate.
        tolerance_s: how far a delta may be from a multiple of `1 / fps`.
        keys: the keys a window may be asked for (data columns and camera keys).

    Raises:
        ValueError: an unknown key, an empty or non-numeric list, or a delta off the frame grid.
    """
    if delta_timestamps is None:
        return {}
    if not isinstance(delta_timestamps, Mapping):
        raise ValueError(
            f"Invalid delta_timestamps ({type(delta_timestamps).__name__}). Expected a dict key -> list of seconds."
        )
    known = set(keys)
    for key, deltas in delta_timestamps.items():
        if key not in known:
            raise ValueError(f"Invalid delta_timestamps key ({key!r}). Expected one of {sorted(known)}.")
        if isinstance(deltas, (str, bytes)) or not isinstance(deltas, Sequence) or len(deltas) == 0:
            raise ValueError(
                f"Invalid delta_timestamps[{key!r}] ({deltas!r}). Expected a non-empty list of seconds."
            )
        for d in deltas:
            if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)):
                raise ValueError(
                    f"Invalid delta_timestamps[{key!r}] value ({d!r}). Expected a number of seconds."
                )
    check_delta_timestamps(delta_timestamps, fps, tolerance_s)
    return {key: tuple(round(d * fps) for d in deltas) for key, deltas in delta_timestamps.items()}


@dataclass(frozen=True)
class Window:
    """The rows one key of one sample reads.

    Attributes:
        rows: row positions inside the episode (clamped to [0, length - 1]), one per offset.
        pad: True where the unclamped position falls outside the episode.
    """

    rows: np.ndarray
    pad: np.ndarray


@dataclass(frozen=True)
class Windows:
    """The delta windows of a stream: frame offsets per key (lerobot's `delta_indices`).

    Attributes:
        offsets: key -> frame offsets, in the order the keys were given.
    """

    offsets: Mapping[str, tuple[int, ...]]
    _arrays: dict[str, np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        frozen = {k: tuple(int(d) for d in v) for k, v in self.offsets.items()}
        object.__setattr__(self, "offsets", MappingProxyType(frozen))
        object.__setattr__(self, "_arrays", {k: np.asarray(v, dtype=np.int64) for k, v in frozen.items()})

    def __repr__(self) -> str:
        return f"Windows({dict(self.offsets)})"

    def __reduce__(self) -> tuple[type[Windows], tuple[dict[str, tuple[int, ...]]]]:
        # A mappingproxy does not pickle; spawn and forkserver workers receive the stream pickled.
        return (Windows, (dict(self.offsets),))

    def __contains__(self, key: str) -> bool:
        return key in self.offsets

    def __bool__(self) -> bool:
        return bool(self.offsets)

    def window(self, key: str, frame: int, length: int) -> Window:
        """The rows and padding of `key` for the sample at `frame` of an episode of `length` frames."""
        target = frame + self._arrays[key]
        return Window(rows=np.clip(target, 0, length - 1), pad=(target < 0) | (target >= length))
