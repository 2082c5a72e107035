"""Retries and secrets for `lrs push`: one retry policy for every store, and no credential in a message.

`retrying` runs one request under `cache.backoff.with_retries` and turns a final failure into a
`PushError` whose text went through `scrub`; the chained exception is dropped on purpose, since its own
message (printed with `--debug`) may quote a signed URL or a token.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TypeVar

from cache.backoff import DEFAULT_RETRY, RetryPolicy, http_status, with_retries
from cache.errors import FetchError
from cache.redaction import redact
from reshard.errors import PushError

T = TypeVar("T")
log = logging.getLogger(__name__)

_SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_AUTH_HINT = (
    " Expected credentials with write access: HF_TOKEN or `hf auth login` for hf://, "
    "AWS_* variables or a profile for s3://."
)


def retrying(fn: Callable[[], T], *, doing: str, policy: RetryPolicy = DEFAULT_RETRY) -> T:
    """Run one request under `policy` (the target's, see `Target.retry`); a final failure becomes a
    PushError without secrets. Each retry logs one warning."""

    def on_retry(exc: BaseException, attempt: int) -> None:
        log.warning(
            "%s failed (attempt %d), retrying: %s",
            scrub(doing),
            attempt + 1,
            scrub(f"{type(exc).__name__}: {exc}"),
        )

    try:
        return with_retries(fn, what=doing, verb="", on_retry=on_retry, policy=policy)
    except FetchError as exc:
        message = str(exc).strip()
        status = http_status(exc.__cause__) if exc.__cause__ is not None else None
        hint = _AUTH_HINT if status in (401, 403) else ""
        raise PushError(scrub(message[:1].upper() + message[1:] + hint)) from None


def scrub(text: str) -> str:
    """`text` without token-like strings and without the literal values of the known secret sources."""
    secrets = [os.environ.get(name) for name in _SECRET_ENV]
    secrets.append(_hub_login_token())
    for secret in secrets:
        if secret and len(secret) >= 6:
            text = text.replace(secret, "<redacted>")
    return redact(text)


def _hub_login_token() -> str | None:
    # The token saved by `hf auth login`, read without a network call; absent or unreadable is fine.
    try:
        from huggingface_hub import get_token

        return get_token()
    except (ImportError, OSError):
        return None
