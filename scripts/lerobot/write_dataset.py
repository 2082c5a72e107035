"""Write a LeRobot v3 dataset with lerobot's own recorder API, for comparisons on data lrs did not write.

`lrs sample` writes v3 the way lerobot's recorder does; this writes it with the recorder itself
(`LeRobotDataset.create`, `add_frame`, `save_episode`, `finalize`, lerobot's default AV1 encoder), so
`scripts/lerobot/train_compare.py` also measures both loaders on files lrs had no hand in. Run with the
Python of lerobot's environment (`scripts/lerobot/env.sh`):

    python scripts/lerobot/write_dataset.py OUT [--episodes 24] [--length 40] [--height 96] [--width 128]

Two cameras and a 6-dimensional state and action. The state follows a smooth per-episode trajectory, the
action is the next state, and each camera shows a square whose position follows the state over a
gradient: content a policy can learn from, that AV1 compresses as it would a scene.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

CAMERAS = ("observation.images.top", "observation.images.wrist")
DIM = 6


def features(height: int, width: int) -> dict[str, dict[str, object]]:
    vector: dict[str, object] = {
        "dtype": "float32",
        "shape": (DIM,),
        "names": [f"joint_{i}" for i in range(DIM)],
    }
    camera: dict[str, object] = {
        "dtype": "video",
        "shape": (height, width, 3),
        "names": ["height", "width", "channels"],
    }
    return {"observation.state": vector, "action": vector, **{key: camera for key in CAMERAS}}


def trajectory(rng: np.random.Generator, length: int) -> np.ndarray:
    """`length + 1` states in [-1, 1]: a sum of two sines per joint, phases and rates per episode."""
    t = np.arange(length + 1, dtype=np.float32)[:, None] / 30.0
    rate, phase = rng.uniform(0.2, 1.5, (2, DIM)), rng.uniform(0, 2 * np.pi, (2, DIM))
    return (
        0.6 * np.sin(2 * np.pi * rate[0] * t + phase[0]) + 0.4 * np.sin(np.pi * rate[1] * t + phase[1])
    ).astype(np.float32)


def picture(state: np.ndarray, camera: int, height: int, width: int) -> np.ndarray:
    """A horizontal gradient with a bright square placed by two of the joints (two others for camera 1)."""
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[...] = np.linspace(30, 160, width, dtype=np.uint8)[None, :, None]
    image[..., 2] = 80 + 40 * camera
    side = height // 6
    y = int((state[2 * camera] + 1) / 2 * (height - side))
    x = int((state[2 * camera + 1] + 1) / 2 * (width - side))
    image[y : y + side, x : x + side] = (240, 220, 60)
    return image


def write(out: Path, episodes: int, length: int, height: int, width: int, seed: int) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset.create(
        repo_id="local/recorded", fps=30, features=features(height, width), root=out, robot_type="synthetic"
    )
    rng = np.random.default_rng(seed)
    for episode in range(episodes):
        states = trajectory(rng, length)
        for i in range(length):
            frame = {
                "observation.state": states[i],
                "action": states[i + 1],
                "task": f"follow path {episode % 3}",
            }
            for camera, key in enumerate(CAMERAS):
                frame[key] = picture(states[i], camera, height, width)
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="Dataset directory to create (must not exist).")
    parser.add_argument("--episodes", type=int, default=24, help="Number of episodes.")
    parser.add_argument("--length", type=int, default=40, help="Frames per episode.")
    parser.add_argument("--height", type=int, default=96, help="Frame height in pixels.")
    parser.add_argument("--width", type=int, default=128, help="Frame width in pixels.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the trajectories.")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"Error: {args.out} exists. Expected a new directory.")
    write(args.out, args.episodes, args.length, args.height, args.width, args.seed)


if __name__ == "__main__":
    main()
