"""Whether an lrs/1 index still describes the dataset around it, told cheaply at every open.

`meta/lrs/files.parquet` lists every file the reshard published with its size and sha256, the metadata
files (`meta/info.json`, `meta/tasks.parquet`, `meta/episodes/*`, `meta/stats.json`, carried `meta/` files)
included: that list is the index's fingerprint of what it indexes, in indexes of every lrs version. Tools
that edit a v3 dataset (`lerobot-edit-dataset`: modify tasks, delete episodes, re-encode videos, recompute
stats) copy `meta/lrs/` along unchanged, so the index then describes files that are no longer there.

`find_stale` compares what costs little: the sha256 of every listed metadata file (small files, read in
one concurrent round beside the ones the catalog reads anyway), and, where the dataset is read in place
from a local directory, every file under `data/`, `videos/` and `meta/` against its listed size (one
directory walk; an unlisted file counts too). Storage (buckets, the Hub, plain HTTP, a `file://` URL) gets
the hashes alone: there a data or video file of another size under unchanged metadata is more likely a
publish in progress than an edit, and the cache refuses it when it is fetched (sizes and sha256 are
checked), naming the file; it is never served. A same-size edit of a data file with the metadata unchanged is caught by the CRC-32 of each
row group the index keeps (`reader.runtime.rows`), an error naming the fix.

An edit is not damage. Every editor rewrites `meta/` with the files it changes (new tasks, episodes, stats,
or the video info a re-encode refreshes), so an index whose metadata files all still hash as listed, and
with no unlisted file under `meta/`, while a listed data or video file is missing or of another size,
describes a dataset that was damaged or tampered with, not edited: that `Stale` is `damaged`, and the
reader refuses it (`Stale.refusal`, one line naming the file), as the cache refuses such a file over a URL.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.errors import IntegrityError
from cache.remote import Remote
from cache.store import TEMP_SUFFIX
from reader.format.index import LRS_DIR, FileIndex
from reader.format.v3 import INFO_PATH, TASKS_PATH

# Where an edit of the dataset shows: the trees a LeRobot v3 dataset keeps its files in.
_TREES = ("data", "videos", "meta")


@dataclass(frozen=True)
class Stale:
    """Why an lrs/1 index does not describe its dataset: the first file that differs, and how.

    Attributes:
        file: the dataset-relative path that differs.
        problem: what differs, e.g. "another sha256 than meta/lrs/files.parquet lists".
        damaged: a listed data or video file differs while `meta/` is exactly what the index lists: damage
            or tampering, not an edit (editors rewrite `meta/` with the files they change).
    """

    file: str
    problem: str
    damaged: bool = False

    def describe(self, remote: Remote) -> str:
        """One line: the index is stale, which file differs, and the command that rebuilds it (where the
        file is `damaged`, the line of `refusal`)."""
        if self.damaged:
            return str(self.refusal(remote))
        return (
            f"stale lrs index: {remote.display(self.file)} {self.problem} (the dataset was changed after "
            f"its reshard). Expected the files meta/lrs/ indexes: rebuild it with `lrs reshard "
            f"{remote.shown} --out NEW`."
        )

    def refusal(self, remote: Remote) -> IntegrityError:
        """The one-line error for a damaged dataset: the file, how it differs, and what to do."""
        return IntegrityError(
            f"Invalid file ({remote.display(self.file)}): {self.problem}, while meta/ is exactly what the "
            "index recorded. Expected the file the index lists: it was damaged or replaced after the "
            f"reshard (restore it, or rebuild the index with `lrs reshard {remote.shown} --out NEW`)."
        )


def metadata_paths(files: FileIndex) -> list[str]:
    """The metadata files the index lists (kind `meta`), but the index's own files under `meta/lrs/`."""
    table = files.table
    meta = pc.equal(table.column("kind"), "meta")
    own = pc.starts_with(table.column("path"), f"{LRS_DIR}/")
    return table.filter(pc.and_(meta, pc.invert(own))).column("path").to_pylist()


def find_stale(remote: Remote, files: FileIndex, cat: Callable[[str], bytes]) -> Stale | None:
    """The first way the dataset at `remote` differs from what its index `files` lists, or None.

    Args:
        remote: the dataset.
        files: its `meta/lrs/files.parquet`.
        cat: reads a dataset-relative file (`Reads.cat` of a round that read `metadata_paths`); raises
            FileNotFoundError for a missing file.

    Raises:
        FetchError: a metadata file could not be read (other than missing).
    """
    for rel in metadata_paths(files):
        try:
            data = cat(rel)
        except FileNotFoundError:
            if rel in (INFO_PATH, TASKS_PATH):
                continue  # no dataset at all, v3 or lrs/1: the error where it is read says so
            return Stale(rel, "is missing, which meta/lrs/files.parquet lists")
        if hashlib.sha256(data).hexdigest() != files[rel].sha256:
            return Stale(rel, "has another sha256 than meta/lrs/files.parquet lists")
    return _size_change(remote, files) if remote.reads_in_place else None


def _size_change(remote: Remote, files: FileIndex) -> Stale | None:
    """How the files of a local dataset differ from the index, by arrays (one lookup of every path at
    once): an unlisted file under `meta/` first (an edit), then a listed file missing or of another size
    (`damaged`: the metadata files were found as listed before this is called), then an unlisted file."""
    present = sorted(_local_files(remote))
    paths = [rel for rel, _ in present]
    rows = files.positions(pa.array(paths, pa.string()))
    sizes = np.array([size for _, size in present], dtype=np.int64)
    listed = np.append(files.sizes, -1)[rows]  # row -1: not listed
    differ = np.flatnonzero(listed != sizes).tolist()
    unlisted = [Stale(paths[i], "is not listed in meta/lrs/files.parquet") for i in differ if rows[i] < 0]
    changed = [
        _listed(paths[i], f"has {sizes[i]} bytes, not the {listed[i]} meta/lrs/files.parquet lists")
        for i in differ
        if rows[i] >= 0
    ]
    seen = set(paths) | {INFO_PATH, TASKS_PATH}  # those two missing: their own error where they are read
    missing = [
        _listed(rel, "is missing, which meta/lrs/files.parquet lists")
        for rel in files
        if rel not in seen and not rel.startswith(f"{LRS_DIR}/")
    ]
    edited = [s for s in unlisted if s.file.startswith("meta/")]
    return next(iter(edited + sorted(changed + missing, key=lambda s: s.file) + unlisted), None)


def _listed(rel: str, problem: str) -> Stale:
    """A listed file that differs: damage where it is a data or video file (`meta/` is as listed)."""
    return Stale(rel, problem, damaged=not rel.startswith("meta/"))


def _local_files(remote: Remote) -> Iterator[tuple[str, int]]:
    """(dataset-relative path, size) of every file under the trees of a local dataset, but the index's
    own files, hidden files and the temporary files of an interrupted write."""
    for top in _TREES:
        base = os.path.join(remote.root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, remote.root).replace(os.sep, "/")
            if rel_dir == LRS_DIR:
                dirnames.clear()
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in filenames:
                if name.startswith(".") or name.endswith(TEMP_SUFFIX):
                    continue
                yield f"{rel_dir}/{name}", os.stat(os.path.join(dirpath, name)).st_size
