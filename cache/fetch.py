"""Remote reads for the cache: verified whole-file downloads into temp files, and ranged reads.

`cache.remote.Remote` already retries transient errors (resets, 5xx, truncated bodies it can detect).
This module adds the integrity re-fetch: a download whose size or sha256 is wrong is discarded and
fetched again, up to `attempts` times, then `IntegrityError`. A cache disk that fills up is a
`CacheError` naming the cache file, not a failed read of the remote.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from cache.cache_stats import CacheCounters
from cache.errors import CacheError, FetchError, IntegrityError
from cache.redaction import redact
from cache.remote import Remote
from cache.store import Verified, open_fd

DEFAULT_INTEGRITY_ATTEMPTS = 3
# The most a download of a file whose size no index lists (a plain v3 video) may write: 32x lerobot's
# default video file size (500 MB); a body longer than that is cut there and refused (docs/limits.md).
MAX_UNLISTED_FILE_BYTES = 16 << 30
# A full, over-quota or read-only local disk: the cache's own writes failed, not the remote.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


@dataclass(frozen=True)
class Expected:
    """What a file must be to be served: its size and sha256, each when known."""

    size: int | None = None
    sha256: str | None = None

    def describe(self) -> str:
        """A short phrase for error messages."""
        parts = [
            f"{self.size} bytes" if self.size is not None else "",
            f"sha256 {self.sha256}" if self.sha256 else "",
        ]
        return " with ".join(p for p in parts if p) or "a readable file"


def download_verified(
    remote: Remote,
    rel: str,
    *,
    expected: Expected,
    new_temp: Callable[[], str],
    verified: Verified,
    counters: CacheCounters,
    attempts: int = DEFAULT_INTEGRITY_ATTEMPTS,
) -> str:
    """Download `rel` into a fresh temp file until it matches `expected`; return the temp path.

    Args:
        remote: where the dataset lives.
        rel: the dataset-relative path.
        expected: the size and sha256 the file must have.
        new_temp: creates the (empty) temp file to download into, reserving space for it.
        verified: this process's checked versions, which the result joins (when `expected.sha256`).
        counters: counts bytes, seconds and integrity retries.
        attempts: downloads to try before giving up on a remote that serves wrong bytes.

    Raises:
        FetchError: the remote has no such file, or failed permanently.
        IntegrityError: every attempt produced a file of the wrong size or sha256.
        CacheError: the cache's disk is full (or read-only).
    """
    problem: str | None = ""
    for attempt in range(attempts):
        temp = new_temp()
        try:
            problem = _download_once(remote, rel, temp, expected, verified, counters)
            if problem is None:
                return temp
        except BaseException as exc:
            _unlink(temp)
            full = _disk_full(exc)
            if full is not None:
                raise CacheError(
                    f"Could not write {temp} into the node cache: {os.strerror(full.errno or 0)}. Expected room "
                    "on the cache directory's disk for cache_max_bytes (free space, or lower it)."
                ) from exc
            raise
        _unlink(temp)
        counters.add(integrity_retries=1)
        if attempt + 1 < attempts:
            time.sleep(remote.retry.delay_s(attempt))
    raise IntegrityError(
        f"Invalid file ({redact(remote.display(rel))}): {problem} after {attempts} downloads. "
        f"Expected {expected.describe()}."
    )


def _download_once(
    remote: Remote, rel: str, temp: str, expected: Expected, verified: Verified, counters: CacheCounters
) -> str | None:
    """One download into `temp`, cut one byte past the size it must have (or may have); None if it checks
    out, else what is wrong."""
    started = time.monotonic()
    most = expected.size if expected.size is not None else MAX_UNLISTED_FILE_BYTES
    try:
        remote.get(rel, temp, max_size=most)
    except FileNotFoundError as exc:
        raise _missing(remote, rel) from exc
    finally:
        counters.add(fetch_seconds=time.monotonic() - started)
    with open_fd(temp) as fd:
        st = os.fstat(fd)
        counters.add(bytes_fetched=st.st_size)
        if expected.size is not None and st.st_size != expected.size:
            return f"size {st.st_size}" + (" or more" if st.st_size > expected.size else "")
        if st.st_size > most:
            return f"size {st.st_size} or more, over the {most} bytes a file no index lists may have"
        if expected.sha256 is not None:
            got = verified.mismatch(fd, expected.sha256)
            if got is not None:
                return f"sha256 {got}"
    return None


def read_remote_range(remote: Remote, rel: str, start: int, end: int, counters: CacheCounters) -> bytes:
    """Bytes `[start, end)` of `rel` in one ranged request (retried by the remote), counted.

    Raises:
        FetchError: the remote has no such file, or failed permanently.
    """
    started = time.monotonic()
    try:
        data = remote.cat_range(rel, start, end)
    except FileNotFoundError as exc:
        raise _missing(remote, rel) from exc
    finally:
        counters.add(fetch_seconds=time.monotonic() - started)
    counters.add(range_reads=1, bytes_fetched=len(data))
    return data


def _disk_full(exc: BaseException | None) -> OSError | None:
    """The OSError of a full (or read-only) local disk behind `exc` (or its causes), if that is what it is."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
            return exc
        exc = exc.__cause__
    return None


def _missing(remote: Remote, rel: str) -> FetchError:
    return FetchError(
        f"Invalid dataset path ({redact(remote.display(rel))}): the remote has no such file. "
        "Expected a file listed by the dataset."
    )


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
