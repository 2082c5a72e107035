"""`lrs push`: upload a resharded dataset to a bucket, resumably, the index last.

The job is four steps, each safe to interrupt:

1. check the source directory against its own `meta/lrs/files.parquet` (every file there, of its size);
2. list the target and keep only files that are missing or differ (size, then hash where the store
   hands one out), so a rerun after a crash uploads only the rest;
3. upload in publish phases (`publish_phase`): data and videos, then `meta/`, then the `meta/lrs/`
   index, then `meta/lrs/layout.json`; a phase starts only when the previous one has fully landed, so a
   reader that finds the index also finds every file it points at. Each file is hashed just before it
   goes up and must have the sha256 the index records: a file changed since `lrs reshard` stops the push
   before any `meta/` file is uploaded, so a new target publishes nothing;
4. list the target again and check every indexed file is there with its size.

Credentials never reach a message: every error text goes through `push_retry.scrub`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from cache.arguments import check_int
from cache.progress import human_bytes, progress_bar
from cache.remote import resolve
from reader.format.index import FILES_INDEX, LAYOUT_JSON, LRS_DIR, files_from_table
from reshard.errors import LayoutError, PushError
from reshard.job.meta import path_sha256
from reshard.push.hf import HfBucketTarget
from reshard.push.retry import retrying, scrub
from reshard.push.target import FsspecTarget, LocalFile, RemoteFile, Target


@dataclass(frozen=True)
class PushSummary:
    """What a push did (or, with `dry_run`, would do).

    Attributes:
        url: the target, without credentials.
        uploaded: dataset-relative paths uploaded (dry run: to upload), in upload order.
        skipped: paths already at the target with the same content.
        uploaded_bytes: total size of `uploaded`.
        skipped_bytes: total size of `skipped`.
        seconds: wall time of the whole push, checks included.
        dry_run: whether nothing was uploaded on purpose.
    """

    url: str
    uploaded: tuple[str, ...]
    skipped: tuple[str, ...]
    uploaded_bytes: int
    skipped_bytes: int
    seconds: float
    dry_run: bool = False

    def __repr__(self) -> str:
        return (
            f"PushSummary({self.url!r}, uploaded={len(self.uploaded)}, skipped={len(self.skipped)}, "
            f"bytes={self.uploaded_bytes}, seconds={self.seconds:.1f}, dry_run={self.dry_run})"
        )

    def describe(self) -> str:
        """One line for humans."""
        verb = "Would upload" if self.dry_run else "Uploaded"
        return (
            f"{verb} {len(self.uploaded)} files ({human_bytes(self.uploaded_bytes)}), skipped "
            f"{len(self.skipped)} ({human_bytes(self.skipped_bytes)}) to {self.url} in {self.seconds:.1f} s."
        )


def push(
    local_dir: str | os.PathLike[str],
    url: str,
    *,
    workers: int = 8,
    create: bool = False,
    endpoint_url: str | None = None,
    dry_run: bool = False,
    quiet: bool = False,
    progress: Callable[[int], None] | None = None,
) -> PushSummary:
    """Upload the lrs/1 dataset in `local_dir` to `url`, skipping what is already there, the index last.

    Args:
        local_dir: a dataset written by `lrs reshard` (with `meta/lrs/files.parquet`).
        url: `hf://buckets/<owner>/<name>[/prefix]`, `s3://bucket/prefix`, a local path, or any writable
            fsspec URL.
        workers: uploads in flight at once.
        create: create the bucket (or directory) first if it does not exist.
        endpoint_url: S3-compatible endpoint (overrides AWS_ENDPOINT_URL), or the Hub endpoint for hf://.
        dry_run: list the target and plan, upload nothing.
        quiet: no progress bar.
        progress: called with the byte count of each upload unit as it lands, from worker threads,
            one call at a time.

    Returns:
        What was uploaded and skipped.

    Raises:
        ValueError: `workers` is below 1.
        LayoutError: `local_dir` is not a complete lrs/1 dataset (names the first bad file).
        PushError: the target is invalid or unreachable, an upload failed for good, or the target does
            not match the index afterwards.
    """
    check_int("workers", workers, 1)
    started = time.monotonic()
    files = load_manifest(local_dir)
    target = open_target(url, endpoint_url=endpoint_url, source=Path(local_dir))
    with target.session():
        if create and not dry_run:
            retrying(target.ensure_exists, doing=f"creating {target.url}", policy=target.retry)
        remote = _list_target(target, missing_ok=dry_run)
        published = retrying(
            target.published_sha256, doing=f"reading {target.url}'s index", policy=target.retry
        )
        upload, skip = plan_push(files, remote, target, workers=workers, published=published)
        if not dry_run:
            _upload_phases(target, upload, workers=workers, quiet=quiet, progress=progress)
            check_remote(files, _list_target(target, missing_ok=False), url=target.url)
            retrying(target.finish, doing=f"tidying {target.url}", policy=target.retry)
    return PushSummary(
        url=scrub(target.url),
        uploaded=tuple(f.rel for f in upload),
        skipped=tuple(f.rel for f in skip),
        uploaded_bytes=sum(f.bytes for f in upload),
        skipped_bytes=sum(f.bytes for f in skip),
        seconds=time.monotonic() - started,
        dry_run=dry_run,
    )


def load_manifest(local_dir: str | os.PathLike[str]) -> list[LocalFile]:
    """Every file of the dataset as `files.parquet` lists it, plus `files.parquet` itself, checked on disk.

    Raises:
        LayoutError: the index is missing or unreadable, lists an unsafe path, or a listed file is
            missing or has another size (the first one is named).
    """
    root = Path(local_dir)
    index = root / FILES_INDEX
    if not index.is_file():
        raise LayoutError(
            f"Invalid dataset directory ({root}): no {FILES_INDEX}. Expected an lrs/1 dataset written by "
            "`lrs reshard`.",
            file=str(index),
        )
    try:
        entries = files_from_table(pq.read_table(index), file=str(index))
    except (pa.ArrowInvalid, OSError) as exc:
        raise LayoutError(f"Invalid files index ({exc}). Expected a parquet table.", file=str(index)) from exc
    seen: set[str] = set()
    files = []
    for entry in entries:
        _check_rel(entry.path, seen, index)
        files.append(_checked_local(root, entry.path, entry.bytes, entry.sha256, index))
    files.append(LocalFile(FILES_INDEX, index, index.stat().st_size))
    return files


def _check_rel(rel: str, seen: set[str], index: Path) -> None:
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or "\\" in rel or any(p in (".", "..") for p in parts) or rel in seen:
        raise LayoutError(
            f"Invalid path ({rel!r}). Expected a unique relative path inside the dataset.", file=str(index)
        )
    if rel == FILES_INDEX:
        raise LayoutError(f"Invalid path ({rel!r}). Expected the index not to list itself.", file=str(index))
    seen.add(rel)


def _checked_local(root: Path, rel: str, size: int, sha256: str, index: Path) -> LocalFile:
    path = root / rel
    if not path.is_file():
        raise LayoutError(
            f"Invalid dataset directory ({root}): {rel} is missing. Expected every file the index lists.",
            file=str(index),
        )
    actual = path.stat().st_size
    if actual != size:
        raise LayoutError(
            f"Invalid file size ({actual} bytes) of {rel}. Expected {size} bytes as the index lists.",
            file=str(index),
        )
    return LocalFile(rel, path, size, sha256)


def check_content(item: LocalFile) -> None:
    """Hash a file about to be uploaded and compare it with the sha256 the index records.

    Raises:
        LayoutError: the file changed since `lrs reshard` indexed it (names it and both hashes).
    """
    if item.sha256 is None:
        return
    actual = path_sha256(item.path)
    if actual != item.sha256:
        raise LayoutError(
            f"Invalid content of {item.rel} (sha256 {actual[:16]}...). Expected sha256 {item.sha256[:16]}... "
            "as the index lists: the file changed after "
            "`lrs reshard` wrote it. Nothing was published; run `lrs verify` on the directory, or reshard "
            "again.",
            file=str(item.path),
        )


def open_target(url: str, *, endpoint_url: str | None = None, source: Path | None = None) -> Target:
    """The `Target` for a push URL.

    Raises:
        PushError: the URL is of no writable kind, needs a filesystem that is not installed, or is the
            source directory itself.
    """
    text = os.fspath(url).strip()
    try:
        if text.startswith("hf://"):
            if not text.startswith("hf://buckets/"):
                raise ValueError(
                    f"Invalid push target ({text}). Expected hf://buckets/<owner>/<name>[/prefix]."
                )
            return HfBucketTarget(text, endpoint=endpoint_url)
        if text.startswith(("http://", "https://")):
            raise ValueError(f"Invalid push target ({text}). Expected a writable store, not an HTTP URL.")
        # A bare path is always a directory here, even when it looks like a Hub repo id.
        remote = resolve(
            text if "://" in text else os.path.abspath(text), storage_options=_options(endpoint_url)
        )
    except ValueError as exc:  # a missing filesystem package is `resolve`'s one-line MissingBackend
        raise PushError(scrub(str(exc))) from None
    if remote.is_local and endpoint_url:
        raise PushError(f"Invalid --endpoint-url ({endpoint_url}). Expected no endpoint for a local target.")
    if remote.is_local and source is not None:
        target, here = os.path.realpath(remote.root), os.path.realpath(source)
        if target == here or target.startswith(here.rstrip(os.sep) + os.sep):
            # Inside it, the copy would become files of the dataset (verify lists them as unknown).
            raise PushError(
                f"Invalid push target ({remote.url}). Expected a place outside the source directory "
                f"({source})."
            )
    return FsspecTarget(remote)


def _options(endpoint_url: str | None) -> dict[str, str]:
    return {"endpoint_url": endpoint_url} if endpoint_url else {}


def publish_phase(rel: str) -> int:
    """The phase in which `rel` is uploaded: 0 data/videos, 1 meta/, 2 meta/lrs/, 3 meta/lrs/layout.json.

    `layout.json` is what makes a directory an lrs/1 dataset for a reader, so it lands after everything.
    """
    if not rel.startswith("meta/"):
        return 0
    if not rel.startswith(f"{LRS_DIR}/"):
        return 1
    return 3 if rel == LAYOUT_JSON else 2


def split_by_size(
    files: list[LocalFile], remote: dict[str, RemoteFile]
) -> tuple[list[LocalFile], list[tuple[LocalFile, RemoteFile]]]:
    """Files missing at the target or of another size, and the (local, remote) pairs whose sizes agree."""
    upload, same_size = [], []
    for item in files:
        there = remote.get(item.rel)
        if there is None or there.bytes != item.bytes:
            upload.append(item)
        else:
            same_size.append((item, there))
    return upload, same_size


def plan_push(
    files: list[LocalFile],
    remote: dict[str, RemoteFile],
    target: Target,
    *,
    workers: int,
    published: dict[str, str] | None = None,
) -> tuple[list[LocalFile], list[LocalFile]]:
    """(to upload, to skip): missing, resized, or changed files go up, in publish order.

    A file of the target's size is skipped when the store shows the same content (a content hash in its
    listing, or a local file hashed), or, where it cannot tell, when the published index (`published`:
    path -> sha256) records our sha256 for it; otherwise it goes up again, so that a re-push of another
    version never leaves a same-sized old file in place.
    """
    upload, same_size = split_by_size(files, remote)
    known = published or {}

    def unchanged(pair: tuple[LocalFile, RemoteFile]) -> bool:
        told = target.same_content(*pair)
        if told is not None:
            return told
        local = pair[0]
        return local.sha256 is not None and known.get(local.rel) == local.sha256

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lrs-push-hash") as pool:
        same = list(pool.map(unchanged, same_size))
    upload += [item for (item, _), equal in zip(same_size, same, strict=True) if not equal]
    skip = [item for (item, _), equal in zip(same_size, same, strict=True) if equal]
    upload.sort(key=lambda f: (publish_phase(f.rel), f.rel))
    return upload, sorted(skip, key=lambda f: f.rel)


def check_remote(files: list[LocalFile], remote: dict[str, RemoteFile], *, url: str) -> None:
    """Raise PushError naming the first indexed file that is missing at the target or of another size."""
    for item in sorted(files, key=lambda f: f.rel):
        there = remote.get(item.rel)
        if there is None:
            raise PushError(
                f"Invalid remote file ({url}/{item.rel}): missing after upload. Expected {item.bytes} bytes."
            )
        if there.bytes != item.bytes:
            raise PushError(
                f"Invalid remote file size ({there.bytes} bytes) of {url}/{item.rel} after upload. "
                f"Expected {item.bytes} bytes."
            )


class _PushProgress:
    """A bytes progress bar plus the caller's callback, advanced from worker threads one at a time."""

    def __init__(self, total: int, *, quiet: bool, callback: Callable[[int], None] | None) -> None:
        self._lock = threading.Lock()
        self._callback = callback
        self._bar = progress_bar(
            total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="push", disable=quiet
        )

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self._bar.update(nbytes)
            if self._callback is not None:
                self._callback(nbytes)

    def close(self) -> None:
        self._bar.close()


