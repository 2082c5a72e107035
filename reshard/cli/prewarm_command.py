"""`lrs prewarm URL... --cache-dir DIR`: the click layer over `reshard.prewarm.prewarm`.

The library (and torch, which the reader needs) is imported when the command runs, so `lrs --help`
stays quick.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reshard.cli.base import dry_run_option, handle_errors, quiet_option, quiet_requested
from reshard.cli.types import ByteSize, IndexList, LocalDir, Weights

if TYPE_CHECKING:
    from reader.fetch_plan import FetchPlan

_SHOWN_FILES = 10


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
        click.UsageError: the options contradict each other or do not name this node's ranks.
    """
    if nnodes is not None and nproc_per_node is None and world_size is None:
        nproc_per_node = 1  # torchrun's default: --nnodes 2 alone is 2 processes
    if nproc_per_node is not None and nnodes is None and world_size is None:
        nnodes = 1  # torchrun's default: --nproc-per-node 4 alone is one node of 4 processes
    if nnodes is not None and nproc_per_node is not None:
        if world_size is not None and world_size != nnodes * nproc_per_node:
            raise click.UsageError(
                f"Invalid --world-size ({world_size}). Expected --nnodes x --nproc-per-node "
                f"({nnodes} x {nproc_per_node} = {nnodes * nproc_per_node})."
            )
        world_size = nnodes * nproc_per_node
    world_size = 1 if world_size is None else world_size
    if ranks is not None:
        if node_rank is not None:
            raise click.UsageError("Invalid options: --ranks and --node-rank. Expected one of them.")
        return NodeRanks(world_size, ranks)
    if nnodes is None and nproc_per_node is None:
        if node_rank is not None:
            raise click.UsageError(
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
            raise click.UsageError(
                f"Invalid {name} ({divisor}). Expected a divisor of the world size ({world_size})."
            )
    per_node = nproc_per_node if nproc_per_node is not None else world_size // (nnodes or 1)
    nodes = world_size // per_node
    if node_rank is None:
        if nodes > 1:
            raise click.UsageError(
                f"Missing --node-rank: the job has {nodes} nodes of {per_node} ranks. "
                "Expected this node's --node-rank (or --ranks)."
            )
        node_rank = 0
    if node_rank >= nodes:
        raise click.UsageError(
            f"Invalid --node-rank ({node_rank}). Expected < {nodes}, the nodes of a world of {world_size} "
            f"ranks with {per_node} per node."
        )
    return tuple(range(node_rank * per_node, (node_rank + 1) * per_node))


@click.command("prewarm")
@click.argument("urls", metavar="URL...", nargs=-1, required=True)
@click.option(
    "--cache-dir",
    required=True,
    type=LocalDir(hint="a node cache is a local directory; the dataset to read is the URL argument"),
    help="The node cache directory; train with EpisodeStream(..., cache_dir=DIR).",
)
@click.option(
    "--world-size",
    type=click.IntRange(1),
    envvar="WORLD_SIZE",
    show_envvar=True,
    help="Ranks in the training job [default: --nnodes x --nproc-per-node, else 1].",
)
@click.option("--nnodes", type=click.IntRange(1), help="Nodes in the job (torchrun's --nnodes).")
@click.option(
    "--nproc-per-node", type=click.IntRange(1), help="Ranks per node (torchrun's --nproc-per-node)."
)
@click.option(
    "--node-rank",
    type=click.IntRange(0),
    help="This node (torchrun's --node-rank): its ranks are node_rank x nproc_per_node onwards.",
)
@click.option(
    "--ranks", type=IndexList(), help="This node's ranks, explicitly: 0,1,2,3 or 0-3 [default: every rank]."
)
@click.option(
    "--num-workers",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="DataLoader workers per rank; must equal training's (0: the main process reads).",
)
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="EpisodeStream seed.")
@click.option(
    "--epoch", type=click.IntRange(0), default=0, show_default=True, help="The epoch training starts with."
)
@click.option(
    "--episode-pool-size",
    "pool_size",
    type=click.IntRange(1),
    help="EpisodeStream episode_pool_size [default: EpisodeStream's, max(16, 1.25 x --batch-size)].",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    help="EpisodeStream batch_size (the default pool follows it), as training passes it.",
)
@click.option("--shuffle/--no-shuffle", default=True, show_default=True, help="EpisodeStream shuffle.")
@click.option(
    "--weights",
    type=Weights(),
    help="A mixture's EpisodeStream weights, one per URL: 3,1 [default: every frame of every URL once].",
)
@click.option(
    "--samples-per-epoch",
    type=click.IntRange(1),
    help="A weighted mixture's EpisodeStream samples_per_epoch [default: the frames of all URLs].",
)
@click.option(
    "--episodes",
    "episode_indices",
    type=IndexList(),
    help="EpisodeStream episodes: the episode indices training reads, 0-99,120 [default: all].",
)
@click.option(
    "--num-episodes",
    "episodes_per_consumer",
    type=click.IntRange(1),
    help="Fetch only the first N episodes each consumer (rank x worker) admits [default: the epoch].",
)
@click.option(
    "--max-bytes",
    type=ByteSize(),
    help="Fetch at most this much: 50GiB or 50G (x 1024^3), 50GB (x 1000^3). Stops before the first "
    "file that would exceed it.",
)
@click.option(
    "--cache-max-bytes",
    type=ByteSize(),
    help="The cache budget, as EpisodeStream's cache_max_bytes; the plan never exceeds it.",
)
@click.option(
    "--resume-state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A JSON resume state (the stream's state_dict, or a trainer's batch count) that training will "
    "load: plan the rest of its epoch on this topology, which may differ from the one that saved it.",
)
@dry_run_option("the plan (consumers, episodes, files, bytes, the first files)")
@quiet_option
@handle_errors
def prewarm_command(
    urls: tuple[str, ...],
    cache_dir: Path,
    world_size: int | None,
    nnodes: int | None,
    nproc_per_node: int | None,
    node_rank: int | None,
    ranks: tuple[int, ...] | None,
    num_workers: int,
    seed: int,
    epoch: int,
    pool_size: int | None,
    batch_size: int | None,
    shuffle: bool,
    weights: tuple[float, ...] | None,
    samples_per_epoch: int | None,
    episode_indices: tuple[int, ...] | None,
    episodes_per_consumer: int | None,
    max_bytes: int | None,
    cache_max_bytes: int | None,
    resume_state: Path | None,
    dry_run: bool,
    quiet: bool,
) -> None:
    """Fill a node's cache with what its ranks will read first, in the order they will read it.

    URL is the dataset as training opens it (lrs/1 or plain v3); several URLs are a mixture,
    EpisodeStream([URL, ...], weights=, samples_per_epoch=), all in the one cache directory. The plan is
    the reader's own schedule, so every option that shapes it must match the training run:
    EpisodeStream(URL, episodes=, episode_pool_size= or batch_size=, shuffle=, seed=, world_size=,
    cache_dir=DIR, cache_max_bytes=), its set_epoch(), and the DataLoader's num_workers. Run it on each
    node with that node's --node-rank (or --ranks).

    Without --num-episodes or --max-bytes it fetches everything the node reads in one epoch, within the
    cache budget. Files already cached are skipped, so a rerun resumes an interrupted prewarm.
    """
    from reader.read_plan import default_pool_size
    from reshard.prewarm import prewarm

    topology = node_ranks(world_size, ranks, node_rank, nnodes, nproc_per_node)
    state = _read_state(resume_state)
    recorded = state.get("episode_pool_size") if isinstance(state, dict) else None
    if pool_size is None and batch_size is None and isinstance(recorded, int) and recorded >= 1:
        pool_size = recorded  # the pool the state was saved with is the one training will load it into
    pool = default_pool_size(batch_size) if pool_size is None else pool_size
    if len(urls) > 1 and episode_indices is not None:
        raise click.UsageError("Invalid --episodes with several URLs. Expected it for one dataset only.")
    if len(urls) == 1 and (weights is not None or samples_per_epoch is not None):
        raise click.UsageError("Invalid --weights or --samples-per-epoch for one URL. Expected a mixture.")
    try:
        summary = prewarm(
            urls[0] if len(urls) == 1 else list(urls),
            str(cache_dir),
            world_size=topology.world_size,
            ranks=topology.ranks,
            num_workers=num_workers,
            seed=seed,
            epoch=epoch,
            episode_pool_size=pool,
            episodes=episode_indices,
            episodes_per_consumer=episodes_per_consumer,
            max_bytes=max_bytes,
            cache_max_bytes=cache_max_bytes,
            dry_run=dry_run,
            progress=not quiet_requested(quiet),
            shuffle=shuffle,
            weights=weights,
            samples_per_epoch=samples_per_epoch,
            resume_state=state,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if dry_run and summary.plan is not None:
        _echo_plan(
            summary.plan,
            world_size=topology.world_size,
            num_workers=num_workers,
            pool=pool,
            mixture=len(urls) > 1,
        )
    click.echo(summary.describe())


def _echo_plan(
    plan: FetchPlan, *, world_size: int, num_workers: int, pool: int, mixture: bool = False
) -> None:
    from cache.progress import human_bytes

    ranks = sorted({rank for rank, _ in plan.consumers})
    click.echo(
        f"consumers: {len(plan.consumers)} = ranks {_ranges(ranks)} (world size {world_size}) x "
        f"{max(1, num_workers)} worker(s) each; episode pool {pool}"
    )
    click.echo(f"admissions: {plan.pieces} ({plan.episodes} episodes) with every file planned")
    click.echo(
        f"files: {len(plan.files)} ({human_bytes(plan.bytes)}) of {plan.needed_files} needed "
        f"({human_bytes(plan.needed_bytes)})"
    )
    for number, item in enumerate(plan.files[:_SHOWN_FILES], start=1):
        need = item.need
        source = f"dataset {need.source}, " if mixture else ""
        click.echo(
            f"  {number:>4}. {need.path}  {human_bytes(item.request.bytes or 0)}  ({source}rank {need.rank}, "
            f"worker {need.worker}, step {need.step}, episode {need.episode_index})"
        )
    if len(plan.files) > _SHOWN_FILES:
        click.echo(f"  ... {len(plan.files) - _SHOWN_FILES} more")


def _ranges(values: list[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2,5`."""
    parts = []
    for _, group in itertools.groupby(enumerate(values), key=lambda pair: pair[1] - pair[0]):
        run = [value for _, value in group]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


def _read_state(path: Path | None) -> dict[str, Any] | None:
    """The resume state in a JSON file or a `torch.save` checkpoint (the README's training loop saves
    `{"model": ..., "data": loader.state_dict()}`); a state under "data" is taken from there."""
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise click.BadParameter(f"Invalid resume state file ({exc}).", param_hint="--resume-state") from None
    try:
        state = json.loads(data)
    except ValueError:
        state = _torch_state(path)
        if state is None:
            raise click.BadParameter(
                f"Invalid resume state file ({path}). Expected JSON or a torch.save checkpoint.",
                param_hint="--resume-state",
            ) from None
    if isinstance(state, dict) and isinstance(state.get("data"), dict) and "batches_consumed" not in state:
        state = state["data"]
    return state


def _torch_state(path: Path) -> Any:
    """A `torch.save` file's content, loaded as plain data (`weights_only`: no code runs); None if it is
    not one."""
    import pickle
    import zipfile

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError, EOFError, ValueError, OSError):
        return None
