"""Weighted mixtures (see `reader.schedule`): which frames of each source an epoch holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from cache.arguments import check_int
from reader.schedule.keys import MAX_EPOCH, MAX_SEED, TAG_MIXTURE
from reader.schedule.order import as_lengths, cut_pieces

# ---------------------------------------------------------------------------------------------------------
# Weighted mixtures: which frames of each source an epoch holds.


class Entries(NamedTuple):
    """An epoch's entries: contiguous frame ranges `[starts, stops)` of the selected episodes at
    `positions`. `epoch_order` permutes them and `Piece.episode` indexes them. Without weights every
    selected episode is one whole entry (`positions` is the identity)."""

    positions: np.ndarray
    starts: np.ndarray
    stops: np.ndarray


def check_weights(weights: Sequence[float], n_sources: int) -> tuple[float, ...]:
    """`weights` as floats, if there is one per source, each finite and >= 0, with a positive sum.

    Raises:
        ValueError: naming the problem.
    """
    chosen = list(weights)
    if len(chosen) != n_sources:
        raise ValueError(
            f"Invalid weights ({chosen}): {len(chosen)} given. Expected one per source ({n_sources})."
        )
    values = []
    for i, w in enumerate(chosen):
        if (
            isinstance(w, bool)
            or not isinstance(w, (int, float, np.integer, np.floating))
            or not np.isfinite(w)
            or w < 0
        ):
            raise ValueError(f"Invalid weight of source {i} ({w!r}). Expected a finite number >= 0.")
        values.append(float(w))
    if not sum(values) > 0:
        raise ValueError(f"Invalid weights ({chosen}): they sum to 0. Expected a positive sum.")
    return tuple(values)


def source_quotas(weights: Sequence[float], samples: int) -> list[int]:
    """Samples of each source in an epoch of `samples`: `samples * w / sum(w)`, rounded by largest
    remainder (ties to the lower source) so that they add up to `samples` exactly."""
    total = float(sum(weights))
    exact = [samples * w / total for w in weights]
    quotas = [int(np.floor(x)) for x in exact]
    rest = samples - sum(quotas)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in by_remainder[:rest]:
        quotas[i] += 1
    return quotas


def mixture_entries(
    lengths: Sequence[int] | np.ndarray,
    sources: Sequence[int] | np.ndarray,
    weights: Sequence[float],
    samples: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
) -> Entries:
    """The entries of `epoch` of a weighted mixture.

    A source of F selected frames with quota `q = k * F + r` (`source_quotas`) gives every selected
    episode k times (repeats, which `epoch_order` spreads over the epoch), plus r frames read off a ring:
    the source's selected episodes in one order seeded by (seed, s) (the selection order without
    `shuffle`), epoch e taking frames `[e * r, (e + 1) * r)` modulo F. So every frame comes k or k + 1
    times in an epoch, and the extra frames go round the whole source, a different part each epoch,
    every frame once per turn of the ring. The entries at a part's edges may be parts of episodes.

    Args:
        lengths: frames of each selected episode, all sources concatenated.
        sources: the source of each (non-decreasing).
        weights: one per source (`check_weights`).
        samples: samples of the epoch.
        seed, epoch, shuffle: as the schedule's.
    """
    lengths = as_lengths(lengths)
    source_of = np.asarray(sources, dtype=np.int64)
    seed = check_int("seed", seed, 0, MAX_SEED)
    epoch = check_int("epoch", epoch, 0, MAX_EPOCH)
    positions, starts, stops = (
        [np.zeros(0, dtype=np.int64)],
        [np.zeros(0, dtype=np.int64)],
        [np.zeros(0, dtype=np.int64)],
    )
    for s, quota in enumerate(source_quotas(weights, samples)):
        members = np.flatnonzero(source_of == s)
        member_lengths = lengths[members]
        size = int(member_lengths.sum())
        if quota == 0:
            continue
        if size == 0:
            raise ValueError(f"Invalid mixture: source {s} has no frames selected but weight > 0.")
        whole, rest = divmod(quota, size)
        if whole:
            positions.append(np.tile(members, whole))
            starts.append(np.zeros(members.size * whole, dtype=np.int64))
            stops.append(np.tile(member_lengths, whole))
        if not rest:
            continue
        order = _ring_order(members.size, seed=seed, source=s, shuffle=shuffle)
        low = epoch * rest % size
        for a, b in ((low, min(size, low + rest)), (0, max(0, low + rest - size))):
            rows = cut_pieces(order, member_lengths, a, b)
            positions.append(members[rows[:, 0]])
            starts.append(rows[:, 1])
            stops.append(rows[:, 2])
    return Entries(np.concatenate(positions), np.concatenate(starts), np.concatenate(stops))


def _ring_order(n: int, *, seed: int, source: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    words = [TAG_MIXTURE, seed & 0xFFFFFFFF, seed >> 32, source]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words))).permutation(n).astype(np.int64)
