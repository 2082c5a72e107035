"""The prewarm runner: in-order, bounded submissions; hits on rerun (resume); errors naming the file;
need order left in the LRU; the progress bar."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from cache import CacheStats, FetchError, IntegrityError
from cache.ledger import ledger_of
from cache.ordered_fetch import FetchSummary, FileRequest, fetch_in_order
from tests.cache.helpers import FINGERPRINT, SourceFile, read
from tests.servers import Faults

ORDER = ["c.bin", "videos/cam/episode_000.mp4", "a.bin", "data/chunk-000/file-000.parquet", "d.bin", "b.bin"]


def requests(files: dict[str, SourceFile], names: list[str] = ORDER) -> list[FileRequest]:
    return [FileRequest(n, files[n].size, files[n].sha256) for n in names]


def gets(server, names: list[str] = ORDER) -> list[str]:
    return [r.path for r in server.requests if r.method == "GET" and r.path in names]


def test_fetches_every_file_in_order(source, serve, open_cache) -> None:
    root, files = source
    server = serve(root)
    cache = open_cache(server.url)
    summary = fetch_in_order(cache, requests(files), ahead=1, progress=False)
    assert gets(server) == ORDER  # one at a time: arrival order is list order
    for name in ORDER:
        assert read(cache.path(name)) == read(root / name)
    total = sum(files[n].size for n in ORDER)
    assert summary == FetchSummary(len(ORDER), total, len(ORDER), total, 0, summary.seconds)


def test_rerun_fetches_nothing_and_an_interrupted_run_resumes(source, serve, open_cache) -> None:
    root, files = source
    server = serve(root)
    cache = open_cache(server.url)
    first = fetch_in_order(cache, requests(files, ORDER[:2]), progress=False)  # an interrupted run
    rest = fetch_in_order(cache, requests(files), progress=False)
    again = fetch_in_order(cache, requests(files), progress=False)
    assert (first.files_fetched, first.files_cached) == (2, 0)
    assert (rest.files_fetched, rest.files_cached) == (len(ORDER) - 2, 2)
    assert rest.bytes_fetched == sum(files[n].size for n in ORDER[2:])
    assert (again.files_fetched, again.bytes_fetched, again.files_cached) == (0, 0, len(ORDER))
    assert sorted(gets(server)) == sorted(ORDER)


class GatedCache:
    """A stand-in for NodeCache whose downloads finish only when the test completes them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.submitted: list[tuple[str, Future[str]]] = []
        self.most_pending = 0
        self.changed = threading.Condition()

    def prefetch(self, rel: str, *, size: int | None = None, sha256: str | None = None) -> Future[str]:
        with self.changed:
            pending = sum(not f.done() for _, f in self.submitted)
            self.most_pending = max(self.most_pending, pending + 1)
            future: Future[str] = Future()
            self.submitted.append((rel, future))
            self.changed.notify_all()
        return future

    def stats(self) -> CacheStats:
        return CacheStats()

    def path(self, rel: str) -> str:
        return str(self.root / rel)

    def mark_used(self, rel: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def wait_submitted(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.submitted) >= count, timeout=10)


@pytest.mark.parametrize("ahead", [1, 2, 4], ids=lambda a: f"ahead{a}")
def test_submissions_stay_at_most_ahead_of_the_oldest_unfinished(tmp_path: Path, ahead: int) -> None:
    cache = GatedCache(tmp_path)
    names = [f"f{i}.bin" for i in range(7)]
    with ThreadPoolExecutor(1) as runner:
        run = runner.submit(
            fetch_in_order, cache, [FileRequest(n, 1) for n in names], ahead=ahead, progress=False
        )
        for index in range(len(names)):
            cache.wait_submitted(min(len(names), index + ahead))
            cache.submitted[index][1].set_result(cache.path(names[index]))
        summary = run.result(timeout=10)
    assert [rel for rel, _ in cache.submitted] == names
    assert cache.most_pending == ahead
    assert (summary.files, summary.bytes) == (7, 7)


