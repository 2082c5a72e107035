"""Retried requests: which errors are transient, how long to back off, and error text without secrets.

`with_retries` runs one request (a read of `cache.remote.Remote`, an upload of `reshard.push`) until it
succeeds: transient errors (timeouts, resets, truncated bodies, HTTP 408/429/5xx) are retried with
exponential backoff and full jitter; permanent ones (missing file, 4xx, permission) raise at once. An
endpoint that cannot be reached at all (its name does not resolve, or it refuses the connection: a
wrong or forgotten `--endpoint-url`, a server that is not running) is tried `UNREACHABLE_ATTEMPTS` times,
not the policy's count: 80 s of backoff against real AWS told the user nothing a second try did not. A
request that still fails raises `FetchError` naming it, without credentials (`cache.redaction.redact`).
"""

from __future__ import annotations

import errno
import logging
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cache.errors import FetchError
from cache.redaction import redact

T = TypeVar("T")
# Retries are logged as remote reads, under the logger they have always had.
log = logging.getLogger("cache.remote")

_TRANSIENT_ERRNOS = {
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ECONNREFUSED,
    errno.ETIMEDOUT,
    errno.EPIPE,
    errno.EAGAIN,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
}


# Tries of a request whose endpoint cannot be reached (see the module docstring).
UNREACHABLE_ATTEMPTS = 2
# Exception type names (aiohttp, urllib3) that say a host name did not resolve, outside `socket.gaierror`.
_NAME_ERRORS = {"ClientConnectorDNSError", "NameResolutionError"}


class TruncatedRead(OSError):
    """A read returned fewer bytes than asked for: the body was cut short. Transient."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter.

    Attributes:
        attempts: total tries, the first included.
        base_delay_s: delay before the second try; doubles each time.
        max_delay_s: cap on one delay.
    """

    attempts: int = 6
    base_delay_s: float = 0.2
    max_delay_s: float = 8.0

    def delay_s(self, attempt: int) -> float:
        """Seconds to wait after failed try number `attempt` (0-based)."""
        return random.uniform(0, min(self.max_delay_s, self.base_delay_s * (2**attempt)))


DEFAULT_RETRY = RetryPolicy()


def http_status(exc: BaseException | None) -> int | None:
    """The HTTP status behind an exception from aiohttp, requests/httpx, huggingface_hub or botocore.

    s3fs turns an S3 500/503 into a bare OSError whose cause is botocore's ClientError, which keeps the
    status in `response["ResponseMetadata"]`; the cause chain is followed for that reason.
    """
    seen = 0
    while exc is not None and seen < 6:
        for attr in ("status", "status_code", "code"):
            value = getattr(exc, attr, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(value, int):
                return value
        elif response is not None:
            for attr in ("status_code", "status"):
                value = getattr(response, attr, None)
                if isinstance(value, int):
                    return value
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same request may succeed."""
    if isinstance(exc, FileNotFoundError):
        # fsspec's HTTP `info` reports any failure, a 500 included, as FileNotFoundError raised from it.
        cause = exc.__cause__
        return cause is not None and cause is not exc and is_transient(cause)
    if isinstance(exc, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    name = type(exc).__name__
    # aiohttp and botocore keep their connection errors outside the builtin hierarchy. Checked before
    # any status: a body cut short is an aiohttp ClientPayloadError caused by a ContentLengthError whose
    # `code` is 400, a status aiohttp's parser suggests, not one the server sent.
    if name in {
        "ClientPayloadError",
        "ServerDisconnectedError",
        "ClientConnectionError",
        "ClientConnectorError",
        "ClientOSError",
        "ServerTimeoutError",
        "ContentLengthError",
        "IncompleteRead",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "ResponseStreamingError",
        "RemoteDisconnected",
        "ChunkedEncodingError",
        "ProtocolError",
    }:
        return True
    status = http_status(exc)
    if status is not None:
        return status == 408 or status == 429 or status >= 500
    if isinstance(exc, (TimeoutError, ConnectionError, TruncatedRead)):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    cause = exc.__cause__ or exc.__context__
    return cause is not None and cause is not exc and is_transient(cause)


def is_unreachable(exc: BaseException | None) -> bool:
    """Whether `exc` (or an error it was raised from) says the endpoint cannot be reached: a host name that
    does not resolve, or a refused connection."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, (socket.gaierror, ConnectionRefusedError)) or type(exc).__name__ in _NAME_ERRORS:
            return True
        if isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED:
            return True
        os_error = getattr(exc, "os_error", None)  # aiohttp's ClientConnectorError keeps it here
        if isinstance(os_error, BaseException) and is_unreachable(os_error):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    verb: str = "Reading",
    policy: RetryPolicy = DEFAULT_RETRY,
    on_retry: Callable[[BaseException, int], None] | None = None,
) -> T:
    """Call `fn` until it succeeds, retrying transient errors under `policy`.

    Args:
        fn: the request; must be safe to repeat.
        what: names the request in the error (a URL without credentials).
        verb: what the request does, first word of the error ("Reading", "Uploading").
        policy: how many times and how long to wait.
        on_retry: called with the error and the 0-based attempt before each wait; None logs one warning
            per retry (what, the attempt, the wait and the error, without credentials).

    Raises:
        FileNotFoundError: the remote says the file does not exist (not wrapped: callers name it).
        FetchError: a permanent error, or transient errors on every attempt.
    """
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified right below
            if isinstance(exc, FileNotFoundError) and not is_transient(exc):
                raise
            unreachable = is_unreachable(exc)
            if unreachable and (attempt + 1 >= UNREACHABLE_ATTEMPTS or not is_transient(exc)):
                raise FetchError(
                    f"{verb} {what} failed: its endpoint cannot be reached ({_describe(exc)}; "
                    f"{_count(attempt + 1, 'attempt')}). Expected a reachable host{_endpoint_hint(what)}."
                ) from exc
            if not is_transient(exc):
                raise FetchError(f"{verb} {what} failed: {_describe(exc)}") from exc
            if attempt + 1 == policy.attempts:
                raise FetchError(
                    f"{verb} {what} failed after {policy.attempts} attempts: {_describe(exc)}"
                ) from exc
            delay = policy.delay_s(attempt)
            if on_retry is not None:
                on_retry(exc, attempt)
            else:
                log.warning(
                    "%s %s failed (attempt %d of %d), retrying in %.1f s: %s",
                    verb,
                    what,
                    attempt + 1,
                    policy.attempts,
                    delay,
                    _describe(exc),
                )
            time.sleep(delay)
    raise AssertionError("unreachable")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _endpoint_hint(what: str) -> str:
    """For an S3 URL, where its endpoint comes from."""
    if what.startswith(("s3://", "s3a://")):
        return ": an S3-compatible store needs --endpoint-url (or AWS_ENDPOINT_URL)"
    return ""


def _describe(exc: BaseException) -> str:
    status = http_status(exc)
    text = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "")
    message = redact(str(exc)).strip().splitlines()
    return f"{text}: {message[0][:300]}" if message else text
