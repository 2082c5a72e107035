"""The read plan: which datasets, which of their episodes, and the order a run reads them in.

Everything of an `EpisodeStream` that is not torch: the sources opened (`reader.format.catalog`), the episode
selection, a mixture's common features and weights, and the `reader.schedule.Schedule` they give for a
seed and a DataLoader's workers. `EpisodeStream` and `lrs prewarm` both build a `ReadPlan` from a `ReadSpec`, so the files
prewarm fetches are those the stream will read, and `lrs prewarm --dry-run` starts without torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from cache import LrsError, Remote
from cache.redaction import redact
from reader.errors import DatasetError
from reader.format.catalog import Catalog, EpisodeRef
from reader.plan.resume.state import Identity, selection_digest
from reader.plan.spec import ReadSpec, resolve_topology
from reader.schedule import EpochPlan, Schedule

_log = logging.getLogger("lrs.reader")

# Downloads in flight per process (the stream's, prewarm's): the first batch needs the whole pool's videos.
FETCH_THREADS = 8


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
        spec: ReadSpec,
        *,
        storage_options: dict[str, Any] | None = None,
        remotes: Sequence[Remote | None] | None = None,
    ) -> ReadPlan:
        """Open the sources' metadata and check the plan of `spec` (its world size, when None, is found by
        `resolve_topology`).

        Args:
            spec: the run's read spec.
            storage_options: passed to the fsspec filesystems.
            remotes: per source, an opened `cache.Remote` to read it through instead of its URL.

        Raises:
            ValueError: an episode index beyond a dataset's episodes, or a mixture's quotas.
            DatasetError: a source's metadata is missing or malformed (a mixture's error names the source),
                or a mixture's common features disagree.
        """
        world_size = spec.world_size if spec.world_size is not None else resolve_topology(0, None)[1]
        remotes = list(remotes) if remotes is not None else [None] * len(spec.sources)
        catalogs = [
            _open_source(r if r is not None else s.url, i, bool(spec.mixture), storage_options)
            for i, (s, r) in enumerate(zip(spec.sources, remotes, strict=True))
        ]
        selections = [
            _selection(s.episodes, len(c.episodes)) for s, c in zip(spec.sources, catalogs, strict=True)
        ]
        drops = _disabled_keys(catalogs) if spec.mixture else [frozenset()] * len(catalogs)
        plan = cls(
            sources=tuple(
                PlannedSource(c, s, d) for c, s, d in zip(catalogs, selections, drops, strict=True)
            ),
            mixture=bool(spec.mixture),
            episode_pool_size=spec.pool_size,
            shuffle=spec.shuffle,
            world_size=world_size,
            weights=spec.weights,
            samples_per_epoch=spec.samples_per_epoch,
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


def _open_source(
    source: str | Remote, index: int, mixture: bool, storage_options: dict[str, Any] | None
) -> Catalog:
    """The catalog of one source; in a mixture, an error names which source failed."""
    try:
        return Catalog.open(source, storage_options=storage_options)
    except LrsError as exc:
        if not mixture:
            raise
        url = source.shown if isinstance(source, Remote) else redact(source)
        raise DatasetError(f"Invalid source {index} of the mixture ({url}): {exc}") from exc


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
                        f"({catalogs[0].remote.shown}) and {b!r} in source {i} ({catalogs[i].remote.shown}). "
                        "Expected the same dtype and shape wherever a key is common to every source."
                    )
    disabled = [frozenset(set(f) - common) for f in features]
    for catalog, keys in zip(catalogs, disabled, strict=True):
        if keys:
            _log.warning(
                "lrs: the mixture leaves out %s of %s: not every source has them.",
                ", ".join(sorted(keys)),
                catalog.remote.shown,
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
    """The spec's selection (already ascending, each index once) within the dataset's `total` episodes."""
    if episodes is None:
        return range(total)  # every episode: pickles in a few bytes, whatever the dataset's size
    for e in episodes:
        if e >= total:
            raise ValueError(f"Invalid episode index ({e}). Expected < {total}, the dataset's episodes.")
    return list(episodes)
