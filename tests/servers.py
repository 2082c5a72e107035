"""Loopback servers for tests: a threaded HTTP file server with Range support and fault injection.

`RangeServer(root, faults=Faults(...))` serves the files under `root` on `127.0.0.1:<free port>`:

- `GET` (whole file, or one `Range: bytes=a-b | a- | -n`, answered 206 with `Content-Range`) and `HEAD`;
- faults, deterministic by seed: a fraction of requests answered 500, a fraction truncated (the full
  `Content-Length` is announced, half the body is sent, the connection is closed), fixed latency;
  per-path scripted faults for the first N requests of a path: `corrupt` (right length, wrong bytes),
  `short` (a lying server: a shorter body with a matching `Content-Length`), `stall` (half the body,
  then wait until `release()` or `stop()`), `endless` (a hostile server: the file, then spaces without end,
  under a lying `Content-Length` or none, to a request without Range);
- a request log (`requests`, `count`), the most requests it served at once (`max_in_flight`), and
  `wait_for(predicate)` to sync a test with what the server saw.

Random faults are rolled from `(seed, method, path, range, n-th such request)`, so which request fails
does not depend on how threads interleave.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import random
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

Fault = Literal["fail", "truncate", "corrupt", "short", "stall", "endless"]
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class Faults:
    """What the server does wrong.

    Attributes:
        seed: seeds the random faults.
        fail_rate: fraction of requests answered `500`.
        truncate_rate: fraction of `GET`s whose body is cut in half (connection closed).
        latency_s: delay before answering each request.
        jitter_s: a further delay, uniform in [0, jitter_s), drawn per request like the faults.
        corrupt: path -> number of first `GET`s answered with flipped bytes (same length).
        short: path -> number of first `GET`s answered with half the body, announced as complete.
        stall: path -> number of first `GET`s that send half the body then block until release.
        gather: each answer waits until this many requests are being answered at once (or
            `GATHER_TIMEOUT_S` passed): a client that sends them together reaches it whatever the
            machine's load, one that waits for an answer before it asks again never does.
        endless: path -> the `Content-Length` announced (None: none) for every `GET` of it without Range,
            answered 200 with the file and then spaces until the client hangs up (or `ENDLESS_CAP` bytes).
    """

    seed: int = 0
    fail_rate: float = 0.0
    truncate_rate: float = 0.0
    latency_s: float = 0.0
    jitter_s: float = 0.0
    corrupt: Mapping[str, int] = field(default_factory=dict)
    short: Mapping[str, int] = field(default_factory=dict)
    stall: Mapping[str, int] = field(default_factory=dict)
    gather: int = 0
    endless: Mapping[str, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("fail_rate", "truncate_rate"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"Invalid {name} ({value}). Expected 0 <= rate < 1.")
        for name in ("corrupt", "short", "stall", "endless"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))


@dataclass(frozen=True)
class Request:
    """One request the server answered.

    Attributes:
        method: `GET` or `HEAD`.
        path: the dataset-relative path asked for (no leading slash).
        byte_range: the `Range` header, or None.
        status: the status sent.
        fault: the fault injected, or None.
        complete: whether the whole promised body was sent, correct.
    """

    method: str
    path: str
    byte_range: str | None
    status: int
    fault: Fault | None
    complete: bool


class QuietServer(http.server.ThreadingHTTPServer):
    """A threaded HTTP server that does not print a traceback when a client goes away mid-answer (a test
    killed it, or it gave up on a slow answer): that is the client's business, not a server error."""

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


# How long an answer waits for `Faults.gather` requests at once before it goes anyway.
GATHER_TIMEOUT_S = 10.0


