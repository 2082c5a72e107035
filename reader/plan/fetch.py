"""What a node's ranks will read first, in the order they will need it: the plan `lrs prewarm` fetches.

A consumer (rank x DataLoader worker) admits its pieces in `Emission.pieces` order, and for each piece
`reader.runtime.pool.EpisodePool` asks the cache for its data file (the row group is a ranged read, served from
the cached copy of the file once it is there), then for each camera's video in `info.json` order. A
consumer's files, each at its first need, in that order, are therefore exactly what its reader asks the
cache for, in the order it asks. (The pool asks `prefetch_episodes` pieces before it admits them: that
moves when it asks, not in which order.)

A node runs its consumers side by side, each emitting about one sample per step, so their lists are
merged by the step before which each piece is admitted; ties go to the lower rank, then the lower
worker, then the earlier admission. A file shared by several pieces (plain v3 packs many episodes per
file, an lrs/1 data file holds many row groups) is planned once, at its first need.

Limits cut the merged list: the first N admissions of each consumer, then a byte limit that stops before
the first file that would exceed it. The cache's own budget is such a limit: a plan larger than the
cache would evict its first files to make room for its last ones.

Everything here is pure: the schedule and the catalog (a `reader.plan.read_plan.ReadPlan` holds both) in, a
plan out; no torch. `reshard.prewarm` does the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from cache.arguments import check_int
from cache.ordered_fetch import FileRequest
from reader.format.catalog import EpisodeRef
from reader.plan.resume.state import Resume, consumer_starts, resumed_schedule
from reader.schedule import EmissionPlan, EpochPlan

if TYPE_CHECKING:
    from reader.plan.read_plan import ReadPlan

FileKind = Literal["data", "video"]
LimitName = Literal["max_bytes", "cache_max_bytes"]


@dataclass(frozen=True)
class Need:
    """A file and the first moment one consumer needs it.

    Attributes:
        path: dataset-relative path.
        kind: "data" (parquet rows) or "video".
        step: the consumer's step before which the piece needing it is admitted.
        rank, worker: the consumer.
        piece: the piece's position in the consumer's admission order.
        episode_index: the piece's episode.
        source: the dataset of a mixture it belongs to (0: the only one).
    """

    path: str
    kind: FileKind
    step: int
    rank: int
    worker: int
    piece: int
    episode_index: int
    source: int = 0

    @property
    def key(self) -> tuple[int, str]:
        """(source, path): a file of a mixture is one of its datasets' files."""
        return self.source, self.path

    @property
    def order(self) -> tuple[int, int, int, int]:
        """The merge key: (step, rank, worker, piece)."""
        return self.step, self.rank, self.worker, self.piece


@dataclass(frozen=True)
class PieceFiles:
    """One admission of a consumer and the files it needs."""

    rank: int
    worker: int
    piece: int
    episode_index: int
    paths: tuple[str, ...]
    source: int = 0


@dataclass(frozen=True)
class Needs:
    """What a node's consumers need, before any byte limit.

    Attributes:
        files: every needed file once, at its first need, in merged order.
        pieces: every admission counted (each consumer's first N with a per-consumer limit).
        consumers: the (rank, worker) pairs, in merge tie order.
    """

    files: tuple[Need, ...]
    pieces: tuple[PieceFiles, ...]
    consumers: tuple[tuple[int, int], ...]

    def __repr__(self) -> str:
        return f"Needs(files={len(self.files)}, pieces={len(self.pieces)}, consumers={len(self.consumers)})"


@dataclass(frozen=True)
class PlannedFile:
    """A file to fetch (`request`) and why it comes where it does (`need`)."""

    need: Need
    request: FileRequest


@dataclass(frozen=True)
class FetchPlan:
    """The files to fetch, in order, and what they cover.

    Attributes:
        files: the files, in the order the consumers will first need them.
        consumers: the (rank, worker) pairs planned for.
        pieces: admissions whose files are all planned.
        episodes: distinct episodes among those admissions.
        needed_files: files needed before the byte limits cut the list.
        needed_bytes: their bytes.
        limited_by: the byte limit that cut the list, if one did.
    """

    files: tuple[PlannedFile, ...]
    consumers: tuple[tuple[int, int], ...]
    pieces: int
    episodes: int
    needed_files: int
    needed_bytes: int
    limited_by: LimitName | None = None

    def __repr__(self) -> str:
        return (
            f"FetchPlan(files={len(self.files)}, bytes={self.bytes}, consumers={len(self.consumers)}, "
            f"pieces={self.pieces}, limited_by={self.limited_by})"
        )

    @property
    def bytes(self) -> int:
        """Bytes of the planned files."""
        return sum(f.request.bytes or 0 for f in self.files)

    def requests(self) -> list[FileRequest]:
        """The planned files as the cache runner takes them (`cache.ordered_fetch.fetch_in_order`)."""
        return [f.request for f in self.files]

    @property
    def sources(self) -> int:
        """Datasets the planned files come from (a mixture's sources that have some)."""
        return len({f.need.source for f in self.files})


