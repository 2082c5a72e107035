"""Check that lerobot's own `LeRobotDataset` reads an lrs/1 reshard with the values of its v3 source.

lerobot 0.6.1 needs Python 3.12 and an older torch, so it cannot live in the project's venv: run this
file with the Python of a lerobot 0.6.1 environment (`python3.12 -m venv V && V/bin/pip install
lerobot==0.6.1`):

    HF_HUB_OFFLINE=1 /tmp/lerobot-venv/bin/python scripts/lerobot/parity.py SRC OUT [--psnr-floor 30]

Every index of both datasets is read with a delta window on `action` and on the first camera; keys,
shapes, dtypes, tabular values and `_is_pad` masks must be equal, frames identical for copied videos
and above the PSNR floor for re-encoded ones (the report gives the worst frame); depth cameras must be
identical whatever the video mode. Exits 1 on the first difference, naming the index and the key.

With `--reader` (the lrs repository on PYTHONPATH), lrs's own `EpisodeStream` also reads the output
with the same windows, and every sample must equal lerobot's for the same index, key for key and bit
for bit, depth cameras included (in millimetres, and again in metres), and `EpisodeStream.meta` must
equal lerobot's `dataset.meta` (features, stats with depth rescaled to the unit, keys, counts, tasks).

Where the output left episodes out (`lrs reshard --skip-episodes/--skip-defective`, recorded in
`meta/lrs/dropped.json`), each output row is compared with its kept source row, `episode_index` and
`index` renumbered.

With `--reader --mix OTHER` (another dataset of the same fps), the mixture `EpisodeStream([OUT, OTHER])`
is compared with lerobot's `MultiLeRobotDataset` of the two: every sample (its `dataset_index`, the
common keys) bit for bit, and `stream.meta.stats` with lerobot's aggregated `stats`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="The v3 dataset resharded.")
    parser.add_argument("output", type=Path, help="Its lrs/1 reshard.")
    parser.add_argument("--psnr-floor", type=float, default=30.0, help="Lowest PSNR of a re-encoded frame.")
    parser.add_argument(
        "--reader", action="store_true", help="Also compare lrs's EpisodeStream with lerobot on the output."
    )
    parser.add_argument(
        "--mix",
        type=Path,
        help="With --reader: also compare a mixture of OUT and this dataset with lerobot's.",
    )
    args = parser.parse_args()

    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = json.loads((args.source / "meta/info.json").read_text())
    fps = info["fps"]
    cameras = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    depth = {k for k in cameras if (info["features"][k].get("info") or {}).get("is_depth_map")}
    windows = {"action": [0, 1 / fps, 2 / fps], **({cameras[0]: [-1 / fps, 0]} if cameras else {})}
    windows.update({k: [-2 / fps, 0, 1 / fps] for k in depth})
    layout = json.loads((args.output / "meta/lrs/layout.json").read_text())
    all_reencoded = layout.get("params", {}).get("video", "copy") != "copy"
    # In copy mode, episodes that did not start on a keyframe were re-encoded alone (listed here).
    reencoded = {(r["episode"], r["camera"]) for r in layout.get("reencoded", [])}
    a = LeRobotDataset("local/source", root=args.source, delta_timestamps=windows)
    b = LeRobotDataset("local/output", root=args.output, delta_timestamps=windows)
    rows, renumbered = kept_rows(args.source, args.output)
    if len(rows) != len(b):
        print(f"Invalid length ({len(b)}). Expected {len(rows)}, the source's kept rows.")
        return 1
    worst = math.inf
    for i, j in enumerate(rows):
        x, y = a[j], b[i]
        if x.keys() != y.keys():
            print(f"Invalid keys at index {i} ({sorted(x.keys() ^ y.keys())} differ).")
            return 1
        if renumbered:  # episodes were left out: the kept ones are renumbered, their rows contiguous
            x["index"] = torch.tensor(i, dtype=x["index"].dtype)
            x["episode_index"] = torch.tensor(
                renumbered[int(x["episode_index"])], dtype=x["episode_index"].dtype
            )
        for key, u in x.items():
            v = y[key]
            if not isinstance(u, torch.Tensor):
                same = u == v
            elif u.shape != v.shape or u.dtype != v.dtype:
                same = False
            elif key in cameras and key not in depth and u.dtype.is_floating_point and not torch.equal(u, v):
                mse = float(((u - v) ** 2).mean())
                worst = min(worst, 10 * math.log10(1 / mse))
                same = all_reencoded or (int(y["episode_index"]), key) in reencoded
            else:
                same = torch.equal(u, v)
            if not same:
                print(f"Invalid value at index {i}, key {key!r}. Expected the source's.")
                return 1
    floor_ok = worst >= args.psnr_floor
    print(
        (f"{len(a) - len(b)} rows of left-out episodes skipped; " if renumbered else "")
        + f"{len(b)} samples: tabular values, masks and shapes equal; frames "
        + ("identical" if worst == math.inf else f"worst PSNR {worst:.1f} dB")
        + (f"; depth cameras {sorted(depth)} identical" if depth else "")
    )
    if not floor_ok:
        return 1
    if not args.reader:
        return 0
    failed = compare_reader(args.output, windows, depth)
    if failed or args.mix is None:
        return failed
    return compare_mixture(args.output, args.mix, {k: v for k, v in windows.items() if k not in depth})


def kept_rows(source: Path, output: Path) -> tuple[list[int], dict[int, int]]:
    """The source index of each output row, and the output number of each kept source episode (empty
    where the output kept every episode: `meta/lrs/dropped.json`)."""
    import pyarrow.parquet as pq

    episodes = pq.read_table(source / "meta/episodes", columns=["episode_index", "length"]).sort_by(
        "episode_index"
    )
    lengths = dict(zip(*(episodes.column(n).to_pylist() for n in ("episode_index", "length")), strict=True))
    dropped_json = output / "meta/lrs/dropped.json"
    gone = (
        {d["episode"] for d in json.loads(dropped_json.read_text())["dropped"]}
        if dropped_json.exists()
        else set()
    )
    rows: list[int] = []
    renumbered: dict[int, int] = {}
    start = 0
    for episode, length in sorted(lengths.items()):
        if episode not in gone:
            renumbered[episode] = len(renumbered)
            rows += range(start, start + length)
        start += length
    return rows, renumbered if gone else {}


def compare_mixture(root: Path, other: Path, windows: dict) -> int:
    """lrs's mixture EpisodeStream([root, other]) against lerobot's MultiLeRobotDataset of the two."""
    import tempfile

    import numpy as np
    import torch
    from lerobot.datasets.multi_dataset import MultiLeRobotDataset

    from reader import EpisodeStream

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "local").mkdir()
        (Path(tmp) / "local/a").symlink_to(root.resolve())
        (Path(tmp) / "local/b").symlink_to(other.resolve())
        lerobot = MultiLeRobotDataset(["local/a", "local/b"], root=tmp, delta_timestamps=windows)
        stream = EpisodeStream([root, other], delta_timestamps=windows, seed=0)
        for key, want in lerobot.stats.items():
            got = (stream.meta.stats or {}).get(key, {})
            for name, u in want.items():
                v = got.get(name)
                if v is None or not np.allclose(
                    np.asarray(u, dtype=np.float64), v, rtol=1e-6, equal_nan=True
                ):
                    print(f"Invalid mixture stats {key}/{name} ({v!r}). Expected lerobot's {u!r}.")
                    return 1
        first = lerobot._datasets[0].num_frames
        count = 0
        for item in stream:
            source = int(item["dataset_index"])
            want = lerobot[int(item["index"]) + (first if source else 0)]
            if set(want) != set(item):
                print(f"Invalid mixture keys ({sorted(set(want) ^ set(item))} differ).")
                return 1
            for key, u in want.items():
                v = item[key]
                same = torch.equal(u, v) and u.dtype == v.dtype if isinstance(u, torch.Tensor) else u == v
                if not same:
                    print(
                        f"Invalid mixture value, dataset {source}, index {int(item['index'])}, key {key!r}."
                    )
                    return 1
            count += 1
    print(f"mixture: {count} samples equal to MultiLeRobotDataset's, every key bit for bit; stats equal")
    return 0


def compare_reader(root: Path, windows: dict, depth: set[str]) -> int:
    """lrs's EpisodeStream against lerobot's LeRobotDataset on the same dataset: every sample equal."""
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from reader import EpisodeStream

    for unit in ("mm", "m") if depth else ("mm",):
        lerobot = LeRobotDataset("local/output", root=root, delta_timestamps=windows, depth_output_unit=unit)
        stream = EpisodeStream(root, delta_timestamps=windows, depth_output_unit=unit, seed=0)
        problem = compare_meta(lerobot.meta, stream.meta)
        if problem:
            print(f"Invalid EpisodeStream.meta ({unit}): {problem}")
            return 1
        print(f"EpisodeStream.meta ({unit}): features, stats, keys, counts and tasks equal to lerobot's")
        count = 0
        for item in stream:
            want = lerobot[int(item["index"])]
            for key in sorted(set(want) | set(item)):
                u, v = want.get(key), item.get(key)
                same = (
                    torch.equal(u, v) and u.dtype == v.dtype
                    if isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor)
                    else u == v
                )
                if not same:
                    print(f"Invalid EpisodeStream value at index {int(item['index'])}, key {key!r} ({unit}).")
                    return 1
            count += 1
        print(f"EpisodeStream ({unit}): {count} samples equal to LeRobotDataset's, every key bit for bit")
    return 0


def compare_meta(want, got) -> str | None:  # noqa: ANN001 - lerobot's and lrs's metadata objects
    """lerobot's `LeRobotDatasetMetadata` against `EpisodeStream.meta`: what differs, or None."""
    import numpy as np

    names = ["features", "fps", "robot_type", "total_episodes", "total_frames", "total_tasks"]
    names += ["camera_keys", "video_keys", "image_keys", "depth_keys", "names", "shapes"]
    for name in names:
        if getattr(want, name) != getattr(got, name):
            return f"{name} {getattr(got, name)!r}, expected {getattr(want, name)!r}"
    if not want.tasks.equals(got.tasks):
        return f"tasks {got.tasks!r}, expected {want.tasks!r}"
    if (want.stats is None) != (got.stats is None):
        return f"stats {got.stats is None and 'missing' or 'present'}, expected the opposite"

    def leaves(d: dict, prefix: str = "") -> dict:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(leaves(v, f"{prefix}{k}/") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    a, b = leaves(want.stats or {}), leaves(got.stats or {})
    if a.keys() != b.keys():
        return f"stats keys differ: {sorted(a.keys() ^ b.keys())}"
    for key, u in a.items():
        v = b[key]
        if u.dtype != v.dtype or u.shape != v.shape or not np.array_equal(u, v, equal_nan=True):
            return f"stats {key} {v!r}, expected {u!r}"
    return None


if __name__ == "__main__":
    sys.exit(main())
