"""The project's error hierarchy, rooted here because `cache` is the package every other one imports.

`reader.errors` and `reshard.errors` add their own classes under `LrsError`; the CLI turns any
`LrsError` into a one-line message and a non-zero exit, tracebacks only with `--debug`. Every message is
redacted when the error is made (`cache.redaction`), so no error of lrs carries a credential, whoever
prints it, nor does the chain of exceptions that led to it (`cache.redaction.scrub_exception`).
"""

from __future__ import annotations

import errno
import sys

from cache.redaction import redact, scrub_exception


class LrsError(Exception):
    """Base class of every error lrs raises on purpose; its text arguments are redacted on creation, and so
    is the exception being handled where it is made (with its chain), which `raise ... from exc` makes its
    cause: a library's error that quoted a credentialed URL prints redacted in the traceback above it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))
        scrub_exception(sys.exc_info()[1])


class FetchError(LrsError):
    """A remote read failed permanently (after retries), or the remote is unreachable."""


class CacheError(LrsError):
    """The node-local cache cannot serve a file (budget, integrity, or a broken cache directory)."""


class IntegrityError(CacheError):
    """A fetched file does not match the size or sha256 the index promises."""


class TrustError(LrsError):
    """A directory lrs would reuse (a cache, its `.lrs/`, a work directory) is not one it can trust: another
    user owns it or may write it, or it is a symbolic link (see `cache.trust`)."""


class PathError(LrsError):
    """A local path lrs must create, write or read cannot be: no permission, a read-only mount, an
    immutable folder, a full disk or quota (`os_error_message` words it)."""


def os_error_message(exc: OSError) -> str:
    """One line for an `OSError` on a local path: the path, the cause, and what would fix it."""
    where = exc.filename or "?"
    cause = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = "room on its disk (free space, or a larger quota)"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "a folder you can write (its permissions, a read-only mount, chattr +i)"
    else:
        fix = "a path lrs can use"
    return f"Invalid path ({where}): {cause}. Expected {fix}."


class MissingBackend(LrsError, ImportError):
    """A URL's scheme needs an fsspec filesystem whose package is not installed (`gs://` needs gcsfs).

    Also an `ImportError`, which is what fsspec raises for it, so code that caught that still does.
    """

    def __init__(self, message: str, *, package: str) -> None:
        super().__init__(message)
        self.package = package


class LocationError(LrsError, ValueError):
    """A dataset location is empty, of an unknown form, or its scheme's filesystem refuses it.

    Also a `ValueError`, what `cache.remote.resolve` raised for these before.
    """
