"""Check `lrs train` in lerobot's own environment: it trains, resumes exactly, and splits ranks right.

Run with the Python of an environment holding lerobot 0.6.1 (`lerobot[training]`) and lrs (installed
there with `pip install /path/to/lrs`, or this repository on `PYTHONPATH`); `scripts/lerobot/env.sh`
builds one:

    python scripts/lerobot/train_check.py [--workdir DIR] [--steps 20] [--compare]

On an `lrs sample` dataset resharded to lrs/1, with a small ACT (random backbone, no download), batch 8,
2 DataLoader workers, each run recording the `index` of every batch its trainer received
(`LRS_TRAIN_RECORD`, one file per rank):

1. `lrs train` for `--steps` steps, checkpointing halfway and at the end;
2. `lrs train --resume=true` from the halfway checkpoint, to the same step: its batches must be the
   uninterrupted run's second half, in order (exact resume from lerobot's checkpoint);
3. two CPU processes over gloo for one epoch, started by each launcher users run:
   `torchrun --nproc-per-node 2 lrs train --policy.device=cpu ...` and
   `accelerate launch --multi_gpu --num_processes 2 lrs train --policy.device=cpu ...` (accelerate's
   `--cpu` starts a single process unless MPI is set up; `--multi_gpu` runs torch's elastic launcher,
   and lerobot's `Accelerator(cpu=True)` joins the processes over gloo): under each, the two ranks'
   samples together must be every frame once (less the fewer than 2 frames an epoch drops), the same
   count per rank;
4. `--dataset.eval_split=0.25 --eval_steps=5` for 10 steps: lerobot logs an `eval_loss` at steps 5
   and 10, and the record holds the 10 training batches only, all from the training episodes;
5. with `--compare`, lerobot's own `lerobot-train` on the source v3 dataset and `lrs train` on its
   reshard, same flags and seed: seconds per step, lerobot's `data_s` per step, the loss and the ratios
   (one round of `scripts/lerobot/train_compare.py`'s ACT case on this dataset; that script measures
   more datasets, policies and rounds).

Prints one JSON object; exits 1 if a check fails. Every run's log is kept in the work directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from train_runs import ACT, BATCH, WORKERS, make_dataset, run, tool  # this folder

RANKS_TIMEOUT_S = 600  # an epoch on 2 ranks takes about a minute on 2 cores


def batches(record: Path, rank: int = 0) -> list[dict[str, Any]]:
    path = record / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def summary(steps: list[tuple[float, ...]]) -> dict[str, Any]:
    """First and last loss, and mean seconds per step of training and of waiting for data (lerobot's
    `updt_s` and `data_s`), the first step left out (start-up)."""
    rest = steps[1:] or steps
    return {
        "loss_first": steps[0][1] if steps else None,
        "loss_last": steps[-1][1] if steps else None,
        "update_s": round(sum(s[2] for s in rest) / max(1, len(rest)), 3),
        "data_s": round(sum(s[3] for s in rest) / max(1, len(rest)), 3),
    }


def frames_of(dataset: Path) -> int:
    return json.loads((dataset / "meta" / "info.json").read_text())["total_frames"]


def check_resume(work: Path, lrs: str, dataset: Path, steps: int) -> dict[str, Any]:
    """Steps 1 and 2: an uninterrupted run, then a resume from its halfway checkpoint."""
    half = steps // 2
    out = work / "single"
    shutil.rmtree(out, ignore_errors=True)
    common = [*ACT, f"--dataset.repo_id={dataset}", f"--save_freq={half}"]
    whole = run(
        "train", [lrs, "train", *common, f"--steps={steps}", f"--output_dir={out}"], work, work / "rec-train"
    )
    config = out / "checkpoints" / f"{half:06d}" / "pretrained_model" / "train_config.json"
    resumed = run(
        "resume",
        [lrs, "train", f"--config_path={config}", "--resume=true", f"--steps={steps}"],
        work,
        work / "rec-resume",
    )
    first = [b["index"] for b in batches(work / "rec-train")]
    second = [b["index"] for b in batches(work / "rec-resume")]
    return {
        "steps": steps,
        "seconds": whole["seconds"],
        **summary(whole["steps"]),
        "resumed_at_step": half,
        "resume_exact": len(first) == steps and second == first[half:],
        "resumed_batches": len(second),
        "resumed_seconds": resumed["seconds"],
    }


def free_port() -> int:
    """A TCP port free on this machine now: two checks at once, or a rank another run left behind,
    must not make a launcher fail with EADDRINUSE on a fixed port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launcher(name: str) -> list[str]:
    """The command line that starts 2 CPU processes of what follows it, under `name`."""
    if name == "torchrun":
        return [tool("torchrun"), "--nproc-per-node", "2", "--master-port", str(free_port())]
    # `--multi_gpu` is accelerate's torch elastic launcher whatever the device; the flags after it are
    # what accelerate would otherwise warn it chose.
    return [
        tool("accelerate"),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
    ]