def piece_files(ref: EpisodeRef) -> tuple[tuple[FileKind, str], ...]:
    """The files the reader asks the cache for when it admits a piece of `ref`, in the order it asks."""
    return (("data", ref.data_path), *(("video", v.path) for v in ref.videos))


def consumer_needs(
    emission: EmissionPlan,
    refs: Sequence[EpisodeRef],
    *,
    rank: int,
    worker: int,
    limit: int | None = None,
) -> list[Need]:
    """One consumer's files, each at its first need, in the order its reader asks the cache for them.

    Args:
        emission: the consumer's plan (`Schedule.emission`).
        refs: the selected episodes, in selection order (`Piece.episode` indexes it).
        rank, worker: the consumer, recorded in each `Need`.
        limit: only the first `limit` admissions (None: all).
    """
    return _consumer(emission, [(0, r) for r in refs], rank=rank, worker=worker, limit=limit)[0]


def node_needs(
    schedule: EpochPlan,
    refs: Sequence[EpisodeRef],
    *,
    epoch: int,
    ranks: Sequence[int],
    episodes_per_consumer: int | None = None,
    starts: Sequence[int] | None = None,
) -> Needs:
    """What the consumers of `ranks` (every worker of each) need in `epoch`, merged in need order.

    Args:
        schedule: the training run's schedule (`EpisodeStream.schedule(num_workers)`), or after a resume
            on a new topology the rest of the epoch (`reader.plan.resume.state.resumed_schedule`).
        starts: the samples each logical worker of a rank has consumed already (a resumed run's,
            `reader.plan.resume.state.consumer_starts`): the pieces they finished are not needed (default: none).
        refs: the selected episodes, in selection order (a mixture's sources one after another, as
            `schedule.sources` says).
        epoch: the epoch the run starts with.
        ranks: this node's ranks.
        episodes_per_consumer: only each consumer's first N admissions (None: the whole epoch).

    Raises:
        ValueError: ranks empty, repeated or outside the world; a limit < 1; refs that do not match the
            schedule's episode lengths.
    """
    ranks = check_ranks(ranks, schedule.world_size)
    if episodes_per_consumer is not None:
        check_int("episodes_per_consumer", episodes_per_consumer, 1)
    lengths = tuple(ref.length for ref in refs)
    if lengths != schedule.lengths:
        raise ValueError(
            f"Invalid episode refs ({len(refs)} episodes). Expected the schedule's {len(schedule.lengths)} "
            "selected episodes, with the same lengths, in selection order."
        )
    needs: list[Need] = []
    pieces: list[PieceFiles] = []
    consumers = [(rank, worker) for rank in ranks for worker in range(max(1, schedule.num_workers))]
    sources = schedule.sources or (0,) * len(refs)
    entries = [(sources[p], refs[p]) for p in schedule.entries(epoch).positions.tolist()]
    for rank, worker in consumers:
        emission = schedule.emission(epoch, rank, worker)
        start = 0 if starts is None else starts[worker]
        found, admitted = _consumer(
            emission, entries, rank=rank, worker=worker, limit=episodes_per_consumer, start=start
        )
        needs += found
        pieces += admitted
    return Needs(files=tuple(_first_needs(needs)), pieces=tuple(pieces), consumers=tuple(consumers))


def plan_needs(
    plan: ReadPlan,
    *,
    seed: int,
    epoch: int,
    num_workers: int,
    ranks: Sequence[int] | None = None,
    episodes_per_consumer: int | None = None,
    resume: Resume | None = None,
) -> Needs:
    """`node_needs` of a training run that reads `plan` with this seed, from `epoch`, through
    DataLoaders of `num_workers` workers: the schedule and the episode refs are the plan's own, as the
    run's `EpisodeStream` builds them, so the two cannot disagree. With `resume` (a loaded state,
    `reader.plan.resume.state.parse_state`), the rest of its epoch as the resumed run streams it.

    Args:
        plan: the run's read plan (`EpisodeStream.plan`, or `ReadPlan.open` with the run's arguments).
        seed, epoch: the run's.
        num_workers: DataLoader workers per rank (0: the main process).
        ranks: this node's ranks (None: every rank of the world).
        episodes_per_consumer: only each consumer's first N admissions (None: the whole epoch).
    """
    refs = [s.catalog.episodes[e] for s in plan.sources for e in s.episodes]
    schedule, _ = resumed_schedule(plan.schedule(seed, num_workers), epoch, resume)
    return node_needs(
        schedule,
        refs,
        epoch=epoch,
        ranks=range(plan.world_size) if ranks is None else ranks,
        episodes_per_consumer=episodes_per_consumer,
        starts=consumer_starts(schedule, epoch, resume),
    )


