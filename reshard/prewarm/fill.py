"""`lrs prewarm`: fill a node's cache with what its ranks will read first, in the order they will read it.

The plan comes from the training run's own read spec (`reader.plan.spec.ReadSpec`: `stream.spec`, or the
file a training job writes with `stream.spec.to_json()`), planned as its `EpisodeStream` plans it
(`reader.plan.read_plan.ReadPlan`; `reader.plan.fetch` turns its schedule into files), without torch, and the
files land in the very cache the stream reads through (the spec's `cache_dir`: same directory, same
dataset fingerprint, same size and sha256 expectations). A training run started afterwards with the
same spec finds them there. Reruns skip what is cached, so an interrupted prewarm resumes.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from cache import FetchError, NodeCache, Remote
from cache.arguments import check_int
from cache.ordered_fetch import FetchSummary, FileRequest, fetch_in_order
from cache.progress import human_bytes, plural
from cache.store import CacheLayout
from cache.trust import check_owned_dir
from reader.errors import LayoutError
from reader.format.catalog import Catalog
from reader.format.index import FILES_INDEX, files_from_table
from reader.format.parquet import MAX_METADATA_PARQUET_BYTES, parse_parquet
from reader.plan.fetch import FetchPlan, Needs, check_ranks, plan_needs, plan_prewarm
from reader.plan.read_plan import ReadPlan
from reader.plan.resume.state import parse_state
from reader.plan.source import FETCH_THREADS
from reader.plan.spec import ReadSpec, resolve_topology

__all__ = ["PrewarmSummary", "prewarm"]

# HEAD requests in flight when a plain v3 source lists no file sizes.
_SIZE_THREADS = 8


@dataclass(frozen=True)
class PrewarmSummary(FetchSummary):
    """What a prewarm planned and did: the fetch's counts (`cache.ordered_fetch.FetchSummary`, with `seconds`
    counting the planning too, the rate `describe` prints is over it) and the plan's.

    Attributes:
        consumers: (rank, worker) pairs planned for.
        pieces: admissions whose files are all planned.
        episodes: distinct episodes among them.
        needed_files: files this node needs (in its first `episodes_per_consumer` admissions, or the
            whole epoch) before the byte limits.
        needed_bytes: their bytes.
        limited_by: "max_bytes" or "cache_max_bytes" when that limit cut the plan, else None.
        dry_run: nothing was fetched; `files_cached` counts the planned files the cache holds already at
            their listed size, which the run would skip.
        bytes_cached: their bytes (dry runs only).
        in_place: the source is a local path: the reader reads its files where they are (the cache's
            fast path), nothing is copied (its files count as cached).
        plan: the plan itself.
    """

    consumers: int = 0
    pieces: int = 0
    episodes: int = 0
    needed_files: int = 0
    needed_bytes: int = 0
    limited_by: str | None = None
    dry_run: bool = False
    bytes_cached: int = 0
    in_place: bool = False
    plan: FetchPlan | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        fetched: FetchSummary,
        plan: FetchPlan,
        *,
        seconds: float,
        dry_run: bool,
        in_place: bool,
        bytes_cached: int = 0,
    ) -> PrewarmSummary:
        """The summary of a run of `plan` that did `fetched`."""
        return cls(
            bytes_cached=bytes_cached,
            **{**dataclasses.asdict(fetched), "seconds": seconds},
            consumers=len(plan.consumers),
            pieces=plan.pieces,
            episodes=plan.episodes,
            needed_files=plan.needed_files,
            needed_bytes=plan.needed_bytes,
            limited_by=plan.limited_by,
            dry_run=dry_run,
            in_place=in_place,
            plan=plan,
        )

    def describe(self) -> str:
        """One line for the end of a run."""
        scope = (
            f"{plural(self.files, 'file')}, {human_bytes(self.bytes)} for {plural(self.consumers, 'consumer')} "
            f"({plural(self.pieces, 'admission')}, {plural(self.episodes, 'episode')})"
        )
        if self.dry_run and self.in_place:
            text = f"prewarm dry run: {scope}; nothing fetched"
        elif self.dry_run:
            todo, todo_bytes = self.files - self.files_cached, max(0, self.bytes - self.bytes_cached)
            text = (
                f"prewarm dry run: {scope}: would fetch {plural(todo, 'file')} ({human_bytes(todo_bytes)}), "
                f"{self.files_cached} already cached; nothing fetched"
            )
        elif self.in_place:
            text = f"prewarm: {scope}: checked in {self.seconds:.1f} s"
        else:
            text = (
                f"prewarm: {scope}: {self.files_fetched} fetched ({human_bytes(self.bytes_fetched)}), "
                f"{self.files_cached} already cached, in {self.seconds:.1f} s"
            )
            if self.files_fetched and self.seconds > 0:
                text += f" ({human_bytes(self.bytes_fetched / self.seconds)}/s)"
        if self.limited_by is not None:
            limit = "--max-bytes" if self.limited_by == "max_bytes" else "the cache budget"
            text += (
                f"; cut by {limit} at {self.files} of {self.needed_files} needed files "
                f"({human_bytes(self.needed_bytes)})"
            )
        if self.in_place:
            text += "; local source: the reader reads it in place, nothing to copy"
        return text + "."


def prewarm(
    spec: ReadSpec,
    *,
    ranks: Sequence[int] | None = None,
    epoch: int = 0,
    episodes_per_consumer: int | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
    progress: bool = True,
    resume_state: Mapping[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> PrewarmSummary:
    """Fetch into the spec's node cache (`spec.cache_dir`) the files this node's ranks will read first, in
    that order.

    `spec` is the training run's own (`stream.spec`, or `ReadSpec.from_json` of the file a training job
    wrote): its sources, selection, pool, shuffle, seed, world size, `num_workers` (None: 0, the main
    process) and cache budget shape the plan, so the files are those its `EpisodeStream(spec)` reads.

    Args:
        spec: the training run's read spec.
        ranks: this node's ranks (None: every rank, a single-node job).
        epoch: the epoch training starts with (`set_epoch`).
        episodes_per_consumer: only each consumer's first N admissions (None: the whole epoch).
        max_bytes: fetch at most this many bytes (stops before the first file that would exceed it).
        dry_run: plan only: fetch nothing and leave the cache directory alone.
        progress: show a progress bar (bytes, rate, ETA) on stderr.
        resume_state: the state the training run will load (`EpisodeStream.load_state_dict`): plan the
            rest of its epoch as the resumed run reads it, on this topology (its seed and epoch win over
            the spec's seed and `epoch`).
        storage_options: passed to the source's fsspec filesystem.

    The spec's `cache_max_bytes` bounds the plan (a local source read in place puts nothing in the cache:
    the budget does not cut its plan).

    Returns:
        The counts, and the plan (`summary.plan`).

    Raises:
        ValueError: an argument is out of range, or no `cache_dir` to fetch into.
        DatasetError: the source's metadata is missing or malformed.
        FetchError, IntegrityError: a file could not be fetched (the message names it).
        CacheError: the cache directory cannot be written.
        TrustError: the cache directory is not the user's own (`cache.trust`).
    """
    started = time.monotonic()
    resolved_world = resolve_topology(0, spec.world_size)[1]
    spec = replace(spec, world_size=resolved_world)
    cache_dir, cache_max_bytes = spec.cache_dir, spec.cache_max_bytes
    if cache_dir is None and not dry_run:
        raise ValueError("Invalid cache_dir (None). Expected the node cache directory of the training run.")
    _check_arguments(ranks, episodes_per_consumer, max_bytes, resolved_world)
    if cache_dir is not None and not dry_run:
        # Before any read: a node cache that exists must be the user's own, and a new one (made 0700
        # later) must be in a place nobody else controls.
        check_owned_dir(os.path.abspath(cache_dir), what="cache directory")
    plan = ReadPlan.open(spec, storage_options=storage_options)
    seed, num_workers = spec.seed, spec.num_workers or 0
    resume = None
    if resume_state is not None:
        resume, state_seed = parse_state(resume_state, plan.identity, epoch=epoch)
        seed, epoch = seed if state_seed is None else state_seed, resume.epoch
    plan.schedule(seed, num_workers)  # checks the seed
    in_place = all(s.catalog.remote.reads_in_place for s in plan.sources)
    needs = plan_needs(
        plan,
        seed=seed,
        epoch=epoch,
        num_workers=num_workers,
        ranks=ranks,
        episodes_per_consumer=episodes_per_consumer,
        resume=resume,
    )
    planned = plan_prewarm(
        needs,
        file_requests(plan, needs),
        max_bytes=max_bytes,
        cache_max_bytes=None if in_place else cache_max_bytes,
    )
    cached_bytes = 0
    if dry_run:  # the node cache is not even opened: what it holds is looked at, nothing else
        requests = planned.requests()
        cached, cached_bytes = (0, 0) if in_place else _cached_by_size(cache_dir, plan, requests)
        fetched = FetchSummary(len(requests), planned.bytes, 0, 0, cached, 0.0)
    else:
        # The caches the stream reads through: one directory, each dataset under its fingerprint.
        caches = [
            NodeCache(
                cache_dir,  # type: ignore[arg-type]  # not None unless a dry run
                s.catalog.remote,
                fingerprint=s.catalog.fingerprint,
                max_bytes=cache_max_bytes,
                max_workers=FETCH_THREADS,
            )
            for s in plan.sources
        ]
        try:
            fetched = fetch_in_order(caches, planned.requests(), progress=progress)
        finally:
            for cache in caches:
                cache.close()
    return PrewarmSummary.of(
        fetched,
        planned,
        seconds=time.monotonic() - started,
        dry_run=dry_run,
        in_place=in_place,
        bytes_cached=cached_bytes,
    )


def _cached_by_size(
    cache_dir: str | None, plan: ReadPlan, requests: Sequence[FileRequest]
) -> tuple[int, int]:
    """(files, bytes) of `requests` that the cache holds at their listed size, which a run skips unless a
    hash check then fails. Read only: one `lstat` per file; a link or another user's cache counts nothing."""
    if cache_dir is None or not os.path.isdir(cache_dir):
        return 0, 0
    check_owned_dir(os.path.abspath(cache_dir), what="cache directory")
    layouts = [CacheLayout(os.path.abspath(cache_dir), s.catalog.fingerprint) for s in plan.sources]
    files = total = 0
    for request in requests:
        try:
            st = os.lstat(layouts[request.source].data_path(request.path))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and request.bytes in (None, st.st_size):
            files, total = files + 1, total + st.st_size
    return files, total


