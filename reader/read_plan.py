"""The read plan: which datasets, which of their episodes, and the order a run reads them in.

Everything of an `EpisodeStream` that is not torch: the sources opened (`reader.format.catalog`), the episode
selection, a mixture's common features and weights, and the `reader.schedule.Schedule` they give for a
seed and a DataLoader's workers. `EpisodeStream` and `lrs prewarm` both build a `ReadPlan`, so the files
prewarm fetches are those the stream will read, and `lrs prewarm --dry-run` starts without torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from cache import LrsError, Remote
from cache.arguments import check_int
from reader.errors import DatasetError
from reader.format.catalog import Catalog, EpisodeRef
from reader.schedule import EpochPlan, Schedule, check_weights
from reader.state import Identity, selection_digest

_log = logging.getLogger("lrs.reader")

DEFAULT_POOL_SIZE = 16
# Downloads in flight per process (the stream's, prewarm's): the first batch needs the whole pool's videos.
FETCH_THREADS = 8


def default_pool_size(batch_size: int | None) -> int:
    """The default `episode_pool_size`: max(16, ceil(1.25 x batch_size)).

    A batch then fits in one round of the pool with room for the pieces that come and go during it, so
    it rarely holds one episode twice (measured: `scripts/bench_reader.py`, mixing).
    """
    if batch_size is None:
        return DEFAULT_POOL_SIZE
    return max(DEFAULT_POOL_SIZE, -(-5 * check_int("batch_size", batch_size, 1) // 4))


@dataclass(frozen=True)
class PlannedSource:
    """One dataset of a plan: its catalog, its selected episodes (ascending) and the keys its samples
    leave out (a mixture keeps the features every source has)."""

    catalog: Catalog
    episodes: Sequence[int]
    drop: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ReadPlan:
    """What a run reads and in which order, up to the seed (see the module docstring).

    Build it with `ReadPlan.open`. `schedule(seed, num_workers)` gives every consumer's order, and
    `entry_refs(seed, epoch)` the source and episode behind each `Piece.episode` of that order.
    """

    sources: tuple[PlannedSource, ...]
    mixture: bool
    episode_pool_size: int
    shuffle: bool = True
    world_size: int = 1
    weights: tuple[float, ...] | None = None
    samples_per_epoch: int | None = None

    @classmethod
    def open(
        cls,
        source: str | os.PathLike[str] | Remote | Sequence[str | os.PathLike[str] | Remote],
        *,
        weights: Sequence[float] | None = None,
        samples_per_epoch: int | None = None,
        episodes: Sequence[int] | Sequence[Sequence[int] | None] | None = None,
        episode_pool_size: int = DEFAULT_POOL_SIZE,
        shuffle: bool = True,
        world_size: int = 1,
        storage_options: dict[str, Any] | None = None,
    ) -> ReadPlan:
        """Open the sources' metadata and check the plan (see `EpisodeStream` for the arguments).

        Raises:
            ValueError: a bad argument (the message names it).
            DatasetError: a source's metadata is missing or malformed (a mixture's error names the source),
                or a mixture's common features disagree.
        """
        check_int("episode_pool_size", episode_pool_size, 1)
        check_int("world_size", world_size, 1)
        given, mixture = _sources_given(source)
        catalogs = [_open_source(src, i, mixture, storage_options) for i, src in enumerate(given)]
        selections = _selections(episodes, catalogs, mixture)
        if weights is not None and not mixture:
            raise ValueError("Invalid weights for one source. Expected a list of sources to weigh.")
        checked = None if weights is None else check_weights(weights, len(catalogs))
        if samples_per_epoch is not None:
            check_int("samples_per_epoch", samples_per_epoch, 1)
            if checked is None:
                raise ValueError(
                    "Invalid samples_per_epoch without weights. Expected weights to share them out."
                )
        drops = _disabled_keys(catalogs) if mixture else [frozenset()] * len(catalogs)
        plan = cls(
            sources=tuple(
                PlannedSource(c, s, d) for c, s, d in zip(catalogs, selections, drops, strict=True)
            ),
            mixture=mixture,
            episode_pool_size=episode_pool_size,
            shuffle=bool(shuffle),
            world_size=world_size,
            weights=checked,
            samples_per_epoch=samples_per_epoch,
        )
        plan.schedule(0, 0)  # checks the mixture's quotas
        return plan

    @property
    def common_keys(self) -> set[str]:
        """The features every source has (of one dataset: all of its features)."""
        return set(self.sources[0].catalog.info.features) - self.sources[0].drop

    @property
    def lengths(self) -> list[int]:
        """Frames of each selected episode, in selection order (a mixture's sources one after another)."""
        return [
            int(n) for s in self.sources for n in s.catalog.lengths[np.asarray(s.episodes, dtype=np.int64)]
        ]

    def schedule(self, seed: int, num_workers: int) -> Schedule:
        """The order of a run with this seed and `num_workers` DataLoader workers per rank (0: the main
        process)."""
        return Schedule(
            tuple(self.lengths),
            seed=seed,
            shuffle=self.shuffle,
            world_size=self.world_size,
            num_workers=num_workers,
            pool_size=self.episode_pool_size,
            sources=tuple(i for i, s in enumerate(self.sources) for _ in s.episodes)
            if self.mixture
            else None,
            weights=self.weights,
            samples=None if self.weights is None else self.samples_per_epoch or sum(self.lengths),
        )

    def entry_refs(
        self,
        seed: int,
        epoch: int,
        parts: Sequence[Any] | None = None,
        schedule: EpochPlan | None = None,
    ) -> Sequence[tuple[Any, EpisodeRef]]:
        """The source and episode of each entry of `epoch` (`Piece.episode` indexes it): with `parts`,
        each source's `parts[i]`, else the source's index. `schedule`: one already built for `seed`
        (its entries do not depend on the workers). Each pair is made when it is asked for."""
        positions = None
        if self.weights is not None:
            schedule = self.schedule(seed, 0) if schedule is None else schedule
            positions = schedule.entries(epoch).positions
        owners = [i if parts is None else parts[i] for i in range(len(self.sources))]
        return EntryRefs(owners, [(s.catalog, s.episodes) for s in self.sources], positions)

    @property
    def identity(self) -> Identity:
        """What a resume state must match: the datasets (a mixture's and its weights), the selection, the
        pool size, the world size and shuffle."""
        if self.mixture:
            fingerprint = _mixture_fingerprint(self.sources, self.weights, self.samples_per_epoch)
            digest = selection_digest([f"{i}:{e}" for i, s in enumerate(self.sources) for e in s.episodes])
        else:
            fingerprint, digest = (
                self.sources[0].catalog.fingerprint,
                selection_digest(self.sources[0].episodes),
            )
        return Identity(
            fingerprint=fingerprint,
            episodes=digest,
            episode_pool_size=self.episode_pool_size,
            world_size=self.world_size,
            shuffle=self.shuffle,
        )


class EntryRefs(Sequence[tuple[Any, EpisodeRef]]):
    """The (owner, episode) of each entry of an epoch, made from the catalogs when asked for, so that a
    consumer holds no object per episode of the dataset.

    Args:
        owners: what each source's pairs carry first (its index, or its `Part`).
        selected: per source, its catalog and selected episodes (ascending).
        positions: a weighted mixture's entries, as positions in the sources' selections laid end to end.
    """

    def __init__(
        self,
        owners: Sequence[Any],
        selected: Sequence[tuple[Catalog, Sequence[int]]],
        positions: np.ndarray | None = None,
    ) -> None:
        self._owners, self._selected, self._positions = owners, selected, positions
        self._starts = np.cumsum([0] + [len(episodes) for _, episodes in selected])

    def __len__(self) -> int:
        return int(self._starts[-1]) if self._positions is None else len(self._positions)

    @overload
    def __getitem__(self, entry: int) -> tuple[Any, EpisodeRef]: ...
    @overload
    def __getitem__(self, entry: slice) -> list[tuple[Any, EpisodeRef]]: ...
    def __getitem__(self, entry: int | slice) -> tuple[Any, EpisodeRef] | list[tuple[Any, EpisodeRef]]:
        if isinstance(entry, slice):
            return [self[i] for i in range(*entry.indices(len(self)))]
        if not -len(self) <= entry < len(self):
            raise IndexError(f"Invalid entry ({entry}). Expected < {len(self)}.")
        entry %= len(self)
        position = entry if self._positions is None else int(self._positions[entry])
        source = int(np.searchsorted(self._starts, position, side="right")) - 1
        catalog, episodes = self._selected[source]
        return self._owners[source], catalog.episodes[episodes[position - int(self._starts[source])]]


def _sources_given(source: Any) -> tuple[list[Any], bool]:
    """(the sources, whether they form a mixture): a list or tuple is a mixture, even of one."""
    if isinstance(source, (list, tuple)):
        if not source:
            raise ValueError("Invalid source ([]). Expected a dataset, or a non-empty list of them.")
        return list(source), True
    return [source], False


def _open_source(source: Any, index: int, mixture: bool, storage_options: dict[str, Any] | None) -> Catalog:
    """The catalog of one source; in a mixture, an error names which source failed."""
    if not isinstance(source, (str, os.PathLike, Remote)):
        what = f"source {index} of the mixture" if mixture else "source"
        raise ValueError(f"Invalid {what} ({source!r}). Expected a path, a URL or a cache.Remote.")
    try:
        return Catalog.open(
            source if isinstance(source, Remote) else os.fspath(source), storage_options=storage_options
        )
    except LrsError as exc:
        if not mixture:
            raise
        url = source.url if isinstance(source, Remote) else os.fspath(source)
        raise DatasetError(f"Invalid source {index} of the mixture ({url}): {exc}") from exc


def _selections(episodes: Any, catalogs: list[Catalog], mixture: bool) -> list[Sequence[int]]:
    if not mixture:
        return [_selection(episodes, len(catalogs[0].episodes))]
    if episodes is None:
        return [_selection(None, len(c.episodes)) for c in catalogs]
    chosen = list(episodes)
    if len(chosen) != len(catalogs) or not all(
        e is None or isinstance(e, (list, tuple, range)) for e in chosen
    ):
        raise ValueError(
            f"Invalid episodes for a mixture of {len(catalogs)} sources. Expected one list of episode "
            "indices (or None) per source."
        )
    return [_selection(e, len(c.episodes)) for e, c in zip(chosen, catalogs, strict=True)]


def _disabled_keys(catalogs: list[Catalog]) -> list[frozenset[str]]:
    """Per source, the features a mixture leaves out: those not every source has (lerobot's
    `MultiLeRobotDataset` rule).

    Raises:
        DatasetError: a common feature differs in dtype or shape between two sources, or none is common.
    """
    features = [c.info.features for c in catalogs]
    common = set(features[0]).intersection(*features[1:])
    if not common:
        raise DatasetError("Invalid mixture: its sources have no feature in common. Expected at least one.")
    for key in sorted(common):
        for i in range(1, len(features)):
            for name in ("dtype", "shape"):
                a, b = _plain(features[0][key].get(name)), _plain(features[i][key].get(name))
                if a != b:
                    raise DatasetError(
                        f"Invalid mixture: feature {key!r} has {name} {a!r} in source 0 "
                        f"({catalogs[0].remote.url}) and {b!r} in source {i} ({catalogs[i].remote.url}). "
                        "Expected the same dtype and shape wherever a key is common to every source."
                    )
    disabled = [frozenset(set(f) - common) for f in features]
    for catalog, keys in zip(catalogs, disabled, strict=True):
        if keys:
            _log.warning(
                "lrs: the mixture leaves out %s of %s: not every source has them.",
                ", ".join(sorted(keys)),
                catalog.remote.url,
            )
    return disabled


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def _mixture_fingerprint(
    sources: Sequence[PlannedSource], weights: Sequence[float] | None, samples: int | None
) -> str:
    """Names a mixture in resume states: its sources' fingerprints, in order, and how they are weighed."""
    text = json.dumps([[s.catalog.fingerprint for s in sources], weights, samples])
    return "mix-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _selection(episodes: Sequence[int] | None, total: int) -> Sequence[int]:
    if episodes is None:
        return range(total)  # every episode: pickles in a few bytes, whatever the dataset's size
    chosen = sorted(episodes)
    for e in chosen:
        check_int("episode index", e, 0)
        if e >= total:
            raise ValueError(f"Invalid episode index ({e}). Expected < {total}, the dataset's episodes.")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"Invalid episodes ({list(episodes)}). Expected each episode index once.")
    if not chosen:
        raise ValueError("Invalid episodes ([]). Expected at least one episode index.")
    return chosen