def test_a_slow_file_does_not_hold_back_the_ones_after_it(tmp_path: Path) -> None:
    # The bound is on files in flight: while the first file is still downloading, the rest go on.
    cache = GatedCache(tmp_path)
    names = [f"f{i}.bin" for i in range(6)]
    with ThreadPoolExecutor(1) as runner:
        run = runner.submit(
            fetch_in_order, cache, [FileRequest(n, 1) for n in names], ahead=2, progress=False
        )
        for index in range(1, len(names)):
            cache.wait_submitted(index + 1)
            cache.submitted[index][1].set_result(cache.path(names[index]))
        cache.submitted[0][1].set_result(cache.path(names[0]))
        run.result(timeout=10)
    assert [rel for rel, _ in cache.submitted] == names and cache.most_pending == 2


def test_of_several_failures_the_earliest_file_is_raised(tmp_path: Path) -> None:
    cache = GatedCache(tmp_path)
    names = ["f0.bin", "f1.bin", "f2.bin"]
    with ThreadPoolExecutor(1) as runner:
        run = runner.submit(
            fetch_in_order, cache, [FileRequest(n, 1) for n in names], ahead=3, progress=False
        )
        cache.wait_submitted(3)
        cache.submitted[2][1].set_exception(FetchError("Invalid dataset path (f2.bin)"))
        cache.submitted[1][1].set_result(cache.path("f1.bin"))
        cache.submitted[0][1].set_exception(FetchError("Invalid dataset path (f0.bin)"))
        with pytest.raises(FetchError, match=r"\(f0\.bin\)"):
            run.result(timeout=10)


def test_missing_file_raises_naming_it_after_the_files_before_it(source, serve, open_cache) -> None:
    root, files = source
    server = serve(root)
    cache = open_cache(server.url)
    listed = requests(files)
    listed.insert(2, FileRequest("videos/cam/episode_999.mp4", 10))
    with pytest.raises(FetchError, match=r"Invalid dataset path \(http://.*/videos/cam/episode_999\.mp4\)"):
        fetch_in_order(cache, listed, ahead=1, progress=False)
    assert [os.path.exists(cache.path(r.path)) for r in listed] == [True, True] + [False] * (len(listed) - 2)


def test_corrupt_file_raises_an_integrity_error_naming_it(source, serve, open_cache) -> None:
    root, files = source
    server = serve(root, Faults(corrupt={"a.bin": 10}))
    cache = open_cache(server.url, integrity_attempts=2)
    with pytest.raises(
        IntegrityError, match=r"Invalid file \(http://.*/a\.bin\): sha256 [0-9a-f]{64} after 2"
    ):
        fetch_in_order(cache, requests(files), progress=False)


def test_files_needed_first_are_the_most_recently_used(source, serve, open_cache) -> None:
    root, files = source
    cache = open_cache(serve(root).url)
    fetch_in_order(cache, requests(files), ahead=1, progress=False)
    lru = [key.removeprefix(f"{FINGERPRINT}/") for key, _size in ledger_of(cache.cache_dir).snapshot().files]
    assert lru == ORDER[::-1]  # the file needed first is evicted last


def test_progress_bar_counts_bytes_with_a_rate(source, serve, open_cache, capsys) -> None:
    root, files = source
    cache = open_cache(serve(root).url)
    fetch_in_order(cache, requests(files), progress=True, desc="warming")
    err = capsys.readouterr().err
    assert "warming" in err and "B/s" in err and f"{len(ORDER)}/{len(ORDER)} files" in err


@pytest.mark.parametrize(
    ("listed", "ahead", "message"),
    [
        ([FileRequest("a.bin"), FileRequest("a.bin")], 1, r"Invalid file list: a\.bin is listed twice\."),
        ([FileRequest("a.bin")], 0, r"Invalid ahead \(0\)\. Expected an integer >= 1\."),
    ],
    ids=["twice", "ahead"],
)
def test_invalid_arguments_raise(source, serve, open_cache, listed, ahead, message) -> None:
    cache = open_cache(serve(source[0]).url)
    with pytest.raises(ValueError, match=message):
        fetch_in_order(cache, listed, ahead=ahead, progress=False)
