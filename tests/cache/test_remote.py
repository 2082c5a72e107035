"""`Remote.cat_many`: small files read concurrently, each failure kept and raised again where the file is
used (never read twice)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cache.backoff import RetryPolicy
from cache.errors import FetchError
from cache.remote import resolve
from tests.servers import Faults, RangeServer

FILES = {"a.json": b'{"a": 1}', "dir/b.bin": bytes(range(256)) * 4, "empty": b""}
WANTED = ["a.json", "dir/b.bin", "empty", "missing.json"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("remote")
    for rel, data in FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)
    return base


def _check(reads) -> None:  # type: ignore[no-untyped-def]
    for rel, data in FILES.items():
        assert reads.cat(rel) == data
    with pytest.raises(FileNotFoundError):
        reads.cat("missing.json")


def test_cat_many_reads_every_file_and_keeps_what_failed(root: Path) -> None:
    remote = resolve(str(root))
    _check(remote.cat_many(WANTED))
    assert remote.cat_many([]).cat("a.json") == FILES["a.json"]  # not asked for: read on demand


@pytest.mark.integration
def test_cat_many_over_http_is_concurrent_retries_and_reads_each_file_once(root: Path) -> None:
    with RangeServer(root, faults=Faults(latency_s=0.2, fail_rate=0.3, seed=5)) as server:
        reads = resolve(server.url).cat_many(WANTED)
        asked = len(server.requests)
        _check(reads)
        assert len(server.requests) == asked, "a file was read again after cat_many"
        assert server.max_in_flight >= 3
        # seed 5 fails the first GET of dir/b.bin and of empty (the draw is a pure function of the path)
        assert sum(r.status == 500 for r in server.requests) >= 2


def test_a_file_that_keeps_failing_raises_its_fetch_error_once(root: Path) -> None:
    with RangeServer(root, faults=Faults(fail_rate=0.999)) as server:
        remote = replace(
            resolve(server.url, probe_ranges=False),
            retry=RetryPolicy(attempts=2, base_delay_s=0.0, max_delay_s=0.0),
        )
        reads = remote.cat_many(["a.json"])
        asked = server.count()
        with pytest.raises(FetchError):
            reads.cat("a.json")
        assert server.count() == asked == 2  # its two attempts, not retried again by the caller


@pytest.mark.parametrize("announced", [None, 10**11], ids=["no-length", "lying-length"])
def test_a_bounded_cat_stops_an_endless_body_one_byte_past_its_limit(
    root: Path, announced: int | None
) -> None:
    with RangeServer(root, faults=Faults(endless={"a.json": announced})) as server:
        remote = resolve(server.url, probe_ranges=False)
        assert remote.cat("a.json", limit=1000) == FILES["a.json"] + b" " * (1001 - len(FILES["a.json"]))
        assert len(remote.cat_many(["a.json"], limits={"a.json": 5000}).cat("a.json")) == 5001
        assert len(remote.bounded({"a.json": 70}).cat("a.json")) == 71


def test_a_bounded_cat_of_a_small_file_reads_it_whole(root: Path) -> None:
    remote = resolve(str(root))
    assert remote.cat("dir/b.bin", limit=1 << 20) == FILES["dir/b.bin"]
    assert len(remote.cat("dir/b.bin", limit=10)) == 11


def test_bounded_and_ranged_reads_over_http_retry_server_errors_and_keep_the_filesystem_headers(
    root: Path,
) -> None:
    with RangeServer(root, faults=Faults(fail_rate=0.3, seed=5)) as server:
        remote = resolve(server.url, storage_options={"headers": {"X-Token": "t"}}, probe_ranges=False)
        assert (
            remote.cat_many(WANTED, limits={"a.json": 100, "dir/b.bin": 5000}).cat("dir/b.bin")
            == FILES["dir/b.bin"]
        )
        assert remote.cat_range("dir/b.bin", 10, 20) == FILES["dir/b.bin"][10:20]
        assert sum(r.status == 500 for r in server.requests) >= 1
