"""Video frames by timestamp with torchcodec, value-identical to lerobot 0.6.1's `decode_video_frames`.

lerobot converts each query timestamp (seconds into the file) to a frame index with the file's average
fps, decodes those frames, checks that each query is within `tolerance_s` of the closest loaded frame
(distances in float32, `torch.cdist`), and returns the closest frames; uint8 `(N, 3, H, W)`, or float32
in [0, 1] (`/ 255`). `decode_frames` does exactly that on an open decoder; `Decoders` keeps a bounded
LRU of open decoders (one per local file), so a pool of episodes does not reopen its files per sample.

A `DecodeCursor` is such a decoder read forward: the schedule emits a piece's frames in runs of consecutive
frames, and torchcodec decodes a frame at or after the last one it decoded without seeking (inside a
GOP), so a run costs one seek and every frame is decoded once. The decoder's own state is the only
buffer; a cursor keeps just the last few frames a delta window reads again. In a piece's random tail,
where its frames come one at a time in a pseudo-random order, the reader tells the cursor which frames
are still to come (`DecodeCursor.expect`) and the cursor decodes them forward into a bounded buffer
(`reader.decode.tail`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torchcodec.decoders import VideoDecoder

from cache.arguments import check_int
from reader.decode.depth import DepthDecoder, open_depth_decoder
from reader.decode.frames import Frames
from reader.decode.images import resized
from reader.decode.tail import Requests, TailBuffer
from reader.errors import DecodeError
from reader.plan.spec import MAX_FRAME_SIDE, SeekMode, check_device_name, check_resize, check_seek_mode


@dataclass(frozen=True)
class VideoWhere:
    """What a decode concerns, for error messages: the episode, the camera and the file."""

    episode: int
    camera: str
    file: str

    def __str__(self) -> str:
        return f"{self.file} (episode {self.episode}, camera {self.camera!r})"


def check_device(device: str) -> str:
    """Validate `decode_device`: "cpu", or "cuda[:n]" where CUDA is available.

    Raises:
        ValueError: an unknown device, or CUDA asked for where it is unavailable.
    """
    if check_device_name(device) == "cpu":
        return device
    if not torch.cuda.is_available():
        raise ValueError(
            f"Invalid decode_device ({device!r}): CUDA is not available here (torch {torch.__version__}). "
            "Expected 'cpu', or a machine with a CUDA GPU and a CUDA build of torch and torchcodec."
        )
    return device


class DecodeCursor:
    """An open decoder read forward by one piece, keeping the frames a delta window reads again.

    Args:
        decoder: the open torchcodec decoder (or `DepthDecoder`).
        keep: how many frames before the newest decoded one to keep (a camera window's span, 0 without
            a window): the next sample of the piece, one frame later, reads them again.

    Use it from one thread at a time (`lock`).
    """

    def __init__(self, decoder: VideoDecoder | DepthDecoder | ResizedDecoder, keep: int = 0) -> None:
        self.decoder = decoder
        self.metadata = decoder.metadata
        self.keep = keep
        self.lock = threading.Lock()
        self._kept: dict[int, tuple[torch.Tensor, float]] = {}
        self.tail: TailBuffer | None = None

    def expect(self, requests: Requests, position: int, *, capacity_bytes: int) -> None:
        """From now on, serve `requests[position:]` (the frame indices of each request still to come,
        in order) from frames decoded ahead in file order, holding at most `capacity_bytes`
        (`reader.decode.tail.TailBuffer`). Nothing changes if the cursor already serves `requests`.

        A request that is not the next one expected ends it (the cursor decodes as before).
        """
        if self.tail is not None and self.tail.requests is requests and self.tail.position == position:
            self.tail.capacity = capacity_bytes
            return
        self.stop_expecting()
        self._kept = {}
        self.tail = TailBuffer(requests, position, capacity_bytes)

    def stop_expecting(self) -> None:
        """Drop the expected requests and the frames held for them."""
        if self.tail is not None:
            self.tail.clear()
            self.tail = None

    def get_frames_at(self, *, indices: list[int]) -> Frames:
        """The frames at `indices`, decoding only those not kept (in ascending order)."""
        if self.tail is not None:
            served = self.tail.serve(self.decoder, indices)
            if served is not None:
                if not self.tail:
                    self.tail = None  # the last request: nothing is held any more
                return served
            self.stop_expecting()
        if not self.keep:
            batch = self.decoder.get_frames_at(indices=indices)
            return Frames(batch.data, batch.pts_seconds)
        kept = self._kept
        missing = sorted(set(indices).difference(kept))
        if missing:
            batch = self.decoder.get_frames_at(indices=missing)
            for i, data, pts in zip(missing, batch.data, batch.pts_seconds.tolist(), strict=True):
                kept[i] = (data, pts)
        frames = Frames(
            torch.stack([kept[i][0] for i in indices]),
            torch.tensor([kept[i][1] for i in indices], dtype=torch.float64),
        )
        # Only what the piece's next sample, one frame later, reads again: runs come in a random order,
        # so frames beyond the newest are dropped too.
        newest = max(indices)
        self._kept = {i: v for i, v in kept.items() if newest - self.keep <= i <= newest}
        return frames


class ResizedDecoder:
    """A torchcodec decoder whose frames come scaled to `size` (height, width): decoded at full size, then
    scaled in their uint8 codes by torch's bilinear kernel with antialiasing (`reader.decode.images.resized`:
    what torchvision's `Resize` does to a tensor, so a frame is exactly that resize of the frame a
    full-size stream returns).

    Not torchcodec's decoder-side `Resize`: its swscale scaling measured 1.9-2.1 ms more CPU per 480x640
    frame than the full-size decode plus torch's uint8 resize (5.30 against 3.32 ms per AV1 frame, 2.60
    against 1.21 ms per H.264 frame, to 224x224, one thread).
    """

    def __init__(self, decoder: VideoDecoder, size: tuple[int, int]) -> None:
        self.decoder = decoder
        self.metadata = decoder.metadata  # the stored size, checked against the reader's limits
        self.size = size

    def get_frames_at(self, *, indices: list[int]) -> Frames:
        batch = self.decoder.get_frames_at(indices=indices)
        return Frames(resized(batch.data, self.size), batch.pts_seconds)


class Decoders:
    """A bounded LRU of open torchcodec decoders, keyed by local file path.

    Args:
        capacity: decoders kept open; the least recently used is closed beyond it.
        device: "cpu" or "cuda[:n]" (passed to torchcodec).
        num_threads: FFmpeg threads per decoder (1 per DataLoader worker is the right default: the
            workers are the parallelism).
        seek_mode: torchcodec's seek mode; "approximate" reads the header only (lerobot's choice).
        resize: (height, width) the colour frames come in (None: as stored): decoded at full size, then
            scaled in uint8 by torch's antialiased bilinear kernel (`ResizedDecoder`). Depth streams are not
            resized: an interpolated depth is a distance no surface is at.
    """

    def __init__(
        self,
        capacity: int,
        *,
        device: str = "cpu",
        num_threads: int = 1,
        seek_mode: SeekMode = "approximate",
        resize: tuple[int, int] | None = None,
    ) -> None:
        check_int("decoder capacity", capacity, 1)
        check_seek_mode(seek_mode)
        self.resize = None if resize is None else check_resize(resize)
        self.capacity = capacity
        self.device = device
        self.num_threads = num_threads
        self.seek_mode: SeekMode = seek_mode
        self._open: OrderedDict[str, DecodeCursor] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0

    def __len__(self) -> int:
        return len(self._open)

    def get(
        self, key: str, where: VideoWhere, *, keep: int = 0, depth_pix_fmt: str | None = None
    ) -> DecodeCursor:
        """The open cursor of the local file `key` (opened now if needed): `cached`, else `open`."""
        cursor = self.cached(key)
        return (
            cursor
            if cursor is not None
            else self.open(key, key, where, keep=keep, depth_pix_fmt=depth_pix_fmt)
        )

    def cached(self, key: str) -> DecodeCursor | None:
        """The open cursor of `key` (now the most recently used), or None if it is not open.

        Thread-safe: decode threads of one consumer share the LRU.
        """
        with self._lock:
            cursor = self._open.get(key)
            if cursor is not None:
                self._open.move_to_end(key)
            return cursor

    def open(
        self, key: str, path: str, where: VideoWhere, *, keep: int = 0, depth_pix_fmt: str | None = None
    ) -> DecodeCursor:
        """Open the local file `path` as the cursor of `key` and keep it (evicting the least recently used).

        Opened outside the LRU's lock, so the other decode threads keep decoding meanwhile (the caller may
        hold the file pinned in the cache while it opens). Two threads rarely open one key at once; the
        first one in is kept, and returned to both.

        Args:
            key: names the video (a dataset-relative path, or the local path itself).
            path: the local file.
            where: the episode, camera and file, for error messages.
            keep: frames the cursor keeps for delta windows (see `DecodeCursor`).
            depth_pix_fmt: for a depth stream, its feature's pixel format: the stream is decoded with
                PyAV into its raw codes (`reader.decode.depth.DepthDecoder`) instead of torchcodec's RGB.

        Raises:
            DecodeError: the file is missing or not a video torchcodec can open.
        """
        opened = DecodeCursor(self._open_decoder(where, path, depth_pix_fmt), keep)
        with self._lock:
            cursor = self._open.setdefault(key, opened)
            self._open.move_to_end(key)
            if cursor is opened:
                self.opened += 1
                while len(self._open) > self.capacity:
                    self._open.popitem(last=False)
            return cursor

    def _open_decoder(
        self, where: VideoWhere, path: str, depth_pix_fmt: str | None
    ) -> VideoDecoder | DepthDecoder | ResizedDecoder:
        decoder: VideoDecoder | DepthDecoder
        if not os.path.isfile(path):
            raise DecodeError(f"Invalid video {where}: missing. Expected an MP4 file at {path}.")
        if depth_pix_fmt is not None:
            decoder = open_depth_decoder(path, expected_pix_fmt=depth_pix_fmt, where=where)
        else:
            try:
                decoder = VideoDecoder(
                    path,
                    seek_mode=self.seek_mode,
                    num_ffmpeg_threads=self.num_threads,
                    device=self.device,
                )
            except (RuntimeError, ValueError) as exc:
                raise DecodeError(
                    f"Invalid video {where}: cannot open ({_first_line(exc)}). Expected an MP4."
                ) from exc
        try:
            check_frame_size(decoder.metadata.width, decoder.metadata.height, where)
        except DecodeError:
            if isinstance(decoder, DepthDecoder):
                decoder.close()
            raise
        if self.resize is not None and isinstance(decoder, VideoDecoder):
            return ResizedDecoder(decoder, self.resize)
        return decoder

    def clear(self) -> None:
        """Close every decoder."""
        with self._lock:
            self._open.clear()


def check_frame_size(width: int | None, height: int | None, where: VideoWhere) -> None:
    """Refuse, before anything is decoded, a video whose header says its frames are larger than
    `MAX_FRAME_SIDE` on a side (a hostile file would make every sample gigabytes).

    Raises:
        DecodeError: naming the file, the episode and the camera.
    """
    if (width or 0) > MAX_FRAME_SIDE or (height or 0) > MAX_FRAME_SIDE:
        raise DecodeError(
            f"Invalid video {where}: frame size {width}x{height}. Expected at most "
            f"{MAX_FRAME_SIDE}x{MAX_FRAME_SIDE} (width x height)."
        )


def decode_frames(
    decoder: VideoDecoder | DecodeCursor | DepthDecoder,
    timestamps: Sequence[float],
    *,
    tolerance_s: float,
    return_uint8: bool,
    where: VideoWhere,
) -> torch.Tensor:
    """The frames shown at `timestamps` (seconds into the file), as lerobot decodes them.

    Returns:
        `(N, 3, H, W)`: uint8 when `return_uint8`, else float32 in [0, 1].

    Raises:
        DecodeError: a frame cannot be decoded, or the closest frame is `tolerance_s` or more away.
    """
    try:
        fps = decoder.metadata.average_fps
        if not fps:
            raise DecodeError(
                f"Invalid video {where}: no average fps in its header. Expected a video stream."
            )
        batch = decoder.get_frames_at(indices=frame_indices(timestamps, fps))
    except (RuntimeError, IndexError, ValueError) as exc:
        raise DecodeError(
            f"Invalid video {where}: cannot decode the frames at {list(timestamps)} s ({_first_line(exc)}). "
            "Expected frames at those times."
        ) from exc
    closest = _closest(timestamps, batch.pts_seconds, tolerance_s=tolerance_s, where=where)
    frames = batch.data if closest is None else batch.data[closest]
    if return_uint8:
        return frames
    return to_unit_float(frames)


def frame_indices(timestamps: Sequence[float], fps: float) -> list[int]:
    """The frame index lerobot reads for each timestamp (seconds into the file): the nearest at `fps`."""
    return [round(ts * fps) for ts in timestamps]


def to_unit_float(frames: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 frames as float32 in [0, 1]: lerobot's `frames / 255.0`, bit for bit (float32 division in
    both), into `out` when given: one pass that reads the uint8 frame and writes the float32 row."""
    if out is not None:
        return torch.div(frames, 255.0, out=out)
    # one pass less than `frames.float() / 255` (measured: 0.06 vs 0.09 ms per 240x320 frame)
    return frames.to(torch.float32).div_(255.0)


def _closest(
    timestamps: Sequence[float], pts_seconds: torch.Tensor, *, tolerance_s: float, where: VideoWhere
) -> torch.Tensor | None:
    """For each query, the loaded frame closest to it (lerobot: float32 `cdist`, float32 tolerance).

    Returns:
        None when query i is closest to loaded frame i for every i (the usual case), else the indices.
    """
    if len(timestamps) == 1:
        # The usual case, without building tensors: the same float32 arithmetic (torch compares a float32
        # tensor with a Python float in float32, hence the float32 tolerance).
        gap = abs(np.float32(timestamps[0]) - np.float32(pts_seconds.item()))
        if gap < np.float32(tolerance_s):
            return None
    query, loaded = torch.tensor(list(timestamps)), torch.tensor(pts_seconds.tolist())
    distance, closest = torch.cdist(query[:, None], loaded[:, None], p=1).min(1)
    if bool((distance < tolerance_s).all()):
        return None if bool((closest == torch.arange(closest.numel())).all()) else closest
    raise DecodeError(
        f"Invalid frame timestamps in {where}: queried {query.tolist()} s, closest frames at "
        f"{loaded[closest].tolist()} s. Expected within tolerance_s={tolerance_s}."
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
