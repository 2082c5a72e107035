"""An S3 server on loopback for tests: moto in server mode, and a fault-injecting HTTP proxy in front of it.

Both bind 127.0.0.1 on a free port and are stopped by their context manager, so a pytest fixture is
`with moto_server() as endpoint: yield endpoint`.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from tests.servers import QuietServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}
_INJECTED_500 = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again. (injected)</Message></Error>"
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[str]:
    """Run moto's S3 in a thread on 127.0.0.1; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _draw_key(path: str) -> str:
    """A request path without its bucket segment and upload ids: what a fault draw depends on."""
    url = urllib.parse.urlsplit(path)
    key = url.path.lstrip("/").partition("/")[2]
    query = [(k, v) for k, v in urllib.parse.parse_qsl(url.query, keep_blank_values=True) if k != "uploadId"]
    return f"{key}?{urllib.parse.urlencode(sorted(query))}"


class FaultProxy:
    """Forwards HTTP requests to `upstream`, answering a seeded fraction of them with an S3 500 instead.

    Whether a request fails is a pure function of (seed, method, object key and query, how many times that
    request was seen), so neither thread interleaving nor a test's random bucket name changes the outcome
    (the bucket segment and multipart upload ids are left out of the draw); `max_failures` caps the 500s
    one request gets, so a client that retries enough always gets through. `latency_s` (plus a random
    `jitter_s`) delays every answer.

    Attributes:
        requests: (method, path, status) of every request answered, in the order answered.
        injected: how many 500s were injected.
    """

    def __init__(
        self,
        upstream: str,
        *,
        fail_fraction: float = 0.0,
        seed: int = 0,
        max_failures: int | None = 2,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
    ) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.fail_fraction = fail_fraction
        self.requests: list[tuple[str, str, int]] = []
        self.injected = 0
        self.seed = seed
        self.max_failures = max_failures
        self.latency_s, self.jitter_s = latency_s, jitter_s
        self._seen: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._server = QuietServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        """The proxy's URL."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _decide(self, method: str, path: str) -> bool:
        with self._lock:
            attempt = self._seen.get((method, path), 0)
            self._seen[(method, path)] = attempt + 1
            draw = random.Random(f"{self.seed}:{method}:{_draw_key(path)}:{attempt}").random()
            fail = draw < self.fail_fraction and (self.max_failures is None or attempt < self.max_failures)
            self.injected += fail
            return fail

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, path, status))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the test reads `requests` instead."""

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while size := int(self.rfile.readline().split(b";")[0], 16):
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    return b"".join(parts)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _serve(self) -> None:
                body = self._body()
                if proxy.latency_s or proxy.jitter_s:
                    time.sleep(proxy.latency_s + proxy.jitter_s * random.random())
                if proxy._decide(self.command, self.path):
                    self._reply(500, [("Content-Type", "application/xml")], _INJECTED_500)
                    return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    self._reply(response.status, response.getheaders(), data)
                finally:
                    conn.close()

            def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                proxy._record(self.command, self.path, status)
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in _HOP_BY_HOP and (
                        key.lower() != "content-length" or self.command == "HEAD"
                    ):
                        self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve

        return Handler
