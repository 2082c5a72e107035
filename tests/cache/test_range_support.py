"""An HTTP server that ignores Range requests (`python -m http.server`) is named when the dataset is
opened, by every command and by the reader, in one line and with exit 3; a ranged read that gets a whole
file fails at once instead of being retried as "truncated"."""

from __future__ import annotations

import functools
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner

from cache.errors import FetchError
from cache.remote import Remote, resolve
from reader.errors import DatasetError
from reshard.cli import cli
from tests.servers import RangeServer

MESSAGE = r"ignores HTTP Range requests \(answered \d+ bytes to a request for 1\)"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        """No access log on stderr (the command's output is what is checked)."""


@pytest.fixture(scope="module")
def plain_server(sample_resharded_ds: Path) -> Iterator[str]:
    """The standard library's file server, as `python -m http.server` runs it: it ignores Range."""
    handler = functools.partial(_Quiet, directory=str(sample_resharded_ds))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_resolve_names_a_server_that_ignores_range(plain_server: str) -> None:
    started = time.monotonic()
    with pytest.raises(FetchError, match=MESSAGE) as info:
        resolve(plain_server)
    assert "meta/info.json" in str(info.value) and "python -m http.server" in str(info.value)
    assert time.monotonic() - started < 2  # not retried


def test_a_ranged_read_that_gets_the_whole_file_is_not_retried(plain_server: str) -> None:
    remote = Remote(url=plain_server, fs=fsspec.filesystem("http"), root=plain_server)  # no probe
    started = time.monotonic()
    with pytest.raises(
        FetchError, match=r"ignores HTTP Range requests \(answered \d+ bytes to a request for 10\)"
    ):
        remote.cat_range("meta/info.json", 5, 15)
    assert time.monotonic() - started < 2


def test_a_server_with_range_support_passes_with_one_small_request(sample_resharded_ds: Path) -> None:
    with RangeServer(sample_resharded_ds) as server:
        resolve(server.url)
        assert [(r.path, r.byte_range) for r in server.requests] == [("meta/info.json", "bytes=0-0")]


@pytest.mark.parametrize("command", ["describe", "inspect", "verify", "prewarm"])
def test_every_command_says_so_in_one_line(plain_server: str, tmp_path: Path, command: str) -> None:
    args = [command, plain_server] + (["--cache-dir", str(tmp_path / "c")] if command == "prewarm" else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 3, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "ignores HTTP Range requests" in lines[0]


def test_the_reader_says_so_when_it_opens(plain_server: str) -> None:
    from reader import EpisodeStream

    with pytest.raises((FetchError, DatasetError), match=MESSAGE):
        EpisodeStream(plain_server)
