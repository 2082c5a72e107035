"""`scripts/slurm/prewarm_node.sh`, which train.sbatch runs once per node (`srun --ntasks-per-node=1`), under
a real slurmctld: each node's cache gets the files its ranks read. One machine is one node: two nodes are
emulated by two srun steps, each with its own cache directory and NNODES=2, NODE_RANK=0 or 1 standing for
SLURM_NNODES and SLURM_NODEID (the one real node's SLURM_NODEID, 0, is what train.sbatch's own run uses,
in test_train_requeue.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reader import EpisodeStream
from tests.servers import RangeServer
from tests.support.slurm_cluster import ROOT, SlurmCluster

pytestmark = pytest.mark.slurm

RUN = {"BATCH_SIZE": "4", "NUM_WORKERS": "0", "SEED": "1", "RANKS_PER_NODE": "2"}
NODES = 2


def episodes_read(url: str, rank: int) -> set[int]:
    """The episodes rank `rank` of `NODES` x 2 reads in the epoch (one consumer per rank, no workers)."""
    ranks = NODES * int(RUN["RANKS_PER_NODE"])
    stream = EpisodeStream(
        url, batch_size=4, seed=int(RUN["SEED"]), num_workers=0, rank=rank, world_size=ranks
    )
    return {int(e) for batch in stream.batches(4) for e in batch["episode_index"]}


def test_each_node_prewarms_what_its_ranks_read(slurm: SlurmCluster, train_ds: Path, tmp_path: Path) -> None:
    with RangeServer(train_ds) as server:
        for node in range(NODES):
            env = {
                **RUN,
                "DATASET": server.url,
                "CACHE_DIR": str(tmp_path / f"node{node}"),
                "NNODES": str(NODES),
            }
            said = slurm.run(
                "srun", "--ntasks-per-node=1", str(ROOT / "scripts/slurm/prewarm_node.sh"),
                env={**env, "NODE_RANK": str(node)}, cwd=tmp_path,
            )  # fmt: skip
            assert said.startswith("prewarm: ") and "for 2 consumers" in said, said
        read = [episodes_read(server.url, rank) for rank in range(NODES * 2)]
    for node in range(NODES):
        cached = {p.name for p in (tmp_path / f"node{node}").rglob("*.mp4")}
        wanted = read[2 * node] | read[2 * node + 1]
        assert cached == {f"file-{e:03d}.mp4" for e in wanted}, (node, cached, wanted)