def file_requests(plan: ReadPlan, needs: Needs) -> dict[tuple[int, str], FileRequest]:
    """Each needed file, by (source, path), with its size and, where the reader checks hashes, its sha256.

    lrs/1 lists both in `meta/lrs/files.parquet`; a plain v3 source lists neither, so sizes are asked
    of the remote (one HEAD per file; v3 packs many episodes per file, so there are few).

    Raises:
        LayoutError: a needed file is not in the lrs/1 index.
        FetchError: a plain v3 file is missing or its size cannot be read.
    """
    requests: dict[tuple[int, str], FileRequest] = {}
    for index, source in enumerate(plan.sources):
        catalog = source.catalog
        paths = [n.path for n in needs.files if n.source == index]
        if not paths:
            continue
        if catalog.kind != "lrs/1":
            sizes = _remote_sizes(catalog.remote, paths)
            requests.update({(index, p): FileRequest(p, sizes[p], source=index) for p in paths})
            continue
        # The reader checks the sha256 of what it downloads (a local source is read in place, unchecked).
        entries = {} if catalog.remote.reads_in_place else _index_files(catalog)
        for path in paths:
            size = catalog.file_sizes.get(path)
            if size is None:
                raise LayoutError(
                    f"Invalid index: {path} is not listed. Expected every data and video file listed.",
                    file=catalog.remote.display(FILES_INDEX),
                )
            requests[(index, path)] = FileRequest(path, size, entries.get(path), source=index)
    return requests