def check_ranks(work: Path, lrs: str, dataset: Path, name: str) -> dict[str, Any]:
    """Step 3: two CPU processes under launcher `name`, one epoch, every frame once across the ranks."""
    from reader import EpisodeStream
    from reshard.train.loader import TrainLoader

    stream = EpisodeStream(str(dataset), batch_size=BATCH, rank=0, world_size=2, return_uint8=True)
    per_epoch = len(TrainLoader(stream, batch_size=BATCH, num_workers=WORKERS))
    out = work / f"ranks-{name}"
    shutil.rmtree(out, ignore_errors=True)
    record = work / f"rec-ranks-{name}"
    shutil.rmtree(record, ignore_errors=True)
    cmd = [*launcher(name), lrs, "train", *ACT, f"--dataset.repo_id={dataset}", f"--steps={per_epoch}"]
    full = [*cmd, f"--output_dir={out}", "--save_checkpoint=false"]
    result = run(f"ranks-{name}", full, work, record, timeout_s=RANKS_TIMEOUT_S)
    ranks = [[i for b in batches(record, r) if b["epoch"] == 0 for i in b["index"]] for r in (0, 1)]
    union = ranks[0] + ranks[1]
    frames = frames_of(dataset)
    return {
        "launcher": name,
        "processes": 2,
        "steps": per_epoch,
        "seconds": result["seconds"],
        "samples_per_rank": [len(r) for r in ranks],
        "frames": frames,
        "every_frame_once": len(set(union)) == len(union)
        and frames - len(union) < 2
        and set(union) <= set(range(frames)),
        "equal_ranks": len(ranks[0]) == len(ranks[1]),
    }


def check_eval_split(work: Path, lrs: str, dataset: Path) -> dict[str, Any]:
    """Step 4: a quarter of each task's episodes held out, its eval loss every 5 of 10 steps; the
    trainer's record holds its training batches only, none from a held-out episode."""
    from reader.format.catalog import Catalog
    from reshard.train.hooks import first_tasks
    from reshard.train.options import split_episodes

    out, record = work / "eval-split", work / "rec-eval-split"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(record, ignore_errors=True)
    flags = ["--dataset.eval_split=0.25", "--eval_steps=5", "--steps=10", "--save_checkpoint=false"]
    result = run(
        "eval-split",
        [lrs, "train", *ACT, f"--dataset.repo_id={dataset}", *flags, f"--output_dir={out}"],
        work,
        record,
    )
    catalog = Catalog.open(str(dataset))
    split = split_episodes(range(len(catalog.lengths)), first_tasks(catalog), 0.25)
    starts, lengths = catalog.from_indices.tolist(), catalog.lengths.tolist()
    held_out = {i for e in split.eval for i in range(starts[e], starts[e] + lengths[e])}
    trained = [i for b in batches(record) for i in b["index"]]
    return {
        "train_episodes": list(split.train),
        "eval_episodes": list(split.eval),
        "eval_losses": result["evals"],
        "train_batches": len(batches(record)),
        "trained_on_held_out": len(held_out.intersection(trained)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="Keep the files here (default: a temporary directory).")
    parser.add_argument("--steps", type=int, default=20, help="Steps of the single-process run (even).")
    parser.add_argument("--compare", action="store_true", help="Also run lerobot-train for comparison.")
    args = parser.parse_args()

    import lerobot

    work = args.workdir or Path(tempfile.mkdtemp(prefix="lrs-train-check-"))
    work.mkdir(parents=True, exist_ok=True)
    lrs = tool("lrs")
    _, dataset = make_dataset(work, lrs)
    report: dict[str, Any] = {
        "lerobot": lerobot.__version__,
        "workdir": str(work),
        "python": sys.version.split()[0],
    }
    report["single"] = check_resume(work, lrs, dataset, args.steps)
    report["two_ranks"] = check_ranks(work, lrs, dataset, "torchrun")
    report["two_ranks_accelerate"] = check_ranks(work, lrs, dataset, "accelerate")
    report["eval_split"] = check_eval_split(work, lrs, dataset)
    if args.compare:  # the short form of train_compare.py: this dataset, ACT, one round
        from train_compare import measure

        report["compare"] = measure(
            work, lrs, ["sample"], ["act"], steps=args.steps, repeat=1, seed=1, warmup=5
        )
    ok = report["single"]["resume_exact"]
    for ranks in (report["two_ranks"], report["two_ranks_accelerate"]):
        ok = ok and ranks["every_frame_once"] and ranks["equal_ranks"]
    held = report["eval_split"]
    ok = ok and [s for s, _ in held["eval_losses"]] == [5, 10] and held["train_batches"] == 10
    ok = ok and held["trained_on_held_out"] == 0
    report["ok"] = bool(ok)
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
