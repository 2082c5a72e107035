"""`lrs prewarm DATASET... --cache-dir DIR`: the click layer over `reshard.prewarm.prewarm`;
`reader.plan.topology.node_ranks` reads its topology options.

The library (and torch, which the reader needs) is imported when the command runs, so `lrs --help`
stays quick.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cache.arguments import format_index_list
from cache.printable import printable
from cache.redaction import redact
from reshard.cli.base import (
    RERUN_TO_RESUME,
    F,
    dry_run_option,
    endpoint_url_option,
    examples,
    handle_errors,
    quiet_option,
    quiet_requested,
    set_interrupt_hint,
)
from reshard.cli.types import ByteSize, IndexList, InvalidValue, LocalDir, Weights

if TYPE_CHECKING:
    from reader import ReadSpec
    from reader.plan import FetchPlan

_SHOWN_FILES = 10


@dataclass(frozen=True)
class _SpecOption:
    """A `lrs prewarm` option that a read spec holds: its flag, the command's parameter, the spec's value
    for it, and the rest of its `click.option` settings; applied, it is that option."""

    flag: str
    param: str
    of_spec: Callable[[ReadSpec], Any]
    settings: dict[str, Any]

    def __call__(self, fn: F) -> F:
        return click.option(self.flag, self.param, **self.settings)(fn)


def _spec_option(
    flag: str,
    *,
    param: str | None = None,
    of_spec: Callable[[ReadSpec], Any] | None = None,
    **settings: Any,
) -> _SpecOption:
    """A `_SpecOption`; its parameter is `param`, else the flag's name as click makes it, and the spec's
    value is `of_spec`'s, else the spec's attribute of the parameter's name."""
    param = param or flag.split("/")[0].removeprefix("--").replace("-", "_")
    return _SpecOption(flag, param, of_spec or attrgetter(param), settings)


# Every option a read spec holds, once: what the command line offers, and what `--spec` checks it against.
_SPEC_OPTIONS = {
    option.param: option
    for option in (
        _spec_option(
            "--cache-dir",
            of_spec=lambda spec: spec.cache_dir and os.path.abspath(spec.cache_dir),
            type=LocalDir(hint="a node cache is a local directory; the dataset to read is the URL argument"),
            help="The node cache directory; train with EpisodeStream(..., cache_dir=DIR) "
            "[default: the spec's].",
        ),
        _spec_option(
            "--world-size",
            type=click.IntRange(1),
            envvar="WORLD_SIZE",
            show_envvar=True,
            help="Ranks in the training job [default: --nnodes x --nproc-per-node, else 1].",
        ),
        _spec_option(
            "--num-workers",
            type=click.IntRange(0),
            default=0,
            show_default=True,
            help="DataLoader workers per rank; must equal training's (0: the main process reads, as with "
            "reader.BatchLoader).",
        ),
        _spec_option(
            "--seed",
            type=click.IntRange(0),
            default=0,
            show_default=True,
            help="EpisodeStream seed.",
        ),
        _spec_option(
            "--episode-pool-size",
            param="pool_size",
            type=click.IntRange(1),
            help="EpisodeStream episode_pool_size [default: EpisodeStream's, max(16, 1.25 x --batch-size)].",
        ),
        _spec_option(
            "--batch-size",
            of_spec=lambda spec: (
                spec.pool_size
            ),  # `_spec_from_file` compares the pool the batch size stands for
            type=click.IntRange(1),
            help="EpisodeStream batch_size (the default pool follows it), as training passes it.",
        ),
        _spec_option(
            "--shuffle/--no-shuffle",
            default=True,
            show_default=True,
            help="EpisodeStream shuffle.",
        ),
        _spec_option(
            "--weights",
            type=Weights(),
            help="A mixture's EpisodeStream weights, one per URL: 3,1 "
            "[default: every frame of every URL once].",
        ),
        _spec_option(
            "--samples-per-epoch",
            type=click.IntRange(1),
            help="A weighted mixture's EpisodeStream samples_per_epoch [default: the frames of all URLs].",
        ),
        _spec_option(
            "--episodes",
            of_spec=lambda spec: spec.sources[0].episodes,
            param="episode_indices",
            type=IndexList(),
            help="EpisodeStream episodes: the episode indices training reads, 0-99,120 [default: all].",
        ),
        _spec_option(
            "--cache-max-bytes",
            type=ByteSize(),
            help="The cache budget, as EpisodeStream's cache_max_bytes; the plan never exceeds it.",
        ),
    )
}


