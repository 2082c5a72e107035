"""The trainer of `train.sbatch`: one process per rank (`srun`, ranks from SLURM's variables) over an
`EpisodeStream`, with torch.distributed (gloo on CPUs, nccl on GPUs), that checkpoints and exits when
SLURM stops the job and resumes from that checkpoint when the job runs again.

    srun python slurm_train.py DATASET --ckpt-dir DIR [--cache-dir DIR] [--batch-size 8] [--num-workers 2]

SLURM stops a job with SIGTERM to every process of it (preemption, `scancel`, `scontrol requeue`, the
batch shell's own requeue at `--signal=B:USR1@60`), then SIGKILL after KillWait. Each rank notes the
SIGTERM; after every step the ranks agree (one all_reduce) whether any got it, so that all stop after the
same batch and one data state serves them all; rank 0 saves the model, the optimizer and the loader's
state, and every rank exits 0. DataLoader workers ignore SIGTERM: their trainer stops them. The model is
a stand-in (one linear layer on `action`): put yours in its place.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from reader import EpisodeStream, ResumableLoader, collate


def open_stream(url: str, args: argparse.Namespace, *, rank: int, world_size: int) -> EpisodeStream:
    """The stream every rank reads (and what `lrs prewarm` in train.sbatch plans for)."""
    return EpisodeStream(
        url,
        cache_dir=args.cache_dir,
        batch_size=args.batch_size,
        seed=args.seed,
        num_workers=args.num_workers,
        rank=rank,
        world_size=world_size,
    )


def ignore_sigterm(_worker: int) -> None:
    """A DataLoader worker's start: SIGTERM is its trainer's to act on (the trainer stops the workers)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--ckpt-dir", type=Path, required=True)
    parser.add_argument("--cache-dir")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="Stands for a step's compute.")
    parser.add_argument("--samples-log", action="store_true", help="Log each batch's frames (ckpt-dir).")
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the batch shell's (it requeues), should it reach us
    rank, world_size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{os.environ['SLURM_LOCALID']}" if cuda else "cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world_size)
    stream = open_stream(args.dataset, args, rank=rank, world_size=world_size)
    loader = ResumableLoader(
        DataLoader(
            stream,
            batch_size=args.batch_size,
            num_workers=args.num_workers,
            collate_fn=collate,
            worker_init_fn=ignore_sigterm,
            pin_memory=cuda,
        )
    )
    policy = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(stream.meta.features["action"]["shape"][0], 1).to(device)
    )
    optimizer = torch.optim.AdamW(policy.parameters())
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = args.ckpt_dir / "ckpt.pt"
    start_epoch = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        policy.module.load_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["data"])
        start_epoch = state["data"]["epoch"]
        print(
            f"rank {rank}: resumed at epoch {start_epoch}, batch {state['data']['batches_consumed']}",
            flush=True,
        )
    log = (args.ckpt_dir / f"samples.rank{rank}.jsonl").open("a") if args.samples_log else None
    run = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    for epoch in range(start_epoch, args.epochs):
        stream.set_epoch(epoch)
        for batch in loader:
            loss = policy(batch["action"].to(device)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if log is not None:
                frames = [
                    [int(e), int(f)]
                    for e, f in zip(batch["episode_index"], batch["frame_index"], strict=True)
                ]
                log.write(json.dumps({"run": run, "epoch": epoch, "frames": frames}) + "\n")
                log.flush()
            time.sleep(args.step_seconds)
            if _any_rank(stop, device):
                _checkpoint(ckpt, rank, policy, optimizer, loader.state_dict())
                print(f"rank {rank}: stopped by SIGTERM, checkpoint saved", flush=True)
                return
    _checkpoint(ckpt, rank, policy, optimizer, loader.state_dict())
    print(f"rank {rank}: done", flush=True)


def _any_rank(stop: threading.Event, device: torch.device) -> bool:
    """Whether any rank got SIGTERM: all ranks call it after the same step, so all stop together."""
    flag = torch.tensor([int(stop.is_set())], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _checkpoint(
    path: Path, rank: int, policy: Any, optimizer: torch.optim.Optimizer, data: dict[str, Any]
) -> None:
    """Rank 0 writes the checkpoint (a temp file, then a rename); every rank waits for it."""
    if rank == 0:
        tmp = path.with_suffix(".tmp")
        torch.save(
            {"policy": policy.module.state_dict(), "optimizer": optimizer.state_dict(), "data": data}, tmp
        )
        os.replace(tmp, path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
