"""NodeCache in one process: fetch, publish, integrity, budget and LRU, counters, ranges, local sources."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.synchronize
import os
import pickle
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cache import (
    CacheError,
    CacheStats,
    FetchError,
    IntegrityError,
    NodeCache,
    counter_files,
    fetch,
    resolve,
    sum_cache_stats,
)
from cache.budget import disk_usage
from cache.store import FileLock
from tests.cache.conftest import UNIT
from tests.cache.helpers import FINGERPRINT, in_cache, part_files, read
from tests.servers import Faults


def _zero_seconds(stats: CacheStats) -> CacheStats:
    return dataclasses.replace(stats, fetch_seconds=0.0)


def test_fetch_downloads_once_then_serves_from_cache(source, serve, open_cache, cache_dir):
    root, files = source
    server = serve(root)
    cache = open_cache(server.url)
    spec = files["videos/cam/episode_000.mp4"]

    path = cache.fetch(spec.rel, size=spec.size, sha256=spec.sha256)
    again = cache.fetch(spec.rel, size=spec.size, sha256=spec.sha256)

    assert path == again == cache.path(spec.rel) == str(cache_dir / FINGERPRINT / spec.rel)
    assert read(path) == read(root / spec.rel)
    assert server.count(spec.rel) == 1
    assert _zero_seconds(cache.stats()) == CacheStats(hits=1, misses=1, bytes_fetched=spec.size)
    assert cache.stats().fetch_seconds > 0


def test_empty_file_is_cached(source, serve, open_cache):
    root, files = source
    cache = open_cache(serve(root).url)
    assert read(cache.fetch("empty.bin", size=0, sha256=files["empty.bin"].sha256)) == b""


def test_publish_is_atomic(source, serve, open_cache, cache_dir):
    root, files = source
    # The first answer sends half the body and stalls: the download is visibly in flight.
    server = serve(root, Faults(stall={"a.bin": 1}))
    cache = open_cache(server.url)
    future = cache.prefetch("a.bin", size=UNIT, sha256=files["a.bin"].sha256)
    server.wait_for(lambda s: s.arrived("a.bin") == 1)

    assert not os.path.exists(cache.path("a.bin"))
    assert len(part_files(cache_dir)) == 1
    server.release()  # the stalled body ends short; the remote retries it

    assert read(future.result(timeout=30)) == read(root / "a.bin")
    assert part_files(cache_dir) == []
    assert server.count("a.bin", complete=True) == 1


@pytest.mark.parametrize(
    ("fault", "check"),
    [("short", "size"), ("corrupt", "sha256")],
    ids=["size-mismatch", "sha256-mismatch"],
)
def test_wrong_bytes_are_fetched_again(source, serve, open_cache, fault, check):
    root, files = source
    server = serve(root, Faults(**{fault: {"a.bin": 1}}))
    cache = open_cache(server.url)
    spec = files["a.bin"]
    expect = {"size": spec.size} if check == "size" else {"sha256": spec.sha256}

    path = cache.fetch("a.bin", **expect)

    assert read(path) == read(root / "a.bin")
    assert server.count("a.bin") == 2
    assert cache.stats().integrity_retries == 1
    assert cache.stats().misses == 1


@pytest.mark.parametrize(
    ("fault", "check", "message"),
    [
        (
            "short",
            "size",
            r"Invalid file \(http://.+/a\.bin\): size 500 after 3 downloads\. Expected 1000 bytes\.",
        ),
        ("corrupt", "sha256", r"Invalid file \(http://.+/a\.bin\): sha256 [0-9a-f]{64} after 3 downloads\. "),
    ],
    ids=["size-mismatch", "sha256-mismatch"],
)
def test_remote_serving_wrong_bytes_raises(source, serve, open_cache, cache_dir, fault, check, message):
    root, files = source
    server = serve(root, Faults(**{fault: {"a.bin": 99}}))
    cache = open_cache(server.url)
    spec = files["a.bin"]
    expect = {"size": spec.size} if check == "size" else {"sha256": spec.sha256}

    with pytest.raises(IntegrityError, match=message):
        cache.fetch("a.bin", **expect)

    assert not os.path.exists(cache.path("a.bin"))
    assert part_files(cache_dir) == []
    assert server.count("a.bin") == 3


def _truncate(path: str) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def _replace_with_corrupt_copy(path: str) -> None:
    corrupt = path + ".tmp"
    with open(corrupt, "wb") as f:
        f.write(bytes(b ^ 1 for b in read(path)))
    os.replace(corrupt, path)


def _flip_in_place(path: str) -> None:
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(bytes([read(path)[0] ^ 1]))
    # A write a moment later gets a later mtime; within one clock tick the kernel may not tell.
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize(
    ("damage", "check"),
    [(_truncate, "size"), (_replace_with_corrupt_copy, "sha256"), (_flip_in_place, "sha256")],
    ids=["truncated", "replaced-by-corrupt-copy", "modified-in-place"],
)
def test_damaged_cached_file_is_fetched_again(source, serve, open_cache, damage, check):
    root, files = source
    server = serve(root)
    cache = open_cache(server.url)
    spec = files["b.bin"]
    expect = {"size": spec.size} if check == "size" else {"sha256": spec.sha256}
    damage(cache.fetch("b.bin", **expect))

    path = cache.fetch("b.bin", **expect)

    assert read(path) == read(root / "b.bin")
    assert server.count("b.bin") == 2


def test_sha256_is_hashed_once_per_published_version(source, serve, open_cache, monkeypatch):
    root, files = source
    cache = open_cache(serve(root).url)
    spec = files["c.bin"]
    cache.fetch("c.bin", sha256=spec.sha256)

    def no_hashing(fd: int) -> str:
        raise AssertionError("a verified version was hashed again")

    monkeypatch.setattr("cache.store.file_sha256", no_hashing)
    assert read(cache.fetch("c.bin", sha256=spec.sha256)) == read(root / "c.bin")


def test_missing_remote_file_raises(source, serve, open_cache):
    root, _files = source
    cache = open_cache(serve(root).url)
    with pytest.raises(
        FetchError, match=r"Invalid dataset path \(http://.+/nope\.bin\): the remote has no such file"
    ):
        cache.fetch("nope.bin")


@pytest.mark.parametrize("holder", ["this-process", "other-process"])
def test_eviction_never_removes_a_held_file(source, serve, open_cache, cache_dir, holder):
    root, _files = source
    cache = open_cache(serve(root).url, max_bytes=2 * UNIT)
    if holder == "this-process":
        pin = cache.hold("a.bin", size=UNIT)
    else:
        # Another process's hold is a shared flock on the file's lock (a second open file description).
        cache.fetch("a.bin", size=UNIT)
        lock = FileLock(str(cache_dir / ".lrs" / "locks" / FINGERPRINT / "a.bin.lock"))
        lock.acquire(shared=True)
        pin = lock
    with pin:
        for rel in ("b.bin", "c.bin", "d.bin"):
            cache.fetch(rel, size=UNIT)
            assert read(cache.path("a.bin")) == read(root / "a.bin")
            assert disk_usage(str(cache_dir)) <= 2 * UNIT
    assert cache.stats().evictions == 2  # b for c, c for d

    cache.fetch("b.bin", size=UNIT)  # a is free now, and least recently used
    assert not os.path.exists(cache.path("a.bin"))


def test_lru_order_is_shared_by_cache_objects(source, serve, open_cache):
    root, _files = source
    server = serve(root)
    first = open_cache(server.url, max_bytes=3 * UNIT)
    second = open_cache(server.url, max_bytes=3 * UNIT)  # stands for another process
    for rel in ("a.bin", "b.bin", "c.bin"):
        first.fetch(rel, size=UNIT)
    second.fetch("a.bin", size=UNIT)  # a hit elsewhere makes a recently used

    first.fetch("d.bin", size=UNIT)
    assert in_cache(first, "a.bin", "b.bin", "c.bin", "d.bin") == ["a.bin", "c.bin", "d.bin"]
    first.fetch("b.bin", size=UNIT)
    assert in_cache(first, "a.bin", "b.bin", "c.bin", "d.bin") == ["a.bin", "b.bin", "d.bin"]
    assert first.stats().evictions == 2


def test_unknown_sizes_are_settled_after_download(source, serve, open_cache, cache_dir):
    root, _files = source
    cache = open_cache(serve(root).url, max_bytes=2 * UNIT)
    for rel in ("a.bin", "b.bin", "c.bin"):
        cache.fetch(rel)
    assert disk_usage(str(cache_dir)) <= 2 * UNIT
    assert cache.stats().evictions == 1


def test_file_larger_than_budget_is_served_with_a_warning(source, serve, open_cache, caplog):
    root, files = source
    cache = open_cache(serve(root).url, max_bytes=2 * UNIT)
    rel = "data/chunk-000/file-000.parquet"
    with caplog.at_level(logging.WARNING, logger="cache.budget"):
        path = cache.fetch(rel, size=files[rel].size)
    assert read(path) == read(root / rel)
    assert re.search(
        r"over budget: 0 bytes in use or in flight \+ 4000 requested > max_bytes 2000", caplog.text
    )


def test_mismatch_on_a_file_this_process_holds_raises(source, serve, open_cache):
    root, files = source
    cache = open_cache(serve(root).url)
    with (
        cache.hold("a.bin"),
        pytest.raises(IntegrityError, match=r"a\.bin\): sha256 .+ this process holds it in use"),
    ):
        cache.fetch("a.bin", sha256=files["b.bin"].sha256)


def test_counters_aggregate_across_cache_objects(source, serve, open_cache, cache_dir):
    root, _files = source
    server = serve(root)
    one = open_cache(server.url, max_bytes=2 * UNIT)
    two = open_cache(server.url, max_bytes=2 * UNIT)
    one.fetch("a.bin", size=UNIT)
    one.fetch("a.bin", size=UNIT)
    two.fetch("a.bin", size=UNIT)
    two.fetch("b.bin", size=UNIT)
    two.fetch("c.bin", size=UNIT)
    one.read_range("d.bin", 0, 10)
    one.close()
    two.close()

    assert _zero_seconds(one.stats()) == CacheStats(hits=1, misses=1, bytes_fetched=UNIT + 10, range_reads=1)
    assert _zero_seconds(two.stats()) == CacheStats(
        hits=1, misses=2, bytes_fetched=2 * UNIT, evictions=1, bytes_evicted=UNIT
    )
    assert sum_cache_stats(cache_dir) == one.stats() + two.stats()
    assert sum_cache_stats(cache_dir, fingerprint="other") == CacheStats()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"counters": {"hits": 1, "bogus": 2}, "fingerprint": "f"}', r"KeyError\('bogus'\)"),
        (
            '{"counters": {"hits": "1"}, "fingerprint": "f"}',
            r"ValueError\(\"counter 'hits' is '1', expected a number\"\)",
        ),
        ('{"counters": {"hits": 1', r"JSONDecodeError"),  # cut short: a crash before it reached the disk
        ("", r"JSONDecodeError"),
        ("[1]", r"TypeError"),
    ],
    ids=["unknown-counter", "not-a-number", "truncated", "empty", "not-an-object"],
)
def test_sum_cache_stats_leaves_out_a_foreign_file_and_says_so(cache_dir, text, problem):
    """A reader of the stats never fails on a file that is not ours, and never miscounts silently."""
    stats_dir = cache_dir / ".lrs" / "stats"
    stats_dir.mkdir(parents=True)
    (stats_dir / "1-good.json").write_text('{"counters": {"hits": 2, "misses": 1}, "fingerprint": "f"}')
    (stats_dir / "1-x.json").write_text(text)
    with pytest.warns(
        counter_files.CountersWarning, match=rf"Invalid counters file \(.+1-x\.json\): {problem}"
    ):
        assert sum_cache_stats(cache_dir) == CacheStats(hits=2, misses=1)


def test_read_range_from_remote_then_from_cache(source, serve, open_cache):
    root, _files = source
    server = serve(root)
    cache = open_cache(server.url)
    rel = "data/chunk-000/file-000.parquet"
    data = read(root / rel)

    assert cache.read_range(rel, 100, 300) == data[100:300]
    assert server.count(rel, ranged=True) == 1
    assert not os.path.exists(cache.path(rel))  # ranges are not cached on disk

    cache.fetch(rel)
    assert cache.read_range(rel, 3990, 4000) == data[3990:]
    assert cache.read_range(rel, 7, 7) == b""  # costs nothing, counts nothing
    assert server.count(rel, ranged=True) == 1
    assert (cache.stats().range_reads, cache.stats().hits) == (1, 1)


@pytest.mark.parametrize(
    ("start", "end", "cached", "error", "message"),
    [
        (
            -1,
            5,
            False,
            ValueError,
            r"Invalid byte range \(\[-1, 5\)\) for a\.bin\. Expected ints 0 <= start <= end\.",
        ),
        (6, 5, False, ValueError, r"Invalid byte range \(\[6, 5\)\)"),
        (
            0,
            UNIT + 1,
            True,
            ValueError,
            r"Invalid byte range \(\[0, 1001\)\) for .+/a\.bin of 1000 bytes\. Expected end <= size\.",
        ),
        (0, UNIT + 1, False, FetchError, r"Reading http://.+/a\.bin \[0:1001\) failed after 8 attempts"),
    ],
    ids=["negative", "reversed", "past-end-cached", "past-end-remote"],
)
def test_read_range_rejects_bad_ranges(source, serve, open_cache, start, end, cached, error, message):
    root, _files = source
    cache = open_cache(serve(root).url)
    if cached:
        cache.fetch("a.bin")
    with pytest.raises(error, match=message):
        cache.read_range("a.bin", start, end)


def test_local_source_is_served_in_place(source, cache_dir):
    root, files = source
    spec = files["a.bin"]
    with NodeCache(cache_dir, resolve(str(root)), fingerprint=FINGERPRINT) as cache:
        assert cache.fetch("a.bin", size=spec.size) == str(root / "a.bin")
        with cache.hold("a.bin", size=spec.size) as held:
            assert held == str(root / "a.bin")
        assert cache.read_range("a.bin", 10, 20) == read(root / "a.bin")[10:20]
        assert cache.prefetch("a.bin").result() == str(root / "a.bin")
        assert cache.stats() == CacheStats(hits=4)
    assert os.listdir(cache_dir / FINGERPRINT) == []


@pytest.mark.parametrize(
    ("fast_path", "with_sha256", "file_url"),
    [(False, False, False), (True, False, True), (True, True, True)],
    ids=["fast-path-off", "file-url", "file-url-sha256"],
)
def test_local_source_is_copied_when_needed(source, cache_dir, fast_path, with_sha256, file_url):
    # A file:// URL stands for remote storage (a network filesystem, a bucket stand-in): copied, not
    # read in place.
    root, files = source
    kwargs = {"sha256": files["a.bin"].sha256} if with_sha256 else {}
    url = f"file://{root}" if file_url else str(root)
    with NodeCache(cache_dir, resolve(url), fingerprint=FINGERPRINT, local_fast_path=fast_path) as cache:
        path = cache.fetch("a.bin", **kwargs)
        assert path == cache.path("a.bin") != str(root / "a.bin")
        assert read(path) == read(root / "a.bin")
        assert cache.stats().misses == 1


def test_a_local_source_is_hashed_in_place_once_per_process(source, cache_dir):
    """A file read in place is checked too: the first time a process (a cache object's process state)
    opens it, whatever its mtime says; never copied."""
    root, files = source
    spec = files["a.bin"]
    copy = cache_dir.parent / "copy"
    shutil.copytree(root, copy)
    with NodeCache(cache_dir, resolve(str(copy)), fingerprint=FINGERPRINT) as cache:
        assert cache.fetch("a.bin", size=spec.size, sha256=spec.sha256) == str(copy / "a.bin")
        assert cache.prefetch("a.bin", sha256=spec.sha256).result() == str(copy / "a.bin")
        st = os.stat(copy / "a.bin")
        with open(copy / "a.bin", "r+b") as f:
            f.write(bytes([read(copy / "a.bin")[0] ^ 1]))
        os.utime(copy / "a.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.listdir(cache_dir / FINGERPRINT) == []
    with NodeCache(cache_dir, resolve(str(copy)), fingerprint=FINGERPRINT) as cache:
        with pytest.raises(
            IntegrityError, match=rf"Invalid file \({copy / 'a.bin'}\): sha256 [0-9a-f]{{64}}, "
        ):
            cache.fetch("a.bin", sha256=spec.sha256)
        with pytest.raises(IntegrityError, match=r"Expected the file the index lists"):
            cache.prefetch("a.bin", sha256=spec.sha256).result()


def test_local_source_of_wrong_size_raises(source, cache_dir):
    root, _files = source
    with (
        NodeCache(cache_dir, resolve(str(root)), fingerprint=FINGERPRINT) as cache,
        pytest.raises(IntegrityError, match=r"Invalid file \(.+/a\.bin\): size 1000\. Expected 7 bytes\."),
    ):
        cache.fetch("a.bin", size=7)


def test_prefetch_requests_share_one_future(source, serve, open_cache):
    root, _files = source
    server = serve(root, Faults(stall={"a.bin": 1}))
    cache = open_cache(server.url)
    first = cache.prefetch("a.bin", size=UNIT)
    second = cache.prefetch("a.bin", size=UNIT)
    assert first is second
    server.wait_for(lambda s: s.arrived("a.bin") == 1)
    server.release()
    assert first.result(timeout=30) == cache.fetch("a.bin", size=UNIT)
    assert server.count("a.bin", complete=True) == 1


def test_concurrent_fetches_download_once(source, serve, open_cache):
    root, files = source
    server = serve(root, Faults(latency_s=0.05))
    caches = [open_cache(server.url) for _ in range(4)]  # separate lock descriptors, like processes
    spec = files["c.bin"]
    with ThreadPoolExecutor(8) as pool:
        paths = set(
            pool.map(lambda i: caches[i % 4].fetch("c.bin", size=spec.size, sha256=spec.sha256), range(8))
        )
    assert paths == {caches[0].path("c.bin")}
    assert server.count("c.bin") == 1


def test_closed_cache_refuses_work(source, serve, open_cache):
    root, _files = source
    cache = open_cache(serve(root).url)
    cache.close()
    with pytest.raises(
        CacheError, match=r"Invalid use of a closed cache \(NodeCache\(.+\)\)\. Expected calls before close"
    ):
        cache.prefetch("a.bin")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fingerprint": ".lrs"}, r"Invalid fingerprint \('\.lrs'\)"),
        ({"max_bytes": 0}, r"Invalid max_bytes \(0\)\. Expected a positive number of bytes or None\."),
        ({"max_workers": 0}, r"Invalid max_workers \(0\)\. Expected an integer >= 1\."),
    ],
    ids=["fingerprint", "max-bytes", "max-workers"],
)
def test_invalid_options_raise(source, cache_dir, options, message):
    root, _files = source
    with pytest.raises(ValueError, match=message):
        NodeCache(cache_dir, resolve(str(root)), **{"fingerprint": FINGERPRINT, **options})


def test_a_url_is_no_cache_dir_and_a_file_url_is_its_path(source, tmp_path, monkeypatch):
    root, _files = source
    monkeypatch.chdir(tmp_path)
    for url in ("s3://bucket/cache", "hf://buckets/me/cache", "file://host/cache"):
        with pytest.raises(
            ValueError, match=r"Invalid cache_dir \(.*\): a URL\. Expected a local directory; "
        ):
            NodeCache(url, resolve(str(root)), fingerprint=FINGERPRINT)
    assert os.listdir(tmp_path) == []
    with NodeCache((tmp_path / "my cache").as_uri(), resolve(str(root)), fingerprint=FINGERPRINT) as cache:
        assert cache.cache_dir == str(tmp_path / "my cache")


@pytest.mark.parametrize(
    ("rel", "kwargs", "message"),
    [
        ("../a.bin", {}, r"Invalid dataset path \('\.\./a\.bin'\)\. Expected a relative POSIX path"),
        ("/a.bin", {}, r"Invalid dataset path \('/a\.bin'\)"),
        ("a.bin", {"size": -1}, r"Invalid size \(-1\)"),
        ("a.bin", {"sha256": "ABC"}, r"Invalid sha256 \('ABC'\)\. Expected 64 lowercase hex digits\."),
    ],
    ids=["dotdot", "absolute", "size", "sha256"],
)
def test_invalid_requests_raise(source, serve, open_cache, rel, kwargs, message):
    root, _files = source
    cache = open_cache(serve(root).url)
    with pytest.raises(ValueError, match=message):
        cache.fetch(rel, **kwargs)


def test_pickled_cache_works_in_the_same_directory(source, serve, open_cache):
    root, _files = source
    server = serve(root)
    cache = open_cache(server.url, max_bytes=5 * UNIT)
    cache.fetch("a.bin")
    clone = pickle.loads(pickle.dumps(cache))
    try:
        assert clone.fetch("a.bin") == cache.path("a.bin")
        assert clone.stats() == CacheStats(hits=1)
    finally:
        clone.close()
    assert server.count("a.bin") == 1


def _fetch_in_forked_child(cache: NodeCache, rel: str, expected: bytes) -> None:
    path = cache.fetch(rel)
    stats = cache.stats()
    if read(path) != expected or (stats.hits, stats.misses) != (0, 1):
        raise SystemExit(f"wrong bytes or counters in the child: {stats}")
    cache.close()


def test_forked_child_gets_its_own_remote_and_counters(source, serve, open_cache):
    root, _files = source
    server = serve(root)
    cache = open_cache(server.url)
    cache.fetch("a.bin")  # the parent's event loop and threads now exist
    child = multiprocessing.get_context("fork").Process(
        target=_fetch_in_forked_child, args=(cache, "b.bin", read(root / "b.bin"))
    )
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert cache.stats().misses == 1  # the child's download is not counted here
    assert read(cache.path("b.bin")) == read(root / "b.bin")


def _wait_for(
    event: multiprocessing.synchronize.Event, started: multiprocessing.synchronize.Event | None = None
) -> None:
    if started is not None:
        started.set()
    event.wait(60)


def test_forked_child_does_not_keep_its_parents_pins(source, serve, open_cache):
    root, _files = source
    cache = open_cache(serve(root).url, max_bytes=2 * UNIT)
    fork = multiprocessing.get_context("fork")
    done, started = fork.Event(), fork.Event()
    child = fork.Process(target=_wait_for, args=(done, started))
    with cache.hold("a.bin", size=UNIT):
        child.start()  # the child inherits the descriptor of the parent's shared lock on a
    # The child closes its copy as it starts (an at-fork hook, before its target runs): on a loaded machine
    # that is later than `start()` returns, so what is guaranteed is the state once the child runs.
    assert started.wait(60)
    try:
        cache.fetch("b.bin", size=UNIT)
        cache.fetch("c.bin", size=UNIT)  # a is released by the parent: evictable though the child lives
        assert not os.path.exists(cache.path("a.bin"))
    finally:
        done.set()
        child.join(60)
    assert child.exitcode == 0


def test_counters_that_cannot_be_written_do_not_fail_a_read(tmp_path: Path) -> None:
    """The counters are advisory: a cache directory whose stats cannot be written (removed under a
    running download, a full disk) loses the figures, not the read."""
    from cache.cache_stats import CacheCounters

    (tmp_path / "gone").write_bytes(b"")  # a file where the cache directory should be: no write works
    counters = CacheCounters(str(tmp_path / "gone"), "fp")
    counters.add(hits=1)
    assert counters.snapshot().hits == 1
    (tmp_path / "gone").unlink()
    counters.add(hits=1)
    counters.flush()  # written once it can be, with everything counted
    assert sum_cache_stats(tmp_path / "gone").hits == 2


def test_downloads_under_a_budget_list_no_directory(source, serve, open_cache, monkeypatch):
    """The budget's bookkeeping is the ledger: once it exists, no download, eviction or hit lists a
    directory (the old budget scanned the whole cache for every download)."""
    root, _files = source
    cache = open_cache(serve(root).url, max_bytes=2 * UNIT)
    cache.fetch("a.bin", size=UNIT)  # the ledger is built here, from an empty directory

    def no_listing(*args: object) -> None:
        raise AssertionError("a directory was listed")

    monkeypatch.setattr(os, "scandir", no_listing)
    monkeypatch.setattr(os, "listdir", no_listing)
    for rel in ("b.bin", "c.bin", "d.bin", "a.bin", "b.bin"):
        cache.fetch(rel, size=UNIT)
    with cache.hold("b.bin", size=UNIT):
        pass
    assert cache.stats().evictions == 4
    assert in_cache(cache, "a.bin", "b.bin", "c.bin", "d.bin") == ["a.bin", "b.bin"]


def test_counters_are_written_once_an_interval_not_per_download(
    source, serve, open_cache, cache_dir, monkeypatch
):
    root, _files = source
    cache = open_cache(serve(root).url)
    writes: list[str] = []
    real = counter_files.atomic_write
    monkeypatch.setattr(
        counter_files, "atomic_write", lambda path, data, **kw: (writes.append(path), real(path, data, **kw))
    )
    monkeypatch.setattr(counter_files, "FLUSH_INTERVAL_S", 3600.0)  # a slow machine takes no second
    for rel in ("a.bin", "b.bin", "c.bin", "d.bin"):
        cache.fetch(rel)
        cache.fetch(rel)
    assert len(writes) == 1  # the first add; the rest waits for the interval (was: every download)
    cache.close()
    assert sum_cache_stats(cache_dir) == cache.stats()  # all of it written at close


def _hit_and_exit(cache: NodeCache, rels: list[str]) -> None:
    # The first hit is written at once, the second not before a second has passed: it is pending when
    # the process ends (no close).
    for rel in rels:
        cache.fetch(rel, size=UNIT)


def test_uses_and_counters_of_an_exiting_process_are_written(source, serve, open_cache, cache_dir):
    root, _files = source
    cache = open_cache(serve(root).url, max_bytes=3 * UNIT)
    for rel in ("a.bin", "b.bin", "c.bin"):
        cache.fetch(rel, size=UNIT)
    cache.flush()
    child = multiprocessing.get_context("spawn").Process(
        target=_hit_and_exit, args=(cache, ["b.bin", "a.bin"])
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert sum_cache_stats(cache_dir).hits == 2  # the child's counters, written as it exited
    cache.fetch("d.bin", size=UNIT)  # b then a were used in the child: c is the least recently used
    assert in_cache(cache, "a.bin", "b.bin", "c.bin", "d.bin") == ["a.bin", "b.bin", "d.bin"]


def test_a_temp_file_unknown_to_the_ledger_is_swept_once_per_directory(source, serve, open_cache, cache_dir):
    """Temps of dead downloads are found through their reservations; one the ledger never knew (an
    older version's) goes at the first download into its directory."""
    root, _files = source
    cache = open_cache(serve(root).url)
    cache.fetch("a.bin")  # the ledger is built now
    video = "videos/cam/episode_000.mp4"
    stale = cache_dir / FINGERPRINT / "videos" / "cam" / ".episode_000.mp4.10.0123456789ab.lrs-part"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * 10)
    assert read(cache.fetch(video)) == read(root / video)
    assert part_files(cache_dir) == []


@pytest.mark.parametrize("announced", [10**11, None], ids=["lying-length", "no-length"])
def test_a_download_is_cut_one_byte_past_the_listed_size(source, serve, open_cache, cache_dir, announced):
    """A video listed at 1,000 bytes served as endless bytes: at most 1,001 bytes land on disk per try."""
    root, files = source
    server = serve(root, Faults(endless={"videos/cam/episode_000.mp4": announced}))
    cache = open_cache(server.url)
    with pytest.raises(
        IntegrityError,
        match=r"episode_000\.mp4\): size 1001 or more after 3 downloads\. Expected 1000 bytes\.",
    ):
        cache.fetch("videos/cam/episode_000.mp4", size=files["videos/cam/episode_000.mp4"].size)
    assert part_files(cache_dir) == []
    assert cache.stats().bytes_fetched == 3 * 1001


def test_a_download_of_an_unlisted_size_is_cut_at_the_unlisted_bound(source, serve, open_cache, monkeypatch):
    monkeypatch.setattr(fetch, "MAX_UNLISTED_FILE_BYTES", 5000)
    root, _files = source
    server = serve(root, Faults(endless={"a.bin": None}))
    cache = open_cache(server.url)
    with pytest.raises(
        IntegrityError, match=r"a\.bin\): size 5001 or more, over the 5000 bytes a file no index"
    ):
        cache.fetch("a.bin")
    assert cache.stats().bytes_fetched == 3 * 5001
