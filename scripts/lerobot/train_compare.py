"""lerobot-train and `lrs train` side by side in lerobot's environment: step time, data wait, loss.

The reader benchmarks (docs/benchmarks.md) time loaders alone; a lerobot user's question is what changes inside
lerobot's own training loop. Run with the Python of lerobot's environment (`scripts/lerobot/env.sh`,
which includes lerobot's `diffusion` extra):

    python scripts/lerobot/train_compare.py [--workdir DIR] [--steps 60] [--repeat 2]
        [--datasets sample recorded] [--policies act diffusion]

Datasets: `sample`, an `lrs sample` (v3 the way lerobot's recorder writes it, as
`train_check.py` makes it), and `recorded`, written by lerobot's recorder itself
(`scripts/lerobot/write_dataset.py`: 24 episodes of 40 frames, 2 cameras at 96x128, AV1). lerobot-train
reads the v3 source (`LeRobotDataset`, `return_uint8=True`), `lrs train` its `lrs reshard` (an
`EpisodeStream`, uint8): both move uint8 frames through the workers. Policies: a small ACT and a small
diffusion policy, random backbones (no download). Same flags on both sides: batch 8, 2 DataLoader
workers, `--steps`, a log line per step.

Round r runs every (dataset, policy) case as lerobot-train then `lrs train`, each a fresh process, both
with seed `--seed + r`: the same policy initialization, different sample orders (so the losses cannot
be identical). Across rounds, lerobot's own loss moves with the seed: that spread is the yardstick for
the gap between the two sides.

Per run, from lerobot's per-step lines, the first `--warmup` steps left out (workers starting, first
decodes): seconds per step (`updt_s + data_s`; the mean, and the median, which other load on the
machine moves less), data wait per step (`data_s`: lerobot's time from asking the DataLoader for a
batch to the batch normalized on the device), the process's wall seconds, the CPU seconds of its process
tree (the trainer and its DataLoader workers) and its start-up (wall less the logged steps), the last step's loss and the mean loss of the last 10 steps (one batch's loss is
noisy). Per case: means over rounds, ratios lrs/lerobot, loss gaps. Prints one JSON object; every
run's log stays in the work directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from itertools import combinations
from pathlib import Path
from statistics import fmean, median
from typing import Any

from train_runs import ACT, BATCH, TRAIN, WORKERS, make_dataset, resharded, run, tool  # this folder

# A small diffusion policy: horizon 16 (drop_n_last_frames = horizon - n_action_steps - n_obs_steps + 1),
# a 2-level U-Net, and a 10-step warm-up instead of 500 so that the loss moves within a short run.
DIFFUSION = [
    "--policy.type=diffusion",
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--policy.pretrained_backbone_weights=null",
    "--policy.horizon=16",
    "--policy.n_action_steps=8",
    "--policy.drop_n_last_frames=7",
    "--policy.down_dims=[64,128]",
    "--policy.diffusion_step_embed_dim=32",
    "--policy.spatial_softmax_num_keypoints=16",
    "--policy.scheduler_warmup_steps=10",
    *TRAIN,
]
POLICIES = {"act": ACT, "diffusion": DIFFUSION}
DATASETS = ("sample", "recorded")
SIDES = ("lerobot-train", "lrs-train")
TAIL = 10  # steps whose mean loss is reported


def run_stats(
    steps: list[tuple[float, ...]], wall_s: float, warmup: int, cpu_s: float = 0.0
) -> dict[str, Any]:
    """One run's figures from its logged `steps` (`parse_steps`), the first `warmup` out of timings, and
    its process tree's CPU seconds (`cpu_s`)."""
    if len(steps) <= warmup:
        raise ValueError(f"Invalid run ({len(steps)} steps logged). Expected more than {warmup} (warmup).")
    rest = steps[warmup:]
    update, data = fmean(s[2] for s in rest), fmean(s[3] for s in rest)
    return {
        "steps": len(steps),
        "step_s": round(update + data, 4),
        "step_s_median": round(median(s[2] + s[3] for s in rest), 4),
        "update_s": round(update, 4),
        "data_s": round(data, 4),
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "startup_s": round(wall_s - sum(s[2] + s[3] for s in steps), 1),
        "loss_last": steps[-1][1],
        "loss_tail": round(fmean(s[1] for s in steps[-TAIL:]), 4),
    }


def relative_gap(a: float, b: float) -> float:
    """|a - b| as a fraction of their mean: which of the two is the reference does not matter."""
    return round(2 * abs(a - b) / abs(a + b), 4) if a + b else float("inf")


def relative_ratio(a: float, b: float) -> float:
    """a / b, rounded for the report."""
    return round(a / b, 3) if b else float("inf")


def seed_spread(runs: list[dict[str, Any]]) -> float | None:
    """Mean relative gap of `loss_tail` between every two runs (each its own seed); None for one run."""
    pairs = list(combinations(runs, 2))
    return round(fmean(relative_gap(a["loss_tail"], b["loss_tail"]) for a, b in pairs), 4) if pairs else None