def _index_files(catalog: Catalog) -> dict[str, str]:
    """path -> sha256 from `meta/lrs/files.parquet`."""
    remote, display = catalog.remote, catalog.remote.display(FILES_INDEX)
    try:
        data = remote.cat(FILES_INDEX, limit=MAX_METADATA_PARQUET_BYTES)
    except FileNotFoundError as exc:
        raise LayoutError("missing", file=display) from exc
    table = parse_parquet(data, file=display, max_bytes=MAX_METADATA_PARQUET_BYTES, error=LayoutError)
    return {entry.path: entry.sha256 for entry in files_from_table(table, file=display)}


def _remote_sizes(remote: Remote, paths: list[str]) -> dict[str, int]:
    def size(rel: str) -> int:
        try:
            return remote.size(rel)
        except FileNotFoundError as exc:
            raise FetchError(
                f"Invalid dataset path ({remote.display(rel)}): no such file. Expected the file "
                "meta/episodes points at."
            ) from exc

    with ThreadPoolExecutor(_SIZE_THREADS, thread_name_prefix="lrs-size") as pool:
        return dict(zip(paths, pool.map(size, paths), strict=True))


def _check_arguments(
    ranks: Sequence[int] | None, episodes_per_consumer: int | None, max_bytes: int | None, world_size: int
) -> None:
    """Check prewarm's own arguments before the source is opened (the spec checked its own)."""
    for name, value in (("episodes_per_consumer", episodes_per_consumer), ("max_bytes", max_bytes)):
        if value is not None:
            check_int(name, value, 1)
    if ranks is not None:
        check_ranks(ranks, world_size)