def plan_prewarm(
    needs: Needs,
    files: Mapping[str, FileRequest] | Mapping[tuple[int, str], FileRequest],
    *,
    max_bytes: int | None = None,
    cache_max_bytes: int | None = None,
) -> FetchPlan:
    """Cut `needs` to the byte limits and attach what each file must be.

    Args:
        needs: the node's needs (`node_needs`).
        files: path (a mixture's: (source, path)) -> the request to fetch it with (size and sha256, as
            the reader asks); sizes are required to apply the limits.
        max_bytes: plan at most this many bytes.
        cache_max_bytes: the cache's budget: plan no more than it holds.

    Raises:
        ValueError: a limit < 1, or a needed file without a request or a size.
    """
    limits: list[tuple[int, LimitName]] = []
    given: tuple[tuple[int | None, LimitName], ...] = (
        (max_bytes, "max_bytes"),
        (cache_max_bytes, "cache_max_bytes"),
    )
    for value, name in given:
        if value is not None:
            limits.append((check_int(name, value, 1), name))
    planned = [PlannedFile(need, _request(files, need)) for need in needs.files]
    needed_bytes = sum(f.request.bytes or 0 for f in planned)
    cap, cap_name = min(limits) if limits else (None, None)
    kept, total = 0, 0
    for item in planned:
        size = item.request.bytes or 0
        if cap is not None and total + size > cap:
            break
        kept, total = kept + 1, total + size
    chosen = tuple(planned[:kept])
    keys = {f.need.key for f in chosen}
    covered = [p for p in needs.pieces if keys.issuperset((p.source, path) for path in p.paths)]
    return FetchPlan(
        files=chosen,
        consumers=needs.consumers,
        pieces=len(covered),
        episodes=len({(p.source, p.episode_index) for p in covered}),
        needed_files=len(planned),
        needed_bytes=needed_bytes,
        limited_by=cap_name if kept < len(planned) else None,
    )


def check_ranks(ranks: Sequence[int], world_size: int) -> tuple[int, ...]:
    """`ranks` sorted, if they are distinct ranks of a world of `world_size`; else ValueError."""
    chosen = list(ranks)
    bad = [r for r in chosen if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world_size]
    if bad or not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(
            f"Invalid ranks ({chosen}). Expected distinct ranks in [0, {world_size}) (world_size {world_size})."
        )
    return tuple(sorted(chosen))


def _consumer(
    emission: EmissionPlan,
    entries: Sequence[tuple[int, EpisodeRef]],
    *,
    rank: int,
    worker: int,
    limit: int | None,
    start: int = 0,
) -> tuple[list[Need], list[PieceFiles]]:
    """`entries`: the source and episode of each entry of the epoch (`Piece.episode` indexes it);
    `start`: samples already consumed (the pieces gone by then are skipped, the steps count from it)."""
    live = [i for i, d in enumerate(emission.departure_steps.tolist()) if d >= start]
    if limit is not None:
        live = live[:limit]
    pieces = [emission.pieces[i] for i in live]
    steps = [max(0, int(emission.admission_steps[i]) - start) for i in live]
    seen: set[tuple[int, str]] = set()
    needs: list[Need] = []
    admitted: list[PieceFiles] = []
    for index, (piece, step) in enumerate(zip(pieces, steps, strict=True)):
        source, ref = entries[piece.episode]
        files = piece_files(ref)
        paths = tuple(p for _, p in files)
        admitted.append(PieceFiles(rank, worker, index, ref.episode_index, paths, source))
        for kind, path in files:
            if (source, path) not in seen:
                seen.add((source, path))
                needs.append(Need(path, kind, step, rank, worker, index, ref.episode_index, source))
    return needs, admitted


def _first_needs(needs: list[Need]) -> list[Need]:
    """Needs sorted by their merge key (stable: a piece's files keep their order), each file once."""
    seen: set[tuple[int, str]] = set()
    first = []
    for need in sorted(needs, key=lambda n: n.order):
        if need.key not in seen:
            seen.add(need.key)
            first.append(need)
    return first


def _request(files: Mapping[Any, FileRequest], need: Need) -> FileRequest:
    request = files.get(need.key)
    if request is None and need.source == 0:
        request = files.get(need.path)
    path = need.path
    if request is None or request.bytes is None:
        raise ValueError(f"Invalid file requests: no size for {path}. Expected one for every needed file.")
    if request.path != path or request.source != need.source:
        raise ValueError(f"Invalid file requests: {path} maps to {request.path}. Expected the same path.")
    return request
