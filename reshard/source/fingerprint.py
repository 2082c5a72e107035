"""The fingerprint of a source's metadata: what a reshard output was made from.

A reshard records it in its work directory when the job starts (`source.json`) and in
`meta/lrs/layout.json` when it ends. A rerun, a part and a finalize compare it with the source they
open, and `lrs verify --against` with the source it is given: a source that changed since (episodes
appended with lerobot, a file edited) is named as changed, never taken for the one that was resharded.

The fingerprint hashes the bytes of `meta/info.json`, every `meta/episodes/` file, `meta/tasks.parquet`
and `meta/stats.json` where there is one: lerobot rewrites them whenever it adds an episode, and every
output file is planned from them. The data and video files are not read for it (that would cost a pass
over the whole dataset); an edit of one of them without its metadata is `lrs verify --against`'s to find.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SourceFingerprint:
    """The content identity of a source's metadata.

    Attributes:
        files: sha256 of each metadata file, by dataset-relative path.
        episodes: the source's episodes.
        frames: the source's frames.
    """

    files: Mapping[str, str] = field(repr=False)
    episodes: int
    frames: int

    def __repr__(self) -> str:
        return f"SourceFingerprint({self.sha256[:12]}, episodes={self.episodes}, frames={self.frames})"

    @classmethod
    def of(cls, files: Mapping[str, bytes], *, episodes: int, frames: int) -> SourceFingerprint:
        """The fingerprint of metadata files given as bytes by path."""
        hashes = {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())}
        return cls(hashes, episodes, frames)

    @property
    def sha256(self) -> str:
        """One hash over every file's path and hash."""
        return hashlib.sha256(json.dumps(sorted(self.files.items())).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "episodes": self.episodes,
            "frames": self.frames,
            "files": dict(sorted(self.files.items())),
        }

    @classmethod
    def from_json(cls, doc: Any) -> SourceFingerprint | None:
        """The fingerprint recorded as `to_json` wrote it; None where `doc` is not one (an output or work
        directory of an lrs that did not record it)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
            return None
        try:
            return cls(
                {str(k): str(v) for k, v in doc["files"].items()}, int(doc["episodes"]), int(doc["frames"])
            )
        except (KeyError, TypeError, ValueError):
            return None


def describe_change(old: SourceFingerprint, new: SourceFingerprint) -> str:
    """What differs between two fingerprints, in a few words: `episodes: 5 -> 6, frames: 400 -> 480;
    meta/info.json and meta/episodes/chunk-000/file-000.parquet differ`."""
    parts = [
        f"{name}: {a} -> {b}"
        for name, a, b in (("episodes", old.episodes, new.episodes), ("frames", old.frames, new.frames))
        if a != b
    ]
    changed = [
        rel for rel in sorted(set(old.files) | set(new.files)) if old.files.get(rel) != new.files.get(rel)
    ]
    added = [rel for rel in changed if rel not in old.files]
    removed = [rel for rel in changed if rel not in new.files]
    edited = [rel for rel in changed if rel in old.files and rel in new.files]
    files = []
    for rels, verb in (
        (edited, "differ" if len(edited) > 1 else "differs"),
        (added, "added"),
        (removed, "gone"),
    ):
        if rels:
            shown = ", ".join(rels[:3]) + (f" and {len(rels) - 3} more" if len(rels) > 3 else "")
            files.append(f"{shown} {verb}")
    return "; ".join([", ".join(parts)] * bool(parts) + [", ".join(files)] * bool(files)) or "no change"
