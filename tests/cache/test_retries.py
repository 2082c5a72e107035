"""How the cache's reads classify failures: a body cut short and a 500 behind fsspec's FileNotFoundError are
transient (retried); a real 404 is not."""

from __future__ import annotations

import pytest
from aiohttp import ClientPayloadError, ClientResponseError, RequestInfo
from aiohttp.http_exceptions import ContentLengthError
from yarl import URL

from cache.backoff import is_transient
from tests.cache.helpers import fast_remote
from tests.servers import Faults


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


def _not_found_from(cause: BaseException) -> FileNotFoundError:
    try:
        raise FileNotFoundError("http://127.0.0.1/x") from cause
    except FileNotFoundError as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "transient"),
    [
        (None, False),
        (FileNotFoundError("404"), False),
        (ClientResponseError(RequestInfo(URL("http://h/x"), "HEAD", {}), (), status=500), True),
        (ClientResponseError(RequestInfo(URL("http://h/x"), "HEAD", {}), (), status=403), False),
    ],
    ids=["plain", "from-404", "from-500", "from-403"],
)
def test_not_found_is_transient_only_when_caused_by_a_transient_error(cause, transient):
    # fsspec's HTTP `info` raises FileNotFoundError from whatever failed, a 500 included.
    exc = FileNotFoundError("x") if cause is None else _not_found_from(cause)
    assert is_transient(exc) is transient


def test_exists_and_size_survive_server_errors(source, serve):
    root, files = source
    server = serve(root, Faults(seed=3, fail_rate=0.5))
    remote = fast_remote(server.url)
    for rel, spec in files.items():
        assert remote.exists(rel), rel
        assert remote.size(rel) == spec.size, rel
    assert not remote.exists("no/such/file.bin")


def test_each_retry_logs_one_warning(source, serve, caplog):
    """One line per retry, naming the file, the attempt and the error; the final failure is the error."""
    import logging

    from cache.errors import FetchError

    root, files = source
    rel = sorted(files)[0]
    server = serve(root, Faults(seed=1, fail_rate=0.999))
    remote = fast_remote(server.url)
    with caplog.at_level(logging.WARNING, logger="cache.remote"), pytest.raises(FetchError) as info:
        remote.cat(rel)
    retries = [r.getMessage() for r in caplog.records if r.name == "cache.remote"]
    attempts = remote.retry.attempts
    assert len(retries) == attempts - 1
    for k, message in enumerate(retries, 1):
        assert message.startswith(f"Reading {remote.display(rel)} failed (attempt {k} of {attempts})")
        assert "HTTP 500" in message
    assert f"after {attempts} attempts" in str(info.value)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/ds",
        "http://lrs-no-such-host.invalid/ds",
        "s3://bucket/ds",
    ],
    ids=["refused", "name-not-resolved", "s3-endpoint-refused"],
)
def test_an_unreachable_endpoint_is_tried_at_most_twice_not_six_times(url: str, caplog, monkeypatch) -> None:
    """A refused connection or a name that does not resolve (a forgotten --endpoint-url, a server not
    running): two attempts, then one line that says the endpoint cannot be reached (was: six, 80 s)."""
    import logging

    from cache.backoff import UNREACHABLE_ATTEMPTS
    from cache.errors import FetchError
    from cache.remote import resolve

    port = _closed_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    remote = resolve(url.format(port=port), probe_ranges=False)
    with caplog.at_level(logging.WARNING, logger="cache.remote"), pytest.raises(FetchError) as info:
        remote.cat("meta/info.json")
    retries = [r for r in caplog.records if r.name == "cache.remote"]
    # A name that does not resolve is not transient at all (one attempt); a refused connection is (two).
    tries = 1 if "invalid" in url else UNREACHABLE_ATTEMPTS
    assert len(retries) == tries - 1, [r.getMessage() for r in retries]
    assert "its endpoint cannot be reached" in str(info.value), str(info.value)
    assert f"; {tries} attempt" in str(info.value), str(info.value)
    assert ("--endpoint-url" in str(info.value)) == url.startswith("s3://")
    assert remote.retry.attempts > UNREACHABLE_ATTEMPTS
