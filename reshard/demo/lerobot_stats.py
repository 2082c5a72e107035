"""lerobot's statistics of a dataset: per feature and episode (`feature_stats`, `image_stats`,
`depth_stats`), then over the dataset (`dataset_stats`), shaped and named as lerobot 0.6.1 writes them
in `meta/stats.json` and the `stats/...` columns of the episodes table."""

from __future__ import annotations

from typing import Any

import numpy as np

_QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """lerobot's per-feature stats over axis 0: min, max, mean, std, count, q01..q99."""
    values = values.astype(np.float64)
    stats = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([len(values)]),
    }
    for q in _QUANTILES:
        stats[f"q{int(round(q * 100)):02d}"] = np.quantile(values, q, axis=0)
    return stats


def _channel_stats(pixels: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """Per-channel stats of pixels (P, C), shaped (C,1,1) like lerobot's, counting `frames` frames."""
    channels = pixels.shape[1]
    out = {k: v.reshape(channels, 1, 1) for k, v in feature_stats(pixels).items() if k != "count"}
    out["count"] = np.array([frames])
    return out


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of sampled frames (N,H,W,3 uint8), shaped (3,1,1) in [0,1] like lerobot's."""
    return _channel_stats(frames.reshape(-1, 3).astype(np.float64) / 255.0, len(frames))


def depth_stats(millimetres: np.ndarray) -> dict[str, np.ndarray]:
    """Stats of sampled depth frames (N,H,W, millimetres), shaped (1,1,1) like lerobot's."""
    return _channel_stats(millimetres.reshape(-1, 1), len(millimetres))


def dataset_stats(per_episode: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, Any]]:
    """Dataset stats from episode stats: exact min/max/mean/std, count-weighted quantiles (as lerobot)."""
    out: dict[str, dict[str, Any]] = {}
    for key in per_episode[0] if per_episode else []:
        eps = [e[key] for e in per_episode]
        counts = np.array([float(e["count"][0]) for e in eps])
        total = counts.sum()
        w = counts / total
        shape = eps[0]["mean"].shape
        weights = w.reshape((-1,) + (1,) * len(shape))
        mean = (np.stack([e["mean"] for e in eps]) * weights).sum(axis=0)
        second = (np.stack([e["std"] ** 2 + e["mean"] ** 2 for e in eps]) * weights).sum(axis=0)
        agg = {
            "min": np.min(np.stack([e["min"] for e in eps]), axis=0),
            "max": np.max(np.stack([e["max"] for e in eps]), axis=0),
            "mean": mean,
            "std": np.sqrt(np.maximum(second - mean**2, 0)),
            "count": np.array([int(total)]),
        }
        for q in ("q01", "q10", "q50", "q90", "q99"):
            agg[q] = (np.stack([e[q] for e in eps]) * weights).sum(axis=0)
        out[key] = {k: v.tolist() for k, v in agg.items()}
    return out
