"""A node's ranks: the training job's world size and the ranks one node runs, from torchrun's options.

`lrs prewarm` fills a node's cache for the ranks of that node only; `node_ranks` resolves the topology
options it takes (torchrun's `--nnodes`, `--nproc-per-node`, `--node-rank`, or explicit `--ranks`) to a
world size and those ranks. Pure but for `resolve_topology`, which reads the environment (RANK,
WORLD_SIZE) when no size is given. Errors name the options, as `lrs prewarm` offers them.
"""

from __future__ import annotations

from dataclasses import dataclass

from reader.plan.spec import resolve_topology


@dataclass(frozen=True)
class NodeRanks:
    """The training job's world size and this node's ranks (None: every rank)."""

    world_size: int
    ranks: tuple[int, ...] | None


def node_ranks(
    world_size: int | None,
    ranks: tuple[int, ...] | None,
    node_rank: int | None,
    nnodes: int | None,
    nproc_per_node: int | None,
) -> NodeRanks:
    """Resolve the topology options (torchrun's names, or explicit ranks) to a world size and ranks.

    Raises:
        ValueError: the options contradict each other or do not name this node's ranks.
    """
    if nnodes is not None and nproc_per_node is None and world_size is None:
        nproc_per_node = 1  # torchrun's default: --nnodes 2 alone is 2 processes
    if nproc_per_node is not None and nnodes is None and world_size is None:
        nnodes = 1  # torchrun's default: --nproc-per-node 4 alone is one node of 4 processes
    if nnodes is not None and nproc_per_node is not None:
        if world_size is not None and world_size != nnodes * nproc_per_node:
            raise ValueError(
                f"Invalid --world-size ({world_size}). Expected --nnodes x --nproc-per-node "
                f"({nnodes} x {nproc_per_node} = {nnodes * nproc_per_node})."
            )
        world_size = nnodes * nproc_per_node
    if world_size is None:
        world_size = resolve_topology(0, None)[1]
    if ranks is not None:
        if node_rank is not None:
            raise ValueError("Invalid options: --ranks and --node-rank. Expected one of them.")
        return NodeRanks(world_size, ranks)
    if nnodes is None and nproc_per_node is None:
        if node_rank is not None:
            raise ValueError(
                "Invalid --node-rank without --nproc-per-node. Expected --nproc-per-node (or --nnodes)."
            )
        return NodeRanks(world_size, None)
    return NodeRanks(world_size, _node_block(world_size, node_rank, nnodes, nproc_per_node))


def _node_block(
    world_size: int, node_rank: int | None, nnodes: int | None, nproc_per_node: int | None
) -> tuple[int, ...]:
    """The ranks of node `node_rank` (torchrun: `node_rank * nproc_per_node` onwards)."""
    for name, divisor in (("--nnodes", nnodes), ("--nproc-per-node", nproc_per_node)):
        if divisor is not None and world_size % divisor:
            raise ValueError(
                f"Invalid {name} ({divisor}). Expected a divisor of the world size ({world_size})."
            )
    per_node = nproc_per_node if nproc_per_node is not None else world_size // (nnodes or 1)
    nodes = world_size // per_node
    if node_rank is None:
        if nodes > 1:
            raise ValueError(
                f"Missing --node-rank: the job has {nodes} nodes of {per_node} ranks. "
                "Expected this node's --node-rank (or --ranks)."
            )
        node_rank = 0
    if node_rank >= nodes:
        raise ValueError(
            f"Invalid --node-rank ({node_rank}). Expected < {nodes}, the nodes of a world of {world_size} "
            f"ranks with {per_node} per node."
        )
    return tuple(range(node_rank * per_node, (node_rank + 1) * per_node))