def case_summary(lerobot: list[dict[str, Any]], lrs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over rounds per side, ratios lrs/lerobot, and the loss gaps: lrs against lerobot at the
    same seed, and lerobot against itself across seeds (the yardstick)."""
    if not lerobot or len(lerobot) != len(lrs):
        raise ValueError(f"Invalid rounds ({len(lerobot)} lerobot, {len(lrs)} lrs). Expected as many, >= 1.")
    keys = ("step_s", "step_s_median", "update_s", "data_s", "wall_s", "cpu_s", "startup_s", "loss_tail")
    mean = {
        side: {k: round(fmean(r[k] for r in runs), 4) for k in keys}
        for side, runs in zip(SIDES, (lerobot, lrs), strict=True)
    }
    return {
        **mean,
        "lrs_over_lerobot": {
            k: relative_ratio(mean["lrs-train"][k], mean["lerobot-train"][k])
            for k in ("step_s", "step_s_median", "data_s", "wall_s", "cpu_s")
        },
        # Per round too: a round another job stalled stands out instead of moving the mean.
        "step_s_median_by_round": [
            relative_ratio(b["step_s_median"], a["step_s_median"]) for a, b in zip(lerobot, lrs, strict=True)
        ],
        "loss_gap_same_seed": round(
            fmean(relative_gap(b["loss_tail"], a["loss_tail"]) for a, b in zip(lerobot, lrs, strict=True)), 4
        ),
        "loss_gap_lerobot_seeds": seed_spread(lerobot),
        "loss_gap_lrs_seeds": seed_spread(lrs),
    }


def make_recorded(work: Path, lrs: str) -> tuple[Path, Path]:
    """The dataset lerobot's recorder writes (in its own process), and its reshard."""
    writer = Path(__file__).resolve().with_name("write_dataset.py")
    return resharded(work, lrs, ("recorded", "recorded-lrs"), [sys.executable, str(writer)])


def one_run(
    work: Path, lrs: str, side: str, case: tuple[str, str], data: tuple[Path, Path], seed: int, steps: int
) -> tuple[list[tuple[float, ...]], float, float]:
    """Train `case` (dataset, policy) with lerobot-train on the v3 source or `lrs train` on the reshard:
    the steps lerobot logged, the wall seconds and the process tree's CPU seconds."""
    name = f"{side}-{case[0]}-{case[1]}-seed{seed}"
    out = work / "runs" / name
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    if side == "lerobot-train":
        cmd = [tool("lerobot-train"), f"--dataset.repo_id=local/{case[0]}", f"--dataset.root={data[0]}"]
    else:
        cmd = [lrs, "train", f"--dataset.repo_id={data[1]}"]
    flags = [
        *POLICIES[case[1]],
        f"--steps={steps}",
        f"--seed={seed}",
        f"--output_dir={out}",
        "--save_checkpoint=false",
    ]
    result = run(name, [*cmd, *flags], work)
    return result["steps"], result["seconds"], result["cpu_s"]


def measure(
    work: Path,
    lrs: str,
    datasets: list[str],
    policies: list[str],
    *,
    steps: int,
    repeat: int,
    seed: int,
    warmup: int,
) -> dict[str, Any]:
    """Every case, rounds interleaved (lerobot, lrs, lerobot, lrs, ...); per case its runs and summary."""
    makers = {"sample": make_dataset, "recorded": make_recorded}
    data = {name: makers[name](work, lrs) for name in datasets}
    cases = [(d, p) for d in datasets for p in policies]
    runs: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in SIDES} for c in cases}
    for r in range(repeat):
        for case in cases:
            for side in SIDES:
                logged, wall, cpu = one_run(work, lrs, side, case, data[case[0]], seed + r, steps)
                runs[case][side].append({"seed": seed + r, **run_stats(logged, wall, warmup, cpu)})
    return {
        f"{d}/{p}": {"summary": case_summary(*runs[(d, p)].values()), "runs": runs[(d, p)]} for d, p in cases
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="Keep the files here (default: a temporary directory).")
    parser.add_argument("--steps", type=int, default=60, help="Training steps of every run.")
    parser.add_argument("--repeat", type=int, default=2, help="Rounds; round r uses seed --seed + r.")
    parser.add_argument("--seed", type=int, default=1, help="Seed of the first round.")
    parser.add_argument("--warmup", type=int, default=5, help="First steps left out of the timings.")
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--policies", nargs="+", choices=sorted(POLICIES), default=sorted(POLICIES))
    args = parser.parse_args()

    import lerobot
    import torch

    work = args.workdir or Path(tempfile.mkdtemp(prefix="lrs-train-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    before = os.getloadavg()
    cases = measure(
        work,
        tool("lrs"),
        args.datasets,
        args.policies,
        steps=args.steps,
        repeat=args.repeat,
        seed=args.seed,
        warmup=args.warmup,
    )
    report = {
        "lerobot": lerobot.__version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "workdir": str(work),
        "settings": {
            "steps": args.steps,
            "repeat": args.repeat,
            "seed": args.seed,
            "warmup": args.warmup,
            "batch_size": BATCH,
            "num_workers": WORKERS,
            "device": "cpu",
            "cpus": os.cpu_count(),
        },
        "transport": {
            "lerobot-train": "LeRobotDataset v3, return_uint8=True",
            "lrs-train": "EpisodeStream on the lrs reshard, uint8",
        },
        "loadavg_before": [round(x, 2) for x in before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cases": cases,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
