"""The byte budget: what a scan counts, which files eviction picks and which it must skip."""

from __future__ import annotations

import os

import pytest

from cache.budget import Budget, scan
from cache.store import CacheLayout, FileLock


@pytest.fixture
def layout(tmp_path) -> CacheLayout:
    return CacheLayout(str(tmp_path), "fp")


def _put(layout: CacheLayout, rel: str, size: int, atime_s: int) -> str:
    path = layout.data_path(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    os.utime(path, (atime_s, 1))
    return path


def test_scan_lists_files_least_recently_used_first(layout):
    _put(layout, "b.bin", 20, atime_s=300)
    _put(layout, "d/a.bin", 10, atime_s=100)
    CacheLayout(layout.root, "other").new_temp("x.bin", None)  # another dataset; a stale temp
    os.makedirs(os.path.join(layout.root, ".lrs", "stats"))
    with open(os.path.join(layout.root, ".lrs", "stats", "1.json"), "w") as f:
        f.write("{}")  # the cache's own bookkeeping is not budgeted

    usage = scan(layout.root)

    assert [(os.path.basename(e.path), e.size) for e in usage.files] == [("a.bin", 10), ("b.bin", 20)]
    assert (usage.total, usage.in_flight, usage.stale_removed) == (30, 0, 1)


def test_scan_counts_live_downloads_at_their_reservation_and_drops_dead_ones(layout):
    live = layout.new_temp("live.bin", 500)
    with open(live, "wb") as f:
        f.write(b"x" * 100)  # written so far
    dead = layout.new_temp("dead.bin", 700)
    with FileLock(layout.lock_path("live.bin")) as downloader:
        downloader.acquire(shared=False)
        usage = scan(layout.root)
    assert (usage.in_flight, usage.stale_removed) == (500, 1)
    assert os.path.exists(live) and not os.path.exists(dead)


def test_make_room_evicts_lru_and_skips_files_in_use(layout):
    a = _put(layout, "a.bin", 10, atime_s=100)
    b = _put(layout, "b.bin", 10, atime_s=200)
    c = _put(layout, "c.bin", 10, atime_s=300)
    budget = Budget(layout.root, 30)
    with FileLock(layout.lock_path("a.bin")) as reader, budget.locked():
        reader.acquire(shared=True)  # a is in use: b goes instead
        result = budget.make_room(10)
    assert (result.count, result.bytes, result.used, result.fits) == (1, 10, 20, True)
    assert [os.path.exists(p) for p in (a, b, c)] == [True, False, True]


def test_make_room_reports_an_overrun_when_everything_is_in_use(layout):
    _put(layout, "a.bin", 10, atime_s=100)
    budget = Budget(layout.root, 15)
    with FileLock(layout.lock_path("a.bin")) as reader, budget.locked():
        reader.acquire(shared=True)
        result = budget.make_room(10)
    assert (result.count, result.used, result.fits) == (0, 10, False)


def test_make_room_skips_a_file_used_since_the_scan(layout, monkeypatch):
    a = _put(layout, "a.bin", 10, atime_s=100)
    b = _put(layout, "b.bin", 10, atime_s=200)
    real_scan = scan

    def scan_then_use_a(root: str):
        usage = real_scan(root)
        os.utime(a, (400, 1))  # a hit lands between the scan and the eviction
        return usage

    monkeypatch.setattr("cache.budget.scan", scan_then_use_a)
    budget = Budget(layout.root, 20)
    with budget.locked():
        result = budget.make_room(10)
    assert result.count == 1
    assert [os.path.exists(p) for p in (a, b)] == [True, False]
