"""Several processes on one cache directory against a faulty loopback HTTP server; SIGKILLed processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from cache import NodeCache, sum_cache_stats
from cache.budget import disk_usage
from cache.ledger import ledger_of
from cache.store import FileLock
from tests.cache import workers
from tests.cache.conftest import UNIT
from tests.cache.helpers import FINGERPRINT, fast_remote, in_cache, part_files, read, write_files
from tests.servers import Faults

SPAWN = multiprocessing.get_context("spawn")
PROCESSES = 4
ACCESSES = 48
# 40 files of 2-6 kB: a working set of about 160 kB.
CHURN_SIZES = {f"videos/cam_{i % 2}/episode_{i:03d}.mp4": 2000 + 100 * i for i in range(40)}
LARGEST = max(CHURN_SIZES.values())
# Each process pins at most one file and downloads at most 3 (the hold's own + 2 prefetch threads), so
# this budget always fits what is in use and in flight, yet holds only about half the working set.
TIGHT_BUDGET = PROCESSES * 3 * LARGEST + LARGEST


@contextmanager
def _peak_usage(cache_dir: Path) -> Iterator[Callable[[], int]]:
    """Sample the cache's disk use under the budget lock (between reservations) until the block ends."""
    peak, stop = [0], threading.Event()
    lock_path = str(cache_dir / ".lrs" / "budget.lock")

    def sample() -> None:
        while not stop.wait(0.002):
            with FileLock(lock_path) as lock:
                lock.acquire(shared=False)
                peak[0] = max(peak[0], disk_usage(str(cache_dir)))

    sampler = threading.Thread(target=sample, name="usage-sampler")
    sampler.start()
    try:
        yield lambda: peak[0]
    finally:
        stop.set()
        sampler.join()


def _run(processes: list[multiprocessing.process.BaseProcess], timeout_s: float = 60.0) -> list[int | None]:
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout_s)
    for p in processes:
        if p.is_alive():  # a deadlock: fail, but leave nothing running
            p.kill()
            p.join()
    return [p.exitcode for p in processes]


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("max_bytes", [None, TIGHT_BUDGET], ids=["no-budget", "budget-below-working-set"])
def test_processes_share_one_cache_under_faults(tmp_path, serve, cache_dir, max_bytes):
    source = tmp_path / "source"
    files = list(write_files(source, CHURN_SIZES, seed=7).values())
    server = serve(source, Faults(seed=3, fail_rate=0.1, truncate_rate=0.1, latency_s=0.002))
    args = (server.url, str(cache_dir), str(source), files)
    processes = [
        SPAWN.Process(
            target=workers.churn,
            args=args,
            kwargs={"seed": seed, "accesses": ACCESSES, "max_bytes": max_bytes},
        )
        for seed in range(PROCESSES)
    ]
    cache_dir.mkdir()
    with _peak_usage(cache_dir) as peak:
        exit_codes = _run(processes)

    assert exit_codes == [0] * PROCESSES  # every byte read was the source's byte
    stats = sum_cache_stats(cache_dir)
    downloads = server.count(ranged=False, complete=True)
    assert stats.misses == downloads  # every miss is one successful download, no more
    assert stats.range_reads == server.count(ranged=True, complete=True)
    assert stats.budget_overruns == 0
    assert part_files(cache_dir) == []
    accessed = {s.rel for seed in range(PROCESSES) for s in workers.access_order(files, seed, ACCESSES)}
    if max_bytes is None:
        assert stats.evictions == 0
        assert {s.rel: server.count(s.rel, ranged=False, complete=True) for s in files} == {
            s.rel: int(s.rel in accessed) for s in files
        }
    else:
        # A file is downloaded again only after it was evicted.
        assert len(accessed) <= downloads <= len(accessed) + stats.evictions
        assert stats.evictions > 0 and stats.hits > 0 and stats.range_reads > 0
        assert peak() <= max_bytes
        assert disk_usage(str(cache_dir)) <= max_bytes
    # Every process's publishes, uses and evictions are in the ledger: its total is the disk's.
    ledger = ledger_of(str(cache_dir))
    snapshot = ledger.snapshot()
    assert snapshot.reserved == 0 and snapshot.total == disk_usage(str(cache_dir))
    ledger.close()


