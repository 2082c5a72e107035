"""Where `lrs push` writes: the `Target` contract, and its fsspec implementation (local, s3://, gs://, ...).

A target only knows how to list, compare, and upload one unit of files; retries, ordering, progress and
verification live in `reshard.push.publish`, the same for every store.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cache.backoff import DEFAULT_RETRY, RetryPolicy
from cache.errors import LrsError
from cache.remote import Remote
from reader.format.index import FILES_INDEX, files_from_table
from reader.format.parquet import MAX_METADATA_PARQUET_BYTES, parse_parquet
from reshard.job.meta import path_sha256

# Uploads to a local directory land in `<name><PARTIAL_MARK><random>` first, then are renamed.
PARTIAL_MARK = ".lrs-partial-"
_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")
_HASH_BLOCK = 1 << 20


@dataclass(frozen=True)
class LocalFile:
    """One file to push: its dataset-relative path, where it is on disk, its size, and the sha256 the
    index records for it (None for the files index itself)."""

    rel: str
    path: Path
    bytes: int
    sha256: str | None = None

    def __repr__(self) -> str:
        return f"LocalFile({self.rel!r}, {self.bytes} B)"


@dataclass(frozen=True)
class RemoteFile:
    """One file already at the target.

    Attributes:
        bytes: its size.
        digest: a content hash the store hands out with the listing (S3 single-part ETag = md5, HF xet
            hash), or None when the store exposes none that can be trusted.
    """

    bytes: int
    digest: str | None = None


class Target(Protocol):
    """A place `lrs push` can upload a dataset to. Methods raise the store's own errors; the caller retries."""

    url: str

    retry: RetryPolicy
    """How lrs retries each request to this store (on top of any retries of the store's own client)."""

    def session(self) -> contextlib.AbstractContextManager[None]:
        """A context held for the whole push (e.g. to silence the store's own progress bars)."""
        ...

    def ensure_exists(self) -> None:
        """Create the bucket or directory if it does not exist yet (`--create`)."""
        ...

    def list_files(self) -> dict[str, RemoteFile]:
        """Every file under the target root, by dataset-relative path; FileNotFoundError if no bucket."""
        ...

    def same_content(self, local: LocalFile, remote: RemoteFile) -> bool | None:
        """Whether `remote` (same size as `local`) holds the same bytes; None where the store cannot
        tell (the published index decides, else the file goes up again: a same-sized file of another
        version must not stay)."""
        ...

    def published_sha256(self) -> dict[str, str]:
        """The sha256 of each file, by path, as the index of the dataset published there records it
        (`meta/lrs/files.parquet`; empty when there is none): those files need no other proof."""
        ...

    def batches(self, files: list[LocalFile]) -> list[list[LocalFile]]:
        """Group files into upload units, one request (and one retry scope) each."""
        ...

    def upload(self, batch: list[LocalFile]) -> None:
        """Upload one unit; safe to repeat."""
        ...

    def finish(self) -> None:
        """Tidy up after a complete, verified push (e.g. drop leftovers of interrupted uploads)."""
        ...


class FsspecTarget:
    """A dataset root on any fsspec filesystem; local directories get atomic temp-then-rename writes."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        self.url = remote.url
        self.retry = DEFAULT_RETRY

    def __repr__(self) -> str:
        return f"FsspecTarget({self.remote.shown!r})"

    def session(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold for fsspec stores."""
        return contextlib.nullcontext()

    def ensure_exists(self) -> None:
        """Create the root (for s3fs: the bucket) if missing."""
        self.remote.fs.makedirs(self.remote.root, exist_ok=True)

    def list_files(self) -> dict[str, RemoteFile]:
        """Every file under the root; listing caches are dropped first so the answer is fresh."""
        fs, root = self.remote.fs, self.remote.root
        fs.invalidate_cache(root)
        found = fs.find(root, detail=True)
        start = len(root) + 1
        return {
            name[start:]: RemoteFile(int(info["size"]), _md5_etag(info))
            for name, info in found.items()
            if info.get("type", "file") == "file" and name.startswith(f"{root}/")
        }

    def same_content(self, local: LocalFile, remote: RemoteFile) -> bool | None:
        """Compare the md5 of a single-part S3 upload, or the sha256 of a file in a local directory;
        None elsewhere (the store cannot tell)."""
        if remote.digest is not None:
            return _md5(local.path) == remote.digest
        path = self.remote.local_path(local.rel)
        if path is None:
            return None
        return path_sha256(path) == (local.sha256 or path_sha256(local.path))

    def published_sha256(self) -> dict[str, str]:
        """The published dataset's `meta/lrs/files.parquet`, read fresh (empty if none or unreadable)."""
        try:
            data = self.remote.cat(FILES_INDEX, limit=MAX_METADATA_PARQUET_BYTES)
            shown = self.remote.display(FILES_INDEX)
            entries = files_from_table(parse_parquet(data, file=shown, max_bytes=MAX_METADATA_PARQUET_BYTES))
        except (FileNotFoundError, LrsError):
            return {}
        return {e.path: e.sha256 for e in entries}

    def batches(self, files: list[LocalFile]) -> list[list[LocalFile]]:
        """One file per unit: fsspec uploads are per object, and so are their retries."""
        return [[f] for f in files]

    def upload(self, batch: list[LocalFile]) -> None:
        """Upload each file of the unit; to a local directory through a temp file and a rename."""
        for item in batch:
            target = self.remote.path(item.rel)
            if self.remote.is_local:
                _copy_atomic(item.path, Path(target))
            else:
                self.remote.fs.put_file(str(item.path), target)

    def finish(self) -> None:
        """Remove temp files that a killed push left in a local target."""
        if not self.remote.is_local:
            return
        for path in iter_partials(Path(self.remote.root)):
            path.unlink(missing_ok=True)


def _copy_atomic(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f"{target.name}{PARTIAL_MARK}{uuid.uuid4().hex[:12]}")
    try:
        shutil.copyfile(source, temp)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def _md5_etag(info: dict[str, object]) -> str | None:
    # A multipart ETag is "<md5 of part md5s>-<parts>": not a content hash we can recompute cheaply.
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"').lower()
    return etag if _MD5_ETAG.match(etag) else None


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def iter_partials(root: Path) -> Iterator[Path]:
    """Leftover temp files of interrupted uploads under a local target `root`."""
    return root.rglob(f"*{PARTIAL_MARK}*")
