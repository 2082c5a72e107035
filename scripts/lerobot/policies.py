"""Train lerobot policies on `EpisodeStream` batches, built from `stream.meta`, in lerobot's own environment.

lerobot 0.6.1 needs Python 3.12 and torch < 2.12, so run this file with that environment's Python and
this repository on `PYTHONPATH` (or lrs installed there, see the README's install notes):

    HF_HUB_OFFLINE=1 PYTHONPATH=. /path/to/lerobot-venv/bin/python scripts/lerobot/policies.py DATASET \
        [--policies act diffusion] [--steps 20] [--batch-size 8] [--num-workers 2]

For each policy it does what `lerobot-train` does, with lrs in place of `LeRobotDataset`:
`make_policy_config`, `resolve_delta_timestamps(cfg, stream.meta)`, `make_policy(cfg,
ds_meta=stream.meta)`, `make_pre_post_processors(cfg, dataset_stats=stream.meta.stats)`, then
`--steps` optimizer steps on batches of an `EpisodeStream` through a DataLoader with workers. It prints
one JSON line per policy (versions, parameters, first and last loss, seconds per step) and exits 1 if
a loss is not finite or did not go down. Backbones start from random weights (no download).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="An lrs/1 or v3 dataset (path or URL), e.g. from `lrs sample`.")
    parser.add_argument("--policies", nargs="+", default=["act", "diffusion"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()

    import lerobot
    import torch
    import torchcodec
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.policies.factory import make_policy, make_policy_config, make_pre_post_processors
    from torch.utils.data import DataLoader

    from reader import DatasetMeta, EpisodeStream

    torch.manual_seed(0)
    failed = False
    for name in args.policies:
        overrides = {"device": "cpu", "push_to_hub": False}
        if name in ("act", "diffusion"):
            overrides["pretrained_backbone_weights"] = None
        if name == "diffusion":
            overrides["num_inference_steps"] = 4
        cfg = make_policy_config(name, **overrides)
        windows = resolve_delta_timestamps(cfg, DatasetMeta.open(args.dataset))
        stream = EpisodeStream(args.dataset, delta_timestamps=windows, batch_size=args.batch_size, seed=0)
        policy = make_policy(cfg, ds_meta=stream.meta)
        preprocessor, _ = make_pre_post_processors(cfg, dataset_stats=stream.meta.stats)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
        loader = DataLoader(
            stream, batch_size=args.batch_size, num_workers=args.num_workers, persistent_workers=False
        )
        policy.train()
        losses: list[float] = []
        started = time.perf_counter()
        epoch = 0
        while len(losses) < args.steps:
            stream.set_epoch(epoch)
            for batch in loader:
                loss, _ = policy.forward(preprocessor(batch))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                losses.append(float(loss.detach()))
                if len(losses) == args.steps:
                    break
            epoch += 1
        seconds = (time.perf_counter() - started) / len(losses)
        ok = all(math.isfinite(x) for x in losses) and min(losses[-3:]) < losses[0]
        failed |= not ok
        print(
            json.dumps(
                {
                    "policy": name,
                    "ok": ok,
                    "lerobot": lerobot.__version__,
                    "torch": torch.__version__,
                    "torchcodec": torchcodec.__version__,
                    "python": sys.version.split()[0],
                    "dataset": str(Path(args.dataset)),
                    "input_features": sorted(cfg.input_features),
                    "windows": {k: len(v) for k, v in (windows or {}).items()},
                    "parameters": sum(p.numel() for p in policy.parameters()),
                    "steps": len(losses),
                    "loss_first": round(losses[0], 4),
                    "loss_last": round(losses[-1], 4),
                    "seconds_per_step": round(seconds, 3),
                }
            ),
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
