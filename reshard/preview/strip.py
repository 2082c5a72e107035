"""Camera frames as RGB tiles: colour frames as the stream returns them, depth through a colour map.

A depth frame is millimetres (lerobot's unit); its colours span the 1st to 99th percentile of the
camera's shown frames together, so near and far read the same way across a strip and one hot pixel does
not flatten the rest. The range goes in the strip's label.
"""

from __future__ import annotations

import numpy as np

from reshard.preview.episode_view import CameraFrames

# matplotlib's viridis at 0, 1/4, 1/2, 3/4 and 1 (dark blue = near, yellow = far): readable in grey too.
VIRIDIS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=float)
NO_VALUE = np.array([0, 0, 0], dtype=np.uint8)  # NaN or infinite depth


def colour_map(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """HxW values as HxWx3 uint8 viridis colours, `lo` the darkest, `hi` the brightest (clipped)."""
    scale = np.clip((values - lo) / max(hi - lo, 1e-12), 0.0, 1.0)
    scale = np.nan_to_num(scale, nan=0.0) * (len(VIRIDIS) - 1)
    low = np.minimum(scale.astype(int), len(VIRIDIS) - 2)
    frac = (scale - low)[..., None]
    rgb = (VIRIDIS[low] * (1 - frac) + VIRIDIS[low + 1] * frac).round().astype(np.uint8)
    rgb[~np.isfinite(values)] = NO_VALUE
    return rgb


def value_range(frames: tuple[np.ndarray, ...]) -> tuple[float, float]:
    """The 1st and 99th percentiles of the finite values of `frames` ((0, 1) when there are none)."""
    finite = np.concatenate([f[np.isfinite(f)].ravel() for f in frames]) if frames else np.empty(0)
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = np.percentile(finite, [1, 99])
    return float(lo), float(hi)


def camera_tiles(camera: CameraFrames) -> tuple[list[np.ndarray], str]:
    """The HxWx3 uint8 tiles of a camera's frames, and what its label says besides its name."""
    if not camera.frames:
        return [], "no frame"
    _, height, width = camera.frames[0].shape
    size = f"{height}x{width}"
    if camera.depth or (camera.frames[0].shape[0] == 1 and camera.frames[0].dtype != np.uint8):
        planes = tuple(frame[0].astype(np.float64) for frame in camera.frames)
        lo, hi = value_range(planes)
        unit = " mm" if camera.depth else ""
        return [colour_map(p, lo, hi) for p in planes], f"{size}, {lo:.4g} to {hi:.4g}{unit} (dark to bright)"
    return [_rgb(frame) for frame in camera.frames], size


def _rgb(frame: np.ndarray) -> np.ndarray:
    """A CHW frame (uint8, or float in [0, 1]) as HxWx3 uint8; one channel becomes grey."""
    if frame.dtype != np.uint8:
        frame = (np.clip(np.nan_to_num(frame.astype(np.float64)), 0.0, 1.0) * 255).round().astype(np.uint8)
    hwc = np.ascontiguousarray(frame.transpose(1, 2, 0))
    return np.repeat(hwc, 3, axis=2) if hwc.shape[2] == 1 else hwc
