"""Identifiable frames of the sample: every frame shows which (episode, frame, camera) it is.

`draw_frame` draws a band of large black/white blocks at the top of an RGB frame that encodes the episode
index, the frame index and the camera index in binary; `read_frame_id` reads them back, also after lossy
compression. `depth_frame` is a depth map in metres (a known pattern) whose value tells the frame apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_BITS = 16  # bits per identity row: episode, frame, camera
_ROWS = 3
_DARK, _LIGHT = 16, 235


def _block(width: int) -> int:
    return width // _BITS


def draw_frame(
    episode: int, frame: int, camera: int, *, height: int, width: int, seed: int = 0
) -> np.ndarray:
    """An HxWx3 uint8 frame whose top band encodes (episode, frame, camera) as black/white blocks."""
    yy, xx = np.mgrid[0:height, 0:width]
    phase = (frame * 3 + episode * 17 + camera * 29 + seed) % 256
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[..., 0] = (xx * 255 // max(1, width - 1) + phase) % 200 + 28
    img[..., 1] = (yy * 255 // max(1, height - 1) + 2 * phase) % 200 + 28
    img[..., 2] = ((xx + yy + phase) % 160) + 48
    b = _block(width)
    for row, value in enumerate((episode, frame, camera)):
        for bit in range(_BITS):
            on = (value >> bit) & 1
            img[row * b : (row + 1) * b, bit * b : (bit + 1) * b] = _LIGHT if on else _DARK
    return img


def depth_frame(episode: int, frame: int, camera: int, *, height: int, width: int) -> np.ndarray:
    """An HxW float32 depth map in metres (0.3 to about 2.5): a slope across the image that moves with the
    frame and differs per episode and camera, so a wrong frame reads as wrong depth (one frame is 8 mm,
    several 12-bit log quanta, apart)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = 0.3 + 0.05 * (episode % 20) + 0.1 * camera + 0.008 * (frame % 100)
    return (base + 0.004 * xx + 0.002 * yy).astype(np.float32)


def read_frame_id(image: np.ndarray | Any) -> tuple[int, int, int]:
    """Decode (episode, frame, camera) from a frame drawn by `draw_frame`.

    Args:
        image: HxWx3 or 3xHxW, uint8 in [0, 255] or float in [0, 1] (numpy array or torch tensor).
    """
    arr = np.asarray(image.cpu() if hasattr(image, "cpu") else image)
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[2] != 3:
        arr = arr.transpose(1, 2, 0)
    arr = arr.astype(np.float32)
    if arr.max() <= 1.0 + 1e-6:
        arr = arr * 255.0
    gray = arr.mean(axis=2)
    b = _block(gray.shape[1])
    margin = max(1, b // 4)
    values = []
    for row in range(_ROWS):
        value = 0
        for bit in range(_BITS):
            cell = gray[row * b + margin : (row + 1) * b - margin, bit * b + margin : (bit + 1) * b - margin]
            if cell.mean() > (_DARK + _LIGHT) / 2:
                value |= 1 << bit
        values.append(value)
    return values[0], values[1], values[2]