@click.command(
    "prewarm",
    epilog=examples(
        "lrs sample v3 --num-episodes 4",
        "lrs reshard v3 --out lrs",
        "lrs prewarm lrs --cache-dir cache --num-workers 2 --dry-run",
    ),
)
@click.argument("urls", metavar="[DATASET...]", nargs=-1)
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The training run's read spec (what stream.spec.to_json() wrote): the datasets and every option "
    "that shapes the order come from it.",
)
@_SPEC_OPTIONS["cache_dir"]
@_SPEC_OPTIONS["world_size"]
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
@_SPEC_OPTIONS["num_workers"]
@_SPEC_OPTIONS["seed"]
@click.option(
    "--epoch", type=click.IntRange(0), default=0, show_default=True, help="The epoch training starts with."
)
@_SPEC_OPTIONS["pool_size"]
@_SPEC_OPTIONS["batch_size"]
@_SPEC_OPTIONS["shuffle"]
@_SPEC_OPTIONS["weights"]
@_SPEC_OPTIONS["samples_per_epoch"]
@_SPEC_OPTIONS["episode_indices"]
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
@_SPEC_OPTIONS["cache_max_bytes"]
@click.option(
    "--resume-state",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A JSON resume state (the stream's state_dict, or a trainer's batch count) that training will "
    "load: plan the rest of its epoch on this topology, which may differ from the one that saved it.",
)
@dry_run_option("the plan (consumers, episodes, files, bytes, the first files)")
@quiet_option
@endpoint_url_option()
@handle_errors
def prewarm_command(
    spec_file: Path | None,
    nnodes: int | None,
    nproc_per_node: int | None,
    node_rank: int | None,
    ranks: tuple[int, ...] | None,
    epoch: int,
    episodes_per_consumer: int | None,
    max_bytes: int | None,
    resume_state: Path | None,
    dry_run: bool,
    quiet: bool,
    **given: Any,
) -> None:
    """Fill a node's cache with what its ranks will read first, in the order they will read it.

    URL is the dataset as training opens it (lrs/1 or plain v3); several URLs are a mixture,
    EpisodeStream([URL, ...], weights=, samples_per_epoch=), all in the one cache directory. The plan is
    the reader's own schedule, so every option that shapes it must match the training run:
    EpisodeStream(URL, episodes=, episode_pool_size= or batch_size=, shuffle=, seed=, world_size=,
    cache_dir=DIR, cache_max_bytes=), its set_epoch(), and the DataLoader's num_workers. Or give none
    of them: --spec FILE, the run's own stream.spec.to_json(). A spec saves a URL without its
    credentials (user:password@ and the query are redacted): give such a URL again after --spec.
    Run it on each node with that node's --node-rank (or --ranks).

    Without --num-episodes or --max-bytes it fetches everything the node reads in one epoch, within the
    cache budget. Files already cached are skipped, so a rerun resumes an interrupted prewarm.
    """
    set_interrupt_hint(lambda: RERUN_TO_RESUME)
    from reader.plan import node_ranks
    from reshard.prewarm import prewarm

    state = _read_state(resume_state)  # `given`: the URLs and every option in `_SPEC_OPTIONS`
    try:
        if spec_file is not None:
            spec = _spec_from_file(spec_file, _on_command_line(given))
        else:
            spec = _spec_from_options(given, _recorded_pool(state))
        topology = node_ranks(spec.world_size, ranks, node_rank, nnodes, nproc_per_node)
        spec = replace(spec, world_size=topology.world_size)
        summary = prewarm(
            spec,
            ranks=topology.ranks,
            epoch=epoch,
            episodes_per_consumer=episodes_per_consumer,
            max_bytes=max_bytes,
            dry_run=dry_run,
            progress=not quiet_requested(quiet),
            resume_state=state,
        )
    except ValueError as exc:
        raise click.UsageError(redact(str(exc))) from exc
    if dry_run and summary.plan is not None:
        _echo_plan(
            summary.plan,
            world_size=topology.world_size,
            num_workers=spec.num_workers or 0,
            pool=spec.pool_size,
            mixture=bool(spec.mixture),
        )
    click.echo(summary.describe())


def _on_command_line(given: dict[str, Any]) -> dict[str, Any]:
    """The options of `given` that the command line (not a default or the environment) set."""
    from click.core import ParameterSource

    context = click.get_current_context()
    return {
        name: value
        for name, value in given.items()
        if context.get_parameter_source(name) == ParameterSource.COMMANDLINE
    }


def _spec_from_file(path: Path, options: dict[str, Any]) -> ReadSpec:
    """The spec in `path`, with what the command line adds: the cache directory, the DataLoader's workers
    and the world size where the spec leaves them open, and the URLs with the credentials the spec was
    saved without.

    Raises:
        click.UsageError: an option contradicts the spec, or the spec lacks a URL's credentials and the
            command line does not give it again.
        click.BadParameter: the file is not a read spec.
    """
    from reader import ReadSpec
    from reader.plan import default_pool_size

    try:
        spec = ReadSpec.from_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{exc} (in {path})", param_hint="--spec") from None
    spec = _with_urls(spec, path, options.pop("urls", None))
    if "cache_dir" in options:
        options["cache_dir"] = os.path.abspath(options["cache_dir"])
    if "batch_size" in options:
        options["batch_size"] = default_pool_size(options["batch_size"])  # the pool it stands for
    if "episode_indices" in options:
        options["episode_indices"] = tuple(options["episode_indices"])
    fills = {}
    for name, value in options.items():
        option, of_spec = _held_by_spec(name)
        if name in ("cache_dir", "world_size", "num_workers") and of_spec(spec) is None:
            fills[name] = value
        elif value != of_spec(spec):
            shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
            raise click.UsageError(
                f"Invalid {option} ({shown}) with --spec {path} ({of_spec(spec)!r} there). "
                f"Expected the spec's value, or no {option}."
            )
    spec = replace(spec, **fills)
    if spec.cache_dir is None:
        raise click.UsageError(f"Missing option '--cache-dir': the spec {path} names no cache directory.")
    return spec


