"""A training job's data side, run as its own process by the start-method tests (and under torchrun).

    python -m tests.reader.loader_job '<json spec>'

The spec names the dataset (`root`; a list of them and optional `weights` make a mixture, whose
samples are recorded as [dataset_index, episode, frame]), the DataLoader (`num_workers`, `method`: fork, spawn or forkserver,
`batch_size`; or `"loader": "batch"` and `threads` for a `reader.BatchLoader`), the stream (`seed`, `pool`), an optional resume `state` and `stop_after` batches. The job
writes `{"batches": [[[episode, frame], ...], ...], "state": ...}` to `out` (with `.rank<R>` appended
under torch.distributed), so a resume always runs in a new process, as a restarted trainer does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from reader import BatchLoader, EpisodeStream, ResumableLoader


def flip(frames: torch.Tensor) -> torch.Tensor:
    """An image transform defined at module level, so spawned workers can unpickle it."""
    return frames.flip(-1)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    stream = EpisodeStream(
        spec["root"],
        weights=spec.get("weights"),
        seed=spec.get("seed", 0),
        episode_pool_size=spec.get("pool", 4),
        return_uint8=True,
        image_transforms=flip,
        delta_timestamps=spec.get("delta_timestamps"),
    )
    workers = spec["num_workers"]
    loader: ResumableLoader | BatchLoader
    if spec.get("loader") == "batch":  # threads in this process: no DataLoader, no workers
        loader = BatchLoader(stream, spec.get("batch_size", 4), threads=spec.get("threads"))
    else:
        loader = ResumableLoader(
            DataLoader(
                stream,
                batch_size=spec.get("batch_size", 4),
                num_workers=workers,
                multiprocessing_context=spec.get("method") if workers else None,
            )
        )
    if spec.get("state") is not None:
        loader.load_state_dict(spec["state"])
    batches, stop = [], spec.get("stop_after")
    for batch in loader:
        pairs = [[int(e), int(f)] for e, f in zip(batch["episode_index"], batch["frame_index"], strict=True)]
        if "dataset_index" in batch:
            pairs = [[int(d), *p] for d, p in zip(batch["dataset_index"], pairs, strict=True)]
        batches.append(pairs)
        if stop is not None and len(batches) == stop:
            break
    return {"batches": batches, "state": loader.state_dict(), "rank": stream.rank, "world": stream.world_size}


def main() -> None:
    spec = json.loads(sys.argv[1])
    distributed = "LOCAL_RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    result = run(spec)
    out = spec["out"] + (f".rank{dist.get_rank()}" if distributed else "")
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


REPO = Path(__file__).resolve().parents[2]


def job(spec: dict[str, Any], tmp_path: Path, name: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this module in a new Python process (with `env` added to the environment) and return what
    it wrote."""
    out = tmp_path / f"{name}.json"
    subprocess.run(
        [sys.executable, "-m", "tests.reader.loader_job", json.dumps({**spec, "out": str(out)})],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        check=True,
        timeout=300,
    )
    return json.loads(out.read_text())


def torchrun(spec: dict[str, Any], tmp_path: Path, *, ranks: int = 2) -> list[dict[str, Any]]:
    """Run this module under torchrun with `ranks` processes and return what each rank wrote."""
    out = tmp_path / "ranks.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
         f"--master_port={port}", "-m", "tests.reader.loader_job", json.dumps({**spec, "out": str(out)})],
        cwd=REPO, env=env, check=True, timeout=300,
    )  # fmt: skip
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(ranks)]


if __name__ == "__main__":
    main()
