"""`scripts/slurm/train.sbatch` under a real slurmctld: prewarm per node, then 2 CPU ranks (gloo) over the
stream served by HTTP; `scontrol requeue` after some steps stops the ranks (SIGTERM), which checkpoint; the
requeued job resumes; USR1 to its batch shell (what `--signal=B:USR1@60` sends before the time limit) makes
it requeue itself, and it resumes again. The three runs together read one epoch, each frame once, in the
order of an uninterrupted run."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from reader import collate
from tests.servers import RangeServer
from tests.support.slurm_cluster import ROOT, SlurmCluster, poll

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

SLURM_DIR = ROOT / "scripts" / "slurm"
# The sizes the test passes: 2 ranks of batch 4, one DataLoader worker each (and a 0.3 s step).
RUN = {"BATCH_SIZE": "4", "NUM_WORKERS": "1", "SEED": "3"}
RANKS = 2


def trainer() -> ModuleType:
    """scripts/slurm/slurm_train.py, imported by its path (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("slurm_train", SLURM_DIR / "slurm_train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def uninterrupted(url: str, rank: int) -> list[list[int]]:
    """The (episode, frame) of every sample rank `rank` reads in an uninterrupted epoch, in order: the
    trainer's own stream, through a DataLoader as the trainer builds it."""
    args = argparse.Namespace(
        cache_dir=None,
        batch_size=int(RUN["BATCH_SIZE"]),
        num_workers=int(RUN["NUM_WORKERS"]),
        seed=int(RUN["SEED"]),
    )
    stream = trainer().open_stream(url, args, rank=rank, world_size=RANKS)
    loader = DataLoader(stream, batch_size=args.batch_size, num_workers=args.num_workers, collate_fn=collate)
    return [
        [int(e), int(f)] for b in loader for e, f in zip(b["episode_index"], b["frame_index"], strict=True)
    ]


def state(slurm: SlurmCluster, job: str) -> tuple[str, str]:
    """The job's (Restarts, JobState)."""
    fields = slurm.jobs(job)[job]
    return fields["Restarts"], fields["JobState"]


def logged(ckpt: Path, rank: int) -> list[dict[str, Any]]:
    path = ckpt / f"samples.rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_requeued_training_job_resumes_its_epoch_exactly(
    slurm: SlurmCluster, train_ds: Path, tmp_path: Path
) -> None:
    ckpt, cache = tmp_path / "ckpt", tmp_path / "cache"
    with RangeServer(train_ds) as server:
        env = {
            **RUN,
            "DATASET": server.url,
            "CKPT_DIR": str(ckpt),
            "CACHE_DIR": str(cache),
            "RECIPES": str(SLURM_DIR),
            "TRAIN_ARGS": "--samples-log --step-seconds 0.3",
        }
        job = slurm.sbatch(SLURM_DIR / "train.sbatch", f"--ntasks-per-node={RANKS}", env=env, cwd=tmp_path)
        poll(lambda: len(logged(ckpt, 0)) >= 2, "2 steps of the first run", timeout_s=90)
        slurm.run("scontrol", "requeue", job)  # a preemption
        poll(lambda: [line["run"] for line in logged(ckpt, 0)].count(1) >= 1, "a step of run 1", timeout_s=90)
        slurm.run(
            "scancel", "--batch", "--signal=USR1", job
        )  # what --signal=B:USR1@60 sends before the limit
        poll(
            lambda: state(slurm, job) == ("2", "COMPLETED"), "the twice requeued job completed", timeout_s=150
        )
        expected = [uninterrupted(server.url, rank) for rank in range(RANKS)]
    said = (tmp_path / f"lrs-train-{job}.out").read_text()
    assert all(f"run {run} of job" in said for run in range(3)) and "time limit near: requeue" in said, said
    assert said.count("stopped by SIGTERM, checkpoint saved") == 2 * RANKS, said
    runs = []
    for rank in range(RANKS):
        lines = logged(ckpt, rank)
        runs.append([line["run"] for line in lines])
        assert runs[-1] == sorted(runs[-1]) and set(runs[-1]) == {0, 1, 2}, runs[-1]
        assert [f for line in lines for f in line["frames"]] == expected[rank]
    assert runs[0] == runs[1]  # the ranks stopped after the same batch
    every = [tuple(f) for rank in range(RANKS) for f in expected[rank]]
    frames = {
        (int(e), int(f))
        for path in sorted((train_ds / "data").rglob("*.parquet"))
        for e, f in zip(
            *pq.read_table(path, columns=["episode_index", "frame_index"]).to_pydict().values(), strict=True
        )
    }
    assert len(set(every)) == len(every) and set(every) <= frames
    assert len(frames) - len(every) < RANKS  # an epoch drops fewer than world_size frames
    assert any(cache.rglob("*.mp4")), "prewarm filled the node cache"