def _upload_phases(
    target: Target,
    upload: list[LocalFile],
    *,
    workers: int,
    quiet: bool,
    progress: Callable[[int], None] | None,
) -> None:
    bar = _PushProgress(sum(f.bytes for f in upload), quiet=quiet, callback=progress)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lrs-push")
    try:
        for phase in sorted({publish_phase(f.rel) for f in upload}):
            units = target.batches([f for f in upload if publish_phase(f.rel) == phase])
            _run_all([pool.submit(_upload_unit, target, unit, bar) for unit in units])
    finally:
        # On Ctrl-C too: nothing queued may start once we leave, or a later phase could overtake.
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()


def _upload_unit(target: Target, unit: list[LocalFile], bar: _PushProgress) -> None:
    for item in unit:
        check_content(item)
    where = f"{target.url}/{unit[0].rel}" + (f" (+{len(unit) - 1} files)" if len(unit) > 1 else "")
    try:
        retrying(lambda: target.upload(unit), doing=f"upload of {where}", policy=target.retry)
    except FileNotFoundError as exc:
        raise PushError(
            scrub(f"Upload of {where} failed: not found ({exc}). Expected an existing bucket (or --create).")
        ) from None
    bar.advance(sum(f.bytes for f in unit))


def _run_all(futures: list[Future[None]]) -> None:
    """Wait for every future; on the first failure cancel what has not started and re-raise it."""
    done, pending = wait(futures, return_when=FIRST_EXCEPTION)
    failed = [f for f in futures if f in done and f.exception() is not None]
    if failed:
        for future in pending:
            future.cancel()
        wait(pending)
        failed[0].result()  # raises the first failure


def _list_target(target: Target, *, missing_ok: bool) -> dict[str, RemoteFile]:
    try:
        return retrying(target.list_files, doing=f"listing of {target.url}", policy=target.retry)
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise PushError(
            f"Invalid push target ({target.url}): the bucket does not exist. Expected an existing bucket, "
            "or --create."
        ) from None
