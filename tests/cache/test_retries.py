"""How the cache's reads classify a body cut short: transient (retried), whatever aiohttp says it means."""

from __future__ import annotations

import pytest
from aiohttp import ClientPayloadError
from aiohttp.http_exceptions import ContentLengthError

from cache.remote import is_transient


def _payload_error() -> ClientPayloadError:
    try:
        try:
            raise ContentLengthError("Not enough data to satisfy content length header")
        except ContentLengthError as cause:
            raise ClientPayloadError("Response payload is not completed") from cause
    except ClientPayloadError as exc:
        return exc


@pytest.mark.parametrize(
    "make",
    [_payload_error, lambda: ContentLengthError("short")],
    ids=["client-payload-error", "content-length-error"],
)
def test_truncated_body_is_transient(make):
    # ContentLengthError carries code 400 (a status aiohttp's parser would answer with), not the server's.
    assert is_transient(make())
