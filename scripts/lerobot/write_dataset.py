"""Write a LeRobot v3 dataset with lerobot's own recorder API, for comparisons on data lrs did not write.

`lrs sample` writes v3 the way lerobot's recorder does; this writes it with the recorder itself
(`LeRobotDataset.create`, `add_frame`, `save_episode`, `finalize`, lerobot's default AV1 encoder), so
`scripts/lerobot/train_compare.py` also measures both loaders on files lrs had no hand in. Run with the
Python of lerobot's environment (`scripts/lerobot/env.sh`):

    python scripts/lerobot/write_dataset.py OUT [--episodes 24] [--length 40] [--cameras 2] [--height 96]
        [--width 128]

`--cameras` cameras (`top`, `wrist`, then `left`, `right`, `front`, `side`, then `cam6`, ...) and a
6-dimensional state and action. The state follows a smooth per-episode trajectory, the action is the next
state, and each camera shows a square whose position follows the state over a gradient: content a policy
can learn from. AV1 compresses that flat drawing to a few hundred bytes a frame, far below camera footage;
`--texture` puts the square over a fixed textured scene per camera, with a sensor's noise in every frame.

The benchmarks' real-size data (three cameras at 480x640, lerobot's AV1 defaults: crf 30, g 2, preset 12),
written once. On 2 cores shared with other jobs, 24 episodes of 100 frames took 6 min (2.5 MB, 300 bytes
per camera frame: the flat drawing costs the encoder and decoder little) and with `--texture` 19 min
(141 MB, 20 KB per camera frame); `recorded-2x240x320` (`--cameras 2 --height 240 --width 320`, flat)
took 2 min (1.5 MB):

    PY=$(scripts/lerobot/env.sh) && for texture in "" --texture; do
      "$PY" scripts/lerobot/write_dataset.py ~/.cache/lrs/bench-data/recorded-3x480x640${texture:+-textured} \
        --cameras 3 --height 480 --width 640 --episodes 24 --length 100 $texture; done

and measured with the project's Python, which reshards it once into its work folder:

    python scripts/bench/decode_cost.py ~/.cache/lrs/bench-data/recorded-3x480x640-textured \
        --out bench/decode-cost-3x480x640-textured.json
    python scripts/bench/bench_reader.py --recorded ~/.cache/lrs/bench-data/recorded-3x480x640-textured \
        --out bench/reader-3x480x640-textured.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

CAMERA_NAMES = ("top", "wrist", "left", "right", "front", "side")
DIM = 6


def camera_keys(count: int) -> list[str]:
    """The feature keys of `count` cameras: `top` and `wrist` first (what the two-camera data always had)."""
    names = [*CAMERA_NAMES, *(f"cam{i}" for i in range(len(CAMERA_NAMES), count))]
    return [f"observation.images.{name}" for name in names[:count]]


def features(keys: list[str], height: int, width: int) -> dict[str, dict[str, object]]:
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
    return {"observation.state": vector, "action": vector, **{key: camera for key in keys}}


def trajectory(rng: np.random.Generator, length: int) -> np.ndarray:
    """`length + 1` states in [-1, 1]: a sum of two sines per joint, phases and rates per episode."""
    t = np.arange(length + 1, dtype=np.float32)[:, None] / 30.0
    rate, phase = rng.uniform(0.2, 1.5, (2, DIM)), rng.uniform(0, 2 * np.pi, (2, DIM))
    return (
        0.6 * np.sin(2 * np.pi * rate[0] * t + phase[0]) + 0.4 * np.sin(np.pi * rate[1] * t + phase[1])
    ).astype(np.float32)


def picture(state: np.ndarray, camera: int, height: int, width: int) -> np.ndarray:
    """A horizontal gradient with a bright square placed by two of the joints: joints 0 and 1 for camera 0,
    2 and 3 for camera 1, 4 and 5 for camera 2, then round again (camera 3 as camera 0, with the other
    background tint)."""
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[...] = np.linspace(30, 160, width, dtype=np.uint8)[None, :, None]
    image[..., 2] = 80 + 40 * (camera % 4)
    side = height // 6
    y = int((state[2 * camera % DIM] + 1) / 2 * (height - side))
    x = int((state[(2 * camera + 1) % DIM] + 1) / 2 * (width - side))
    image[y : y + side, x : x + side] = (240, 220, 60)
    return image


def scene(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A fixed texture for one camera (int16, within +-46 levels): random blocks of 32, 8 and 2 pixels, the
    detail that surfaces and objects give a camera's picture and that a flat gradient lacks."""
    out = np.zeros((height, width, 3), dtype=np.int16)
    for cell, amplitude in ((32, 24), (8, 14), (2, 8)):
        shape = (-(-height // cell), -(-width // cell), 3)
        blocks = rng.integers(-amplitude, amplitude + 1, shape, dtype=np.int16)
        out += blocks.repeat(cell, axis=0).repeat(cell, axis=1)[:height, :width]
    return out


def textured(image: np.ndarray, texture: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`image` with the camera's `texture` and a sensor's noise (uniform, +-2 levels, new every frame)."""
    noise = rng.integers(-2, 3, image.shape, dtype=np.int16)
    return np.clip(image.astype(np.int16) + texture + noise, 0, 255).astype(np.uint8)


def write(
    out: Path, *, episodes: int, length: int, cameras: int, height: int, width: int, seed: int, texture: bool
) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    keys = camera_keys(cameras)
    dataset = LeRobotDataset.create(
        repo_id="local/recorded",
        fps=30,
        features=features(keys, height, width),
        root=out,
        robot_type="synthetic",
    )
    rng = np.random.default_rng(seed)
    # Its own generator, so that the trajectories are the same with and without --texture.
    pixels = np.random.default_rng([seed, 1])
    scenes = [scene(pixels, height, width) for _ in keys] if texture else None
    for episode in range(episodes):
        states = trajectory(rng, length)
        for i in range(length):
            frame = {
                "observation.state": states[i],
                "action": states[i + 1],
                "task": f"follow path {episode % 3}",
            }
            for camera, key in enumerate(keys):
                image = picture(states[i], camera, height, width)
                frame[key] = image if scenes is None else textured(image, scenes[camera], pixels)
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="Dataset directory to create (must not exist).")
    parser.add_argument("--episodes", type=int, default=24, help="Number of episodes.")
    parser.add_argument("--length", type=int, default=40, help="Frames per episode.")
    parser.add_argument("--cameras", type=int, default=2, help="Number of cameras (at least 1).")
    parser.add_argument("--height", type=int, default=96, help="Frame height in pixels.")
    parser.add_argument("--width", type=int, default=128, help="Frame width in pixels.")
    parser.add_argument(
        "--texture",
        action="store_true",
        help="Give every camera a fixed textured scene and every frame a sensor's noise (more bytes per "
        "frame, as camera footage has); without it, the flat drawing.",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the trajectories.")
    args = parser.parse_args()
    if args.cameras < 1:
        raise SystemExit(f"Error: invalid --cameras ({args.cameras}). Expected at least 1.")
    if args.out.exists():
        raise SystemExit(f"Error: {args.out} exists. Expected a new directory.")
    write(
        args.out,
        episodes=args.episodes,
        length=args.length,
        cameras=args.cameras,
        height=args.height,
        width=args.width,
        seed=args.seed,
        texture=args.texture,
    )


if __name__ == "__main__":
    main()