def _stalled_downloader(source, serve, cache_dir):
    """A process downloading a data file whose answer sends half the body, then stalls: it holds the
    file's lock and a reservation until it is killed. Returns (server, file spec, process)."""
    root, files = source
    spec = files["data/chunk-000/file-000.parquet"]
    server = serve(root, Faults(stall={spec.rel: 1}))
    victim = SPAWN.Process(target=workers.fetch_one, args=(server.url, str(cache_dir), spec))
    victim.start()
    server.wait_for(lambda s: s.arrived(spec.rel) == 1, timeout_s=60)
    return server, spec, victim


@pytest.mark.timeout(120)
def test_sigkilled_downloader_does_not_wedge_others(source, serve, cache_dir):
    root, _files = source
    server, spec, victim = _stalled_downloader(source, serve, cache_dir)
    assert len(part_files(cache_dir)) == 1

    with (
        NodeCache(cache_dir, fast_remote(server.url), fingerprint=FINGERPRINT) as cache,
        ThreadPoolExecutor(1) as pool,
    ):
        waiter = pool.submit(cache.fetch, spec.rel, size=spec.size, sha256=spec.sha256)
        assert not waiter.done()  # it cannot finish while the victim holds the lock
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(30)
        path = waiter.result(timeout=60)

    assert victim.exitcode == -signal.SIGKILL
    assert read(path) == read(root / spec.rel)
    assert part_files(cache_dir) == []
    assert (server.arrived(spec.rel), server.count(spec.rel, complete=True)) == (2, 1)


@pytest.mark.timeout(120)
def test_sigkilled_holder_releases_its_pin(source, serve, cache_dir):
    root, files = source
    server = serve(root)
    held, never = SPAWN.Event(), SPAWN.Event()
    victim = SPAWN.Process(
        target=workers.hold_until_killed, args=(server.url, str(cache_dir), files["a.bin"], held, never)
    )
    victim.start()
    try:
        assert held.wait(60)
        with NodeCache(
            cache_dir, fast_remote(server.url), fingerprint=FINGERPRINT, max_bytes=2 * UNIT
        ) as cache:
            cache.fetch("b.bin", size=UNIT)
            cache.fetch("c.bin", size=UNIT)  # a is least recently used but pinned: b goes
            assert in_cache(cache, "a.bin", "b.bin", "c.bin") == ["a.bin", "c.bin"]

            os.kill(victim.pid, signal.SIGKILL)
            victim.join(30)
            cache.fetch("d.bin", size=UNIT)  # the kernel dropped the dead holder's lock: a goes
            assert in_cache(cache, "a.bin", "c.bin", "d.bin") == ["c.bin", "d.bin"]
    finally:
        if victim.is_alive():
            victim.kill()
            victim.join()
    assert victim.exitcode == -signal.SIGKILL


@pytest.mark.timeout(120)
def test_a_killed_downloaders_reservation_is_released_by_the_next_eviction(source, serve, cache_dir):
    server, spec, victim = _stalled_downloader(source, serve, cache_dir)
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(30)
    assert len(part_files(cache_dir)) == 1
    ledger = ledger_of(str(cache_dir))
    assert ledger.snapshot().reserved == spec.size  # the dead download still holds its reservation

    with NodeCache(cache_dir, fast_remote(server.url), fingerprint=FINGERPRINT, max_bytes=6 * UNIT) as cache:
        for rel in ("a.bin", "b.bin", "c.bin"):
            cache.fetch(rel, size=UNIT)  # the third must make room: the dead reservation goes first
        assert in_cache(cache, "a.bin", "b.bin", "c.bin") == ["a.bin", "b.bin", "c.bin"]
        assert cache.stats().evictions == 0
    snapshot = ledger.snapshot()
    assert (snapshot.reserved, snapshot.total) == (0, disk_usage(str(cache_dir)))
    assert part_files(cache_dir) == []
    ledger.close()
