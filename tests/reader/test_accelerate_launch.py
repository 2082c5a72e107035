"""`accelerate launch --num_processes 2` on CPUs over the stream, as docs/multi-node.md describes (model and
optimizer prepared, the DataLoader not): each rank reads its own share, the union is one epoch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from reader import EpisodeStream, collate

REPO = Path(__file__).resolve().parents[2]
SPEC = {"batch_size": 4, "seed": 2}


def share(root: Path, rank: int) -> list[list[int]]:
    """Rank `rank` of 2's samples in order, read in this process."""
    stream = EpisodeStream(str(root), **SPEC, num_workers=0, rank=rank, world_size=2)  # type: ignore[arg-type]
    loader = DataLoader(stream, batch_size=SPEC["batch_size"], collate_fn=collate)
    return [
        [int(e), int(f)] for b in loader for e, f in zip(b["episode_index"], b["frame_index"], strict=True)
    ]


@pytest.mark.integration
def test_accelerate_launch_gives_each_rank_its_share(sample_resharded_ds: Path, tmp_path: Path) -> None:
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "frames.json"
    spec = json.dumps({**SPEC, "root": str(sample_resharded_ds), "out": str(out)})
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
         "--main_process_port", str(port), str(REPO / "tests/reader/accelerate_job.py"), spec],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(2)]
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)]
    for rank in range(2):
        assert ranks[rank]["frames"] == share(sample_resharded_ds, rank)
    every = [tuple(f) for r in ranks for f in r["frames"]]
    assert len(every) == len(set(every)) and len(ranks[0]["frames"]) == len(ranks[1]["frames"])
    frames = {
        (int(e), int(f))
        for path in sorted((sample_resharded_ds / "data").rglob("*.parquet"))
        for e, f in zip(
            *pq.read_table(path, columns=["episode_index", "frame_index"]).to_pydict().values(), strict=True
        )
    }
    assert (
        set(every) <= frames and len(frames) - len(every) < 2
    )  # one epoch, less fewer than world_size frames
