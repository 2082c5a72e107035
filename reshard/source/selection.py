"""Episodes left out of a reshard: which, why, and the source as the output sees it.

`lrs reshard --skip-defective` drops the episodes `lrs doctor`'s checks find defective, and
`--skip-episodes 3,7,10-12` the ones a user names. The output is still a valid v3 dataset, so the kept
episodes are renumbered `0..K-1` in source order and their rows' `index` made contiguous again:

- `reshard.source.dropped.Selection` holds the dropped source episodes and why, and maps output episodes to
  source episodes; it is recorded as `meta/lrs/dropped.json`, which `verify --against` reads back;
- `select(source, selection)` is the source as the output sees it: a `V3Source` whose episodes, episodes
  table and stats are the kept ones, renumbered, still pointing at the source's files. The plan, the
  writers and the metadata step work on it unchanged; `origin` gives the source episode whose rows and
  frames to read, and `renumber_rows` rewrites `episode_index` and `index` of the rows read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from reader.format.parquet import replace_columns
from reader.format.v3 import EPISODES_DIR, EpisodeInfo
from reader.metadata import aggregate_stats
from reshard.source.dropped import Selection
from reshard.source.model import V3Source

log = logging.getLogger(__name__)

# Per-episode stats of these columns change with the renumbering (the others are the rows' own values).
_RENUMBERED = ("episode_index", "index")


def renumber_episode(episode: EpisodeInfo, index: int, from_index: int) -> EpisodeInfo:
    """`episode` as output episode `index`, its rows starting at `from_index`."""
    return replace(
        episode,
        episode_index=index,
        dataset_from_index=from_index,
        dataset_to_index=from_index + episode.length,
    )


def renumber_rows(rows: pa.Table, episode: EpisodeInfo) -> pa.Table:
    """The rows of a source episode with the output's `episode_index` and `index` (of `episode`)."""
    return replace_columns(
        rows,
        {
            "episode_index": np.full(rows.num_rows, episode.episode_index),
            "index": np.arange(episode.dataset_from_index, episode.dataset_to_index),
        },
    )


def renumber_table(table: pa.Table, kept: Sequence[int], episodes: Sequence[EpisodeInfo]) -> pa.Table:
    """The `meta/episodes` table of the kept rows (`kept`: source episode indices; `episodes`: the output
    records), with `episode_index`, the row range and the per-episode stats of `episode_index` and
    `index` made those of the output."""
    table = table.take(pa.array(kept, pa.int64()))
    shift = np.array([e.dataset_from_index for e in episodes]) - table.column("dataset_from_index").to_numpy()
    new = {
        "episode_index": [e.episode_index for e in episodes],
        "dataset_from_index": [e.dataset_from_index for e in episodes],
        "dataset_to_index": [e.dataset_to_index for e in episodes],
    }
    for name in table.column_names:
        parts = name.split("/")
        if (
            len(parts) == 3
            and parts[0] == "stats"
            and parts[1] in _RENUMBERED
            and parts[2] not in ("std", "count")
        ):
            values = table.column(name).to_pylist()
            if parts[1] == "episode_index":
                new[name] = [_fill(v, e.episode_index) for v, e in zip(values, episodes, strict=True)]
            else:
                new[name] = [_add(v, int(d)) for v, d in zip(values, shift, strict=True)]
    return replace_columns(table, new)


def _fill(value: Any, number: int) -> Any:
    return None if value is None else np.full_like(np.asarray(value), number).tolist()


def _add(value: Any, delta: int) -> Any:
    return None if value is None else (np.asarray(value) + delta).tolist()


def episode_stats(table: pa.Table) -> list[dict[str, dict[str, np.ndarray]]]:
    """Each row's `stats/<feature>/<stat>` columns as lerobot's per-episode stats dicts."""
    names = [n.split("/") for n in table.column_names if n.startswith("stats/") and n.count("/") == 2]
    columns = {("/".join(n)): table.column("/".join(n)).to_pylist() for n in names}
    out: list[dict[str, dict[str, np.ndarray]]] = []
    for row in range(table.num_rows):
        stats: dict[str, dict[str, np.ndarray]] = {}
        for _, feature, stat in names:
            value = columns[f"stats/{feature}/{stat}"][row]
            if value is not None:
                stats.setdefault(feature, {})[stat] = np.asarray(value, dtype=np.float64)
        out.append(stats)
    return out


def kept_stats(source_stats: dict[str, Any], table: pa.Table, *, file: str) -> dict[str, Any]:
    """`meta/stats.json` of the kept episodes: lerobot's aggregation of their per-episode stats (the
    renumbered `table`); a feature without per-episode stats keeps the source's figures."""
    per_episode = episode_stats(table)
    merged = aggregate_stats(per_episode, [file] * len(per_episode)) if per_episode else {}
    out: dict[str, Any] = {}
    for key, value in source_stats.items():
        if key in merged:
            out[key] = {stat: np.asarray(v).tolist() for stat, v in merged[key].items() if stat in value}
        else:
            log.warning("%s: no per-episode stats of %r; its stats are the whole source's", file, key)
            out[key] = value
    return out


def select(source: V3Source, selection: Selection) -> V3Source:
    """`source` as the output of `selection` sees it: the kept episodes renumbered `0..K-1` with
    contiguous rows, their episodes table and stats; files, info and tasks are the source's.

    Raises:
        ValueError: `selection` was made for a source of another number of episodes.
    """
    if selection.total != len(source.episodes):
        raise ValueError(
            f"Invalid selection ({selection.total} episodes). Expected {len(source.episodes)}, the source's."
        )
    if not selection.dropped:
        return source
    episodes, start = [], 0
    for number, old in enumerate(selection.kept):
        episodes.append(renumber_episode(source.episodes[old], number, start))
        start += source.episodes[old].length
    table = renumber_table(source.whole_episodes_table(), selection.kept, episodes)
    stats = kept_stats(source.stats, table, file=source.remote.display(EPISODES_DIR)) if source.stats else {}
    return replace(
        source,
        episodes=episodes,
        episodes_table=table,
        all_columns=True,
        stats=stats,
        parent=source,
        selection=selection,
    )
