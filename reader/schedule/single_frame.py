"""The emission plan of one frame: what `EpisodeStream[i]` reads through the same consumer as an epoch.

A plan of one piece (the whole episode, so that delta windows reach every frame of it) and one step at the
asked frame, admitted before it; no random tail. It satisfies `reader.schedule.emission.EmissionPlan`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from reader.schedule.emission import Step
from reader.schedule.order import Piece


class SingleFrame:
    """Frame `frame` of the episode at entry `entry` (of an episode of `length` frames), alone."""

    def __init__(self, entry: int, frame: int, length: int) -> None:
        if not 0 <= frame < length:
            raise ValueError(
                f"Invalid frame ({frame}). Expected 0 <= frame < {length}, the episode's length."
            )
        self._piece, self._frame = Piece(entry, 0, length), frame
        self._steps = np.zeros(1, dtype=np.int64)
        self._steps.setflags(write=False)

    def __repr__(self) -> str:
        return f"SingleFrame(entry={self._piece.episode}, frame={self._frame})"

    def __len__(self) -> int:
        return 1

    @property
    def pieces(self) -> tuple[Piece, ...]:
        return (self._piece,)

    @property
    def admission_steps(self) -> np.ndarray:
        return self._steps

    @property
    def departure_steps(self) -> np.ndarray:
        return self._steps

    @property
    def tail_lengths(self) -> np.ndarray:
        return self._steps  # zeros: no tail

    def entry_of(self, piece: np.ndarray) -> np.ndarray:
        return np.full(np.shape(piece), self._piece.episode, dtype=np.int64)

    def arrays(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        count = max(0, min(1, 1 if stop is None else stop) - start)
        return np.zeros(count, dtype=np.int64), np.full(count, self._frame, dtype=np.int64)

    def steps(self, start: int = 0) -> Iterator[Step]:
        if start == 0:
            yield Step(0, 0, self._frame, True, (0,))

    def tail(self, piece: int) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)
