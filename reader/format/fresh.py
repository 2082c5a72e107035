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
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    """

    file: str
    problem: str

    def describe(self, remote: Remote) -> str:
        """One line: the index is stale, which file differs, and the command that rebuilds it."""
        return (
            f"stale lrs index: {remote.display(self.file)} {self.problem} (the dataset was changed after "
            f"its reshard). Expected the files meta/lrs/ indexes: rebuild it with `lrs reshard "
            f"{remote.shown} --out NEW`."
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
    """The first file of a local dataset that is missing, unlisted or of another size than listed (by
    arrays: one lookup of every path at once)."""
    present = sorted(_local_files(remote))
    paths = [rel for rel, _ in present]
    rows = files.positions(pa.array(paths, pa.string()))
    sizes = np.array([size for _, size in present], dtype=np.int64)
    listed = np.append(files.sizes, -1)[rows]  # row -1: not listed
    for i in np.flatnonzero(listed != sizes)[:1].tolist():
        if rows[i] < 0:
            return Stale(paths[i], "is not listed in meta/lrs/files.parquet")
        return Stale(paths[i], f"has {sizes[i]} bytes, not the {listed[i]} meta/lrs/files.parquet lists")
    seen = set(paths) | {INFO_PATH, TASKS_PATH}  # those two missing: their own error where they are read
    for rel in files:
        if rel not in seen and not rel.startswith(f"{LRS_DIR}/"):
            return Stale(rel, "is missing, which meta/lrs/files.parquet lists")
    return None


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