def _with_urls(spec: ReadSpec, path: Path, urls: tuple[str, ...] | None) -> ReadSpec:
    """`spec` reading `urls`, the command line's URL arguments: each the spec's own URL, given again with
    the credentials a saved spec leaves out (`ReadSpec.to_json` redacts them).

    Raises:
        click.UsageError: a URL that is not the spec's, or none where the spec's URL was redacted.
    """
    if not urls:
        if spec.redacted_urls:
            raise click.UsageError(
                f"Missing argument 'DATASET...': the spec {path} holds {', '.join(spec.redacted_urls)} without "
                f"its credentials (redacted when it was saved). Expected the URL again: lrs prewarm --spec "
                f"{path} URL..."
            )
        return spec
    try:
        return spec.with_urls(urls)
    except ValueError:
        shown, held = ", ".join(redact(u) for u in urls), ", ".join(redact(s.url) for s in spec.sources)
        raise click.UsageError(
            f"Invalid URL ({shown}) with --spec {path} ({held} there). Expected the spec's URLs, with the "
            "credentials it was saved without, or no URL."
        ) from None


def _held_by_spec(name: str) -> tuple[str, Callable[[ReadSpec], Any]]:
    """The option of parameter `name` as a message names it, and the spec's value for it."""
    option = _SPEC_OPTIONS[name]
    return option.flag, option.of_spec


def _spec_from_options(given: dict[str, Any], recorded_pool: int | None) -> ReadSpec:
    """The spec the command line's options describe (`EpisodeStream`'s keyword form).

    Raises:
        click.UsageError: no URL, no cache directory, or options that need another number of URLs.
    """
    from reader import ReadSpec

    urls, pool, batch = given["urls"], given["pool_size"], given["batch_size"]
    if not urls:
        raise click.UsageError("Missing argument 'DATASET...'. Expected the dataset(s), or --spec FILE.")
    if given["cache_dir"] is None:
        raise click.UsageError("Missing option '--cache-dir'.")
    if pool is None and batch is None and recorded_pool is not None:
        pool = recorded_pool  # the pool the state was saved with is the one training will load it into
    if len(urls) > 1 and given["episode_indices"] is not None:
        raise click.UsageError("Invalid --episodes with several URLs. Expected it for one dataset only.")
    if len(urls) == 1 and (given["weights"] is not None or given["samples_per_epoch"] is not None):
        raise click.UsageError("Invalid --weights or --samples-per-epoch for one URL. Expected a mixture.")
    return ReadSpec.of(
        urls[0] if len(urls) == 1 else list(urls),
        weights=given["weights"],
        samples_per_epoch=given["samples_per_epoch"],
        episodes=given["episode_indices"],
        episode_pool_size=pool,
        batch_size=batch,
        shuffle=given["shuffle"],
        seed=given["seed"],
        world_size=given["world_size"],
        num_workers=given["num_workers"],
        cache_dir=str(given["cache_dir"]),
        cache_max_bytes=given["cache_max_bytes"],
    )


def _recorded_pool(state: Any) -> int | None:
    """The pool size a resume state was saved with, if it says."""
    recorded = state.get("episode_pool_size") if isinstance(state, dict) else None
    return recorded if isinstance(recorded, int) and recorded >= 1 else None


def _echo_plan(
    plan: FetchPlan, *, world_size: int, num_workers: int, pool: int, mixture: bool = False
) -> None:
    from cache.progress import human_bytes

    ranks = sorted({rank for rank, _ in plan.consumers})
    click.echo(
        f"consumers: {len(plan.consumers)} = ranks {format_index_list(ranks)} (world size {world_size}) x "
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
            f"  {number:>4}. {printable(need.path)}  {human_bytes(item.request.bytes or 0)}  ({source}rank {need.rank}, "
            f"worker {need.worker}, step {need.step}, episode {need.episode_index})"
        )
    if len(plan.files) > _SHOWN_FILES:
        click.echo(f"  ... {len(plan.files) - _SHOWN_FILES} more")


def _read_state(path: Path | None) -> dict[str, Any] | None:
    """The resume state in a JSON file or a `torch.save` checkpoint (the training loop of docs/training-loop.md saves
    `{"model": ..., "data": loader.state_dict()}`); a state under "data" is taken from there."""
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidValue(f"Invalid resume state file ({exc}).", param_hint="--resume-state") from None
    try:
        state = json.loads(data)
    except ValueError:
        state = _torch_state(path)
        if state is None:
            raise InvalidValue(
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
