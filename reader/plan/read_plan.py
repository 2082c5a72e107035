"""The read plan: which datasets, which of their episodes, and the order a run reads them in.

Everything of an `EpisodeStream` that is not torch: the sources opened (`reader.plan.source`), the episode
selection, a mixture's common features and weights, and the `reader.schedule.Schedule` they give for a
seed and a DataLoader's workers. `EpisodeStream` and `lrs prewarm` both build a `ReadPlan` from a `ReadSpec`, so the files
prewarm fetches are those the stream will read, and `lrs prewarm --dry-run` starts without torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from cache import Remote
from reader.format.catalog import Catalog, EpisodeRef
from reader.plan.resume.state import Identity, selection_digest
from reader.plan.source import OpenedSource, open_sources
from reader.plan.spec import ReadSpec, resolve_topology
from reader.schedule import EpochPlan, Schedule


@dataclass(frozen=True)
class ReadPlan:
    """What a run reads and in which order, up to the seed (see the module docstring).

    Build it with `ReadPlan.open`. `schedule(seed, num_workers)` gives every consumer's order, and
    `entry_refs(seed, epoch)` the source and episode behind each `Piece.episode` of that order.
    """

    sources: tuple[OpenedSource, ...]
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
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> ReadPlan:
        """Open the sources' metadata and check the plan of `spec` (its world size, when None, is found by
        `resolve_topology`).

        Args:
            spec: the run's read spec.
            storage_options: passed to the fsspec filesystems.
            remotes: per source, an opened `cache.Remote` to read it through instead of its URL.
            cache_dir: the node cache directory the sources are read through (None: planned only, no
                cache opened, as `lrs prewarm` plans).

        Raises:
            ValueError: an episode index beyond a dataset's episodes, a mixture's window key missing from a
                source, or a mixture's quotas.
            DatasetError: a source's metadata is missing or malformed (a mixture's error names the source),
                a mixture's common features disagree, or a depth camera's quantizer parameters are invalid.
        """
        world_size = spec.world_size if spec.world_size is not None else resolve_topology(0, None)[1]
        plan = cls(
            sources=open_sources(spec, remotes=remotes, storage_options=storage_options, cache_dir=cache_dir),
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
        owners: Sequence[Any] | None = None,
        schedule: EpochPlan | None = None,
    ) -> Sequence[tuple[Any, EpisodeRef]]:
        """The source and episode of each entry of `epoch` (`Piece.episode` indexes it): with `owners`,
        each source's `owners[i]`, else the source's index. `schedule`: one already built for `seed`
        (its entries do not depend on the workers). Each pair is made when it is asked for."""
        positions = None
        if self.weights is not None:
            schedule = self.schedule(seed, 0) if schedule is None else schedule
            positions = schedule.entries(epoch).positions
        owners = range(len(self.sources)) if owners is None else owners
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
        owners: what each source's pairs carry first (its index, or its `OpenedSource`).
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


def _mixture_fingerprint(
    sources: Sequence[OpenedSource], weights: Sequence[float] | None, samples: int | None
) -> str:
    """Names a mixture in resume states: its sources' fingerprints, in order, and how they are weighed."""
    text = json.dumps([[s.catalog.fingerprint for s in sources], weights, samples])
    return "mix-" + hashlib.sha256(text.encode()).hexdigest()[:24]
