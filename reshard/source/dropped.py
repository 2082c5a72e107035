"""The record of the episodes a reshard leaves out: which, and why (`meta/lrs/dropped.json`).

`make_selection` builds it from the episodes a user names (`--skip-episodes 3,7,10-12`,
`parse_episode_list`) and the defective ones `lrs doctor`'s checks find (`--skip-defective`). Pure and
below `reshard.source.model`, whose sources carry it; `reshard.source.selection.select` applies it to a source.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cache.arguments import parse_index_list
from reader.errors import DatasetError
from reader.format.jsonfile import parse_json

DROPPED_JSON = "meta/lrs/dropped.json"
# The reason recorded for an episode of `--skip-episodes`.
SKIPPED_BY_USER = "skip-episodes"


@dataclass(frozen=True)
class Dropped:
    """One source episode left out, and why (`SKIPPED_BY_USER`, or the first defect found in it)."""

    episode: int
    reason: str


@dataclass(frozen=True)
class Selection:
    """The source episodes a reshard keeps: all of `total` but the dropped ones, in source order.

    Attributes:
        total: the source's number of episodes.
        dropped: the episodes left out, by source episode index.
        ignored: defects outside every episode that do not touch the output (orphan files, rows no
            episode points at), recorded for the record.
    """

    total: int
    dropped: tuple[Dropped, ...]
    ignored: tuple[str, ...] = ()
    kept: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        gone = {d.episode for d in self.dropped}
        object.__setattr__(self, "kept", tuple(e for e in range(self.total) if e not in gone))

    def __repr__(self) -> str:
        return (
            f"Selection(kept {len(self.kept)} of {self.total}, dropped={[d.episode for d in self.dropped]})"
        )

    def to_json(self) -> bytes:
        doc = {
            "source_episodes": self.total,
            "kept_episodes": len(self.kept),
            "dropped": [{"episode": d.episode, "reason": d.reason} for d in self.dropped],
            "ignored": list(self.ignored),
        }
        return (json.dumps(doc, indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, *, file: str) -> Selection:
        """Parse `meta/lrs/dropped.json`.

        Raises:
            DatasetError: not a selection document (naming `file`).
        """
        doc = parse_json(data, file=file)
        try:
            dropped = tuple(Dropped(int(d["episode"]), str(d["reason"])) for d in doc["dropped"])
            selection = cls(
                int(doc["source_episodes"]), dropped, tuple(str(n) for n in doc.get("ignored", ()))
            )
            kept = doc["kept_episodes"]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DatasetError(
                f"Invalid dropped-episodes record ({exc}). Expected lrs's JSON.", file=file
            ) from exc
        if len(selection.kept) != kept:
            raise DatasetError(
                f"Invalid kept_episodes ({kept!r:.40}). Expected {len(selection.kept)}.", file=file
            )
        return selection


def parse_episode_list(text: str, total: int) -> list[int]:
    """`"3,7,10-12"` -> `[3, 7, 10, 11, 12]`, checked against a source of `total` episodes.

    Raises:
        ValueError: a malformed item, or an episode the source does not have.
    """
    episodes = parse_index_list(text, what="episode")
    beyond = [e for e in episodes if e >= total]
    if beyond:
        raise ValueError(
            f"Invalid episode ({beyond[0]}) in the skip list. Expected episodes of the source: 0..{total - 1}."
        )
    return episodes


def make_selection(
    total: int, skipped: Iterable[int], defective: Mapping[int, str], ignored: Iterable[str] = ()
) -> Selection:
    """The selection dropping `skipped` (a user's choice) and the `defective` episodes (with why).

    Raises:
        DatasetError: no episode would be left.
    """
    reasons = {**defective, **{e: SKIPPED_BY_USER for e in skipped}}
    selection = Selection(total, tuple(Dropped(e, r) for e, r in sorted(reasons.items())), tuple(ignored))
    if not selection.kept:
        raise DatasetError(
            f"Invalid selection: all {total} episodes would be left out ({len(defective)} defective). "
            "Expected at least one episode to write."
        )
    return selection
