"""A piece's random tail decoded ahead in file order, into a bounded buffer.

Once a consumer's pool can no longer be refilled, each piece emits its remaining frames one at a time in
a pseudo-random order (`reader.schedule.emission`), so a decoder read in that order seeks to the keyframe
before nearly every frame and decodes again from there. The plan knows those frames in advance
(`EmissionPlan.tail`), so the reader hands a piece's cursor the frame indices its remaining samples will
ask for (`Requests`, window frames included) when the piece enters its tail; `TailBuffer` then decodes
them forward in ascending order, in chunks, keeps each frame until the last request that reads it, and
serves the requests, in the plan's order, from memory. torchcodec decodes the same frame whether it
seeks or not, so the values are those of a decode in the stream's order.

Memory: the frames a buffer holds never exceed `capacity_bytes` (their uint8 or uint16 bytes). When a
request needs frames and the buffer is full, the held frames read furthest in the future are dropped
(decoded again later, in another forward chunk); a chunk decodes ahead only into the room left. Each
frame is decoded on its own (consecutive calls in ascending order read on without a seek), so each
held frame is its own tensor: what is counted is what is held, and a frame handed out is not copied.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from reader.decode.frames import Frames, FrameSource

if TYPE_CHECKING:
    import torch


# The tail buffers of one consumer, all its cursors together (uint8 RGB at 640x480 is 0.9 MB a frame).
TAIL_BUFFER_BYTES = 256 * 2**20

Requests = Sequence[Sequence[int]]  # the frame indices of each request a cursor will serve, in order


class TailBuffer:
    """Serves `requests[position:]`, in that order, from frames decoded ahead in file order.

    Args:
        requests: the frame indices each of a piece's remaining samples asks this cursor for, in order.
        position: the first of `requests` still to come (a resume or a reopened decoder starts inside).
        capacity_bytes: the most frame bytes held at once (0: nothing is held; every request is decoded
            on its own, as without the buffer).

    Use it from one thread at a time (the cursor's lock).
    """

    def __init__(self, requests: Requests, position: int, capacity_bytes: int) -> None:
        self.requests, self.position, self.capacity = requests, position, capacity_bytes
        self._uses: dict[int, deque[int]] = {}  # frame -> the requests still to come that read it
        for at in range(position, len(requests)):
            for index in dict.fromkeys(requests[at]):
                self._uses.setdefault(index, deque()).append(at)
        self._frames: dict[int, tuple[torch.Tensor, float]] = {}
        self.held = 0  # bytes of `_frames`
        self.peak = 0
        self._frame_bytes = 0  # learnt from the first frame decoded

    def __len__(self) -> int:
        """Requests still to come."""
        return len(self.requests) - self.position

    def serve(self, decoder: FrameSource, indices: list[int]) -> Frames | None:
        """The frames at `indices` if they are the next request, else None (the caller decodes them)."""
        if self.position >= len(self.requests) or list(self.requests[self.position]) != indices:
            return None
        import torch

        missing = sorted(set(indices).difference(self._frames))
        fresh = self._decode(decoder, missing) if missing else {}
        rows = [fresh[i] if i in fresh else self._frames[i] for i in indices]
        self._served(indices)
        if len(rows) == 1:  # the frame's own tensor (each frame is decoded on its own): no copy
            return Frames(rows[0][0].unsqueeze(0), torch.tensor([rows[0][1]], dtype=torch.float64))
        return Frames(
            torch.stack([data for data, _ in rows]),
            torch.tensor([pts for _, pts in rows], dtype=torch.float64),
        )

    def clear(self) -> None:
        """Drop every frame held."""
        self._frames.clear()
        self.held = 0

    def _served(self, indices: list[int]) -> None:
        at = self.position
        for index in dict.fromkeys(indices):
            uses = self._uses[index]
            uses.popleft()
            if not uses:
                del self._uses[index]
                self._drop(index)
        self.position = at + 1

    def _drop(self, index: int) -> None:
        frame = self._frames.pop(index, None)
        if frame is not None:
            self.held -= frame[0].nbytes

    def _decode(self, decoder: FrameSource, missing: list[int]) -> dict[int, tuple[torch.Tensor, float]]:
        """Decode `missing` (the current request's frames not held) and, into the room left, the frames
        the later requests read that follow it in the file (then from the lowest, once past the last):
        the decoder goes on forward from where the request put it, so the tail is swept in file order."""
        # The first decode learns the frame size; from then on every miss is one forward chunk.
        fresh = {} if self._frame_bytes else self._read(decoder, missing)
        later = [i for i in missing if len(self._uses[i]) > 1]  # read again: worth holding
        self._make_room(len(later))
        room = (self.capacity - self.held) // self._frame_bytes - len(later)
        wanted = set(missing).difference(fresh)
        pending = sorted(
            i for i in self._uses if i not in self._frames and i not in wanted and i not in fresh
        )
        after = bisect.bisect_right(pending, missing[-1])
        chunk = sorted(wanted.union((pending[after:] + pending[:after])[: max(room, 0)]))
        for index, frame in self._read(decoder, chunk).items():
            if index in wanted:
                fresh[index] = frame
            else:
                self._hold(index, frame)
        for index in later:
            self._hold(index, fresh[index])
        return fresh

    def _make_room(self, frames: int) -> None:
        """Drop held frames, those read furthest ahead first, until `frames` more fit (if they can)."""
        need = frames * self._frame_bytes
        if not need or need > self.capacity:
            return
        current = self.position
        while self.held + need > self.capacity and self._frames:
            furthest = max(
                self._frames, key=lambda i: self._uses[i][0] if self._uses[i][0] != current else -1
            )
            if self._uses[furthest][0] == current:
                return  # everything held is read by this request
            self._drop(furthest)

    def _hold(self, index: int, frame: tuple[torch.Tensor, float]) -> None:
        if self.held + frame[0].nbytes <= self.capacity:
            self._frames[index] = frame
            self.held += frame[0].nbytes
            self.peak = max(self.peak, self.held)

    def _read(self, decoder: FrameSource, indices: list[int]) -> dict[int, tuple[torch.Tensor, float]]:
        """`indices` (ascending), one call each: a frame of a batch would keep the whole batch alive, and
        copying it out costs a sixth of its decode."""
        frames = {}
        for index in indices:
            batch = decoder.get_frames_at(indices=[index])
            frames[index] = (batch.data[0], float(batch.pts_seconds[0]))
        if not self._frame_bytes and frames:
            self._frame_bytes = next(iter(frames.values()))[0].nbytes
        return frames
