"""`reader.plan.topology.node_ranks`: torchrun's topology options (or explicit ranks) to a world size and the
ranks of one node, and the errors that name the contradicting options (`lrs prewarm` shows them)."""

from __future__ import annotations

import pytest

from reader.plan.topology import NodeRanks, node_ranks


@pytest.mark.parametrize(
    ("world_size", "ranks", "node_rank", "nnodes", "nproc", "expected"),
    [
        (None, None, None, None, None, NodeRanks(1, None)),
        (8, None, 1, 2, 4, NodeRanks(8, (4, 5, 6, 7))),
        (None, None, 1, 2, 4, NodeRanks(8, (4, 5, 6, 7))),
        (8, None, 0, 2, None, NodeRanks(8, (0, 1, 2, 3))),
        (8, (0, 5), None, None, None, NodeRanks(8, (0, 5))),
        (4, None, None, None, 4, NodeRanks(4, (0, 1, 2, 3))),
        (None, None, 1, 2, None, NodeRanks(2, (1,))),
        (None, None, None, None, 4, NodeRanks(4, (0, 1, 2, 3))),
    ],
    ids=[
        "default",
        "torchrun",
        "no-world-size",
        "nnodes-only",
        "ranks",
        "single-node",
        "torchrun-nnodes-alone",
        "torchrun-nproc-alone",
    ],
)
def test_node_ranks(world_size, ranks, node_rank, nnodes, nproc, expected) -> None:
    assert node_ranks(world_size, ranks, node_rank, nnodes, nproc) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (8, None, 0, 3, 4),
            r"Invalid --world-size \(8\)\. Expected --nnodes x --nproc-per-node \(3 x 4 = 12\)",
        ),
        ((8, (0,), 0, None, 4), r"Invalid options: --ranks and --node-rank\. Expected one of them\."),
        ((8, None, 0, 3, None), r"Invalid --nnodes \(3\)\. Expected a divisor of the world size \(8\)\."),
        ((8, None, 1, None, None), r"Invalid --node-rank without --nproc-per-node\."),
        ((8, None, None, None, 4), r"Missing --node-rank: the job has 2 nodes of 4 ranks\."),
        ((8, None, 2, None, 4), r"Invalid --node-rank \(2\)\. Expected < 2, the nodes of a world of 8 ranks"),
        (
            (6, None, 1, None, 4),
            r"Invalid --nproc-per-node \(4\)\. Expected a divisor of the world size \(6\)\.",
        ),
    ],
    ids=[
        "world-mismatch",
        "ranks-and-node",
        "nnodes-divisor",
        "node-alone",
        "node-missing",
        "node-outside",
        "partial-node",
    ],
)
def test_node_ranks_errors(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        node_ranks(*args)
