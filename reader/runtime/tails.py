"""What each piece's cursors will still be asked for in its random tail, from the consumer's plan.

Once the pool is no longer refilled, a piece emits the rest of its frames one at a time in a
pseudo-random order (`EmissionPlan.tail`). `Tails` turns those frames into the frame indices each of the
piece's cameras will be asked for, windows included (`Requests`), and hands them to the camera's cursor
when the piece emits a tail frame, with where in the tail it is (so a resume, or a decoder reopened after
the LRU closed it, starts in the middle); the cursor then decodes them ahead in file order
(`reader.decode.tail`). The emission order does not change.

Memory: `budget_bytes` is split evenly over the pieces whose tail is not over yet, and each piece's share
over its cameras, so the frames all the consumer's cursors hold together never exceed it. A piece's
share grows as others finish their tails (a finished tail holds nothing); a cursor's share is set again
at each request.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

import numpy as np

from reader.decode.tail import TailBuffer
from reader.decode.video import DecodeCursor, frame_indices

if TYPE_CHECKING:
    from reader.format.catalog import EpisodeRef, VideoRef
    from reader.plan.source import OpenedSource
    from reader.runtime.rows import EpisodeRows
    from reader.schedule import EmissionPlan


class _Slot(Protocol):
    """What a tail reads of a piece in the pool (`reader.runtime.pool`'s slot)."""

    @property
    def piece(self) -> int: ...
    @property
    def source(self) -> OpenedSource: ...
    @property
    def ref(self) -> EpisodeRef: ...
    @property
    def rows(self) -> EpisodeRows: ...


class Tails:
    """The random tails of one consumer's pieces, handed to their cursors.

    Args:
        emission: the consumer's plan.
        budget_bytes: the most frame bytes all of its cursors hold for their tails (0: none).
    """

    def __init__(self, emission: EmissionPlan, budget_bytes: int) -> None:
        self._emission = emission
        self._budget = budget_bytes
        self._unfinished = int(np.count_nonzero(emission.tail_lengths))  # tails not over yet
        self._lock = threading.Lock()
        self._positions: dict[int, dict[int, int]] = {}  # piece -> tail frame -> its position
        self._requests: dict[tuple[int, str], list[list[int]]] = {}
        self._cursors: dict[DecodeCursor, None] = {}
        # (piece, camera) -> its cursor's buffer, until exhausted; and the piece's cameras
        self._live: dict[tuple[int, str], tuple[TailBuffer, int]] = {}
        self._exhausted: dict[int, int] = {}  # piece -> its cameras whose buffer served its whole tail

    def expect(self, cursor: DecodeCursor, slot: _Slot, video: VideoRef, frame: int) -> None:
        """If `frame` is in its piece's tail, have `cursor` (the camera's, locked by the caller) expect
        the rest of the tail."""
        if not self._budget:
            return
        position = self._position(slot.piece, frame)
        fps = cursor.metadata.average_fps
        if position is None or not fps:
            return
        cameras = sum(v.key not in slot.source.drop for v in slot.ref.videos)
        requests = self._camera_requests(slot, video, fps)
        with self._lock:
            self._count_finished()
            capacity = self._budget // max(self._unfinished, 1) // cameras
            cursor.expect(requests, position, capacity_bytes=capacity)
            self._cursors[cursor] = None
            buffer, key = cursor.tail, (slot.piece, video.key)
            old = self._live.get(key)
            if old is not None and old[0] is not buffer:
                old[0].clear()  # the camera's decoder was closed and opened again: one buffer a camera
            if buffer is not None:
                self._live[key] = (buffer, cameras)

    def _count_finished(self) -> None:
        """Count the pieces whose every camera's buffer has served its whole tail (held: nothing).

        A buffer dropped before its end (a reopened decoder, a request out of turn) never counts: its
        piece keeps its share, so the bound holds whatever happens."""
        for key in [key for key, (buffer, _) in self._live.items() if not buffer]:
            piece, cameras = key[0], self._live.pop(key)[1]
            self._exhausted[piece] = self._exhausted.get(piece, 0) + 1
            if self._exhausted[piece] == cameras:
                self._unfinished -= 1

    def close(self) -> None:
        """Have every cursor drop the frames it holds for a tail (an iteration ended early)."""
        with self._lock:
            cursors, self._cursors = list(self._cursors), {}
        for cursor in cursors:
            with cursor.lock:
                cursor.stop_expecting()

    def _position(self, piece: int, frame: int) -> int | None:
        if not self._emission.tail_lengths[piece]:
            return None
        with self._lock:
            positions = self._positions.get(piece)
            if positions is None:
                frames = self._emission.tail(piece).tolist()
                positions = self._positions[piece] = {f: at for at, f in enumerate(frames)}
        return positions.get(frame)

    def _camera_requests(self, slot: _Slot, video: VideoRef, fps: float) -> list[list[int]]:
        """The frame indices of `video` each tail sample of the piece asks for, in emission order (as
        `reader.decode.video.decode_frames` computes them)."""
        key = (slot.piece, video.key)
        with self._lock:
            requests = self._requests.get(key)
            if requests is None:
                rows, windows = slot.rows, slot.source.windows
                positions = self._positions[slot.piece]
                requests = [
                    frame_indices(
                        [video.from_timestamp + t for t in rows.camera_timestamps(f, windows, video.key)], fps
                    )
                    for f in sorted(positions, key=positions.__getitem__)
                ]
                self._requests[key] = requests
        return requests