class RangeServer:
    """A threaded HTTP server over a directory, bound to 127.0.0.1 on a free port. Use as a context manager."""

    def __init__(self, root: str | os.PathLike[str], *, faults: Faults = Faults()) -> None:
        self.root = os.path.abspath(root)
        self.faults = faults
        self._released = threading.Event()
        self._changed = threading.Condition()
        self._log: list[Request] = []
        self._seen: Counter[tuple[str, ...]] = Counter()
        self._in_flight = 0
        self.max_in_flight = 0  # the most requests being answered at the same time
        self.endless_bytes = 0  # what `endless` answers sent, in all
        self._lock = threading.Lock()
        self._httpd = QuietServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        # A short poll interval only makes stop() quick (serve_forever checks for shutdown that often).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="range-server", daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL, e.g. `http://127.0.0.1:40123` (no trailing slash)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host if isinstance(host, str) else host.decode()}:{port}"

    def start(self) -> RangeServer:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release stalled requests, stop serving and close the socket."""
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> RangeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def release(self) -> None:
        """Let every stalled request finish its body."""
        self._released.set()

    @property
    def requests(self) -> list[Request]:
        """A copy of the request log, in answer order (an answer is logged before it is sent)."""
        with self._changed:
            return list(self._log)

    def count(
        self,
        path: str | None = None,
        *,
        method: str = "GET",
        ranged: bool | None = None,
        complete: bool | None = None,
    ) -> int:
        """How many logged requests match (None means any)."""
        return sum(
            1
            for r in self.requests
            if (path is None or r.path == path)
            and r.method == method
            and (ranged is None or (r.byte_range is not None) == ranged)
            and (complete is None or r.complete == complete)
        )

    def arrived(self, path: str, *, method: str = "GET") -> int:
        """How many requests for `path` arrived (counted before answering, stalled ones included)."""
        with self._changed:
            return self._seen[(method, path)]

    def wait_for(self, predicate: Callable[[RangeServer], bool], timeout_s: float = 10.0) -> None:
        """Block until `predicate(self)` holds (re-checked whenever a request starts or ends).

        Raises:
            TimeoutError: it did not hold within `timeout_s`.
        """
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self), timeout=timeout_s):
                raise TimeoutError(f"server condition not met within {timeout_s} s")

    # -- used by the handler -------------------------------------------------------------------------

    def _arrived(self, method: str, path: str, byte_range: str | None) -> tuple[int, int]:
        """Count a request in; returns (n-th request of this path, n-th of this exact request)."""
        with self._changed:
            self._seen[(method, path)] += 1
            self._seen[(method, path, byte_range or "")] += 1
            self._changed.notify_all()
            return self._seen[(method, path)], self._seen[(method, path, byte_range or "")]

    @contextlib.contextmanager
    def _answering(self) -> Iterator[None]:
        with self._changed:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.max_in_flight >= self.faults.gather, GATHER_TIMEOUT_S)
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    def _record(self, request: Request) -> None:
        with self._changed:
            self._log.append(request)
            self._changed.notify_all()

    def _choose_fault(self, method: str, path: str, byte_range: str | None) -> Fault | None:
        nth_path, nth_exact = self._arrived(method, path, byte_range)
        if path in self.faults.endless and byte_range is None:
            return "endless"
        if method == "GET":
            for name in ("stall", "short", "corrupt"):
                if nth_path <= getattr(self.faults, name).get(path, 0):
                    return name
        roll = random.Random(f"{self.faults.seed}:{method}:{path}:{byte_range}:{nth_exact}").random()
        if roll < self.faults.fail_rate:
            return "fail"
        if method == "GET" and roll < self.faults.fail_rate + self.faults.truncate_rate:
            return "truncate"
        return None


def _make_handler(server: RangeServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            """Keep test output quiet (the request log is `server.requests`)."""

        def do_HEAD(self) -> None:
            with server._answering():
                self._answer(body=False)

        def do_GET(self) -> None:
            with server._answering():
                self._answer(body=True)

        def _answer(self, *, body: bool) -> None:
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
            byte_range = self.headers.get("Range")
            fault = server._choose_fault(self.command, path, byte_range)
            if server.faults.latency_s or server.faults.jitter_s:
                time.sleep(
                    server.faults.latency_s
                    + server.faults.jitter_s * random.Random(f"{path}:{byte_range}").random()
                )
            full = os.path.join(server.root, path)
            if fault == "fail":
                return self._status(500, path, byte_range, fault)
            if ".." in path.split("/") or not os.path.isfile(full):
                return self._status(404, path, byte_range, None)
            with open(full, "rb") as f:
                data = f.read()
            if fault == "endless":
                return self._endless(path, byte_range, data, body=body)
            status, start, end = 200, 0, len(data)
            if byte_range is not None:
                parsed = _parse_range(byte_range, len(data))
                if parsed is None:
                    return self._status(416, path, byte_range, None)
                status, (start, end) = 206, parsed
            payload = data[start:end]
            self.send_response(status)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
            sent = _body_for(fault, payload)
            self.send_header("Content-Length", str(len(sent) if fault == "short" else len(payload)))
            if fault in ("truncate", "stall"):
                self.send_header("Connection", "close")
                self.close_connection = True
            complete = not body or (fault is None and len(sent) == len(payload))
            # Logged before any byte is sent, so a client that got its answer finds it in the log.
            server._record(Request(self.command, path, byte_range, status, fault, complete))
            self.end_headers()
            if body:
                self._send_body(fault, sent)

        def _endless(self, path: str, byte_range: str | None, data: bytes, *, body: bool) -> None:
            announced = server.faults.endless[path]
            server._record(Request(self.command, path, byte_range, 200, "endless", False))
            self.send_response(200)
            if announced is not None:
                self.send_header("Content-Length", str(announced))
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            if not body:
                return
            fill, sent = b" " * (1 << 16), 0
            with contextlib.suppress(OSError):  # the client hung up: what this fault waits for
                self.wfile.write(data)
                while sent < ENDLESS_CAP and not server._released.is_set():
                    self.wfile.write(fill)
                    sent += len(fill)
            with server._lock:
                server.endless_bytes += len(data) + sent

        def _send_body(self, fault: Fault | None, sent: bytes) -> None:
            if fault == "stall":
                self.wfile.write(sent)
                self.wfile.flush()
                server._released.wait()
                return
            self.wfile.write(sent)

        def _status(self, status: int, path: str, byte_range: str | None, fault: Fault | None) -> None:
            message = f"status {status}\n".encode()
            server._record(Request(self.command, path, byte_range, status, fault, False))
            self.send_response(status)
            self.send_header("Content-Length", str(len(message)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(message)

    return Handler


# Where an `endless` answer stops if the client never hangs up: a test's failure, not a full disk.
ENDLESS_CAP = 8 << 30


def _body_for(fault: Fault | None, payload: bytes) -> bytes:
    """The bytes actually sent for `payload` under `fault`."""
    if fault in ("truncate", "short", "stall"):
        return payload[: len(payload) // 2]
    if fault == "corrupt":
        return bytes(b ^ 0xFF for b in payload)
    return payload


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """`[start, end)` for a single `bytes=` range, or None when unsatisfiable."""
    match = _RANGE.match(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":
        start, end = max(0, size - int(last)), size
    else:
        start = int(first)
        end = size if last == "" else min(size, int(last) + 1)
    if start >= end:
        return None
    return start, end
