"""The byte budget and its ledger: LRU eviction, pins, reservations, and recovery without a scan per
operation (a rebuild only when the ledger is missing, unreadable, stale or found wrong)."""

from __future__ import annotations

import multiprocessing
import os
import re
import sqlite3

import pytest

from cache.budget import Budget, disk_usage
from cache.ledger import LEDGER_NAME, Ledger
from cache.store import CacheLayout, FileLock


@pytest.fixture
def layout(tmp_path) -> CacheLayout:
    return CacheLayout(str(tmp_path), "fp")


@pytest.fixture
def ledger(layout) -> Ledger:
    ledger = Ledger(layout.root)
    yield ledger
    ledger.close()


def _put(layout: CacheLayout, rel: str, size: int, atime_s: int) -> str:
    path = layout.data_path(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    os.utime(path, (atime_s, 1))
    return path


def _names(ledger: Ledger) -> list[str]:
    return [os.path.basename(key) for key, _size in ledger.snapshot().files]


def _consistent(ledger: Ledger) -> bool:
    """The running total is what the rows say, and what the disk holds (no download in flight)."""
    snap = ledger.snapshot()
    return snap.total == sum(size for _key, size in snap.files) + snap.reserved == disk_usage(ledger.root)


def _download(budget: Budget, ledger: Ledger, layout: CacheLayout, rel: str, size: int) -> None:
    """What NodeCache does for one download: reserve, write the temp file, publish."""
    with FileLock(layout.lock_path(rel)) as lock:
        lock.acquire(shared=False)
        temp = layout.temp_path(rel, size)
        with ledger.transaction() as tx:
            budget.reserve(tx, layout.key(rel), temp, size)
        os.makedirs(os.path.dirname(temp), exist_ok=True)
        with open(temp, "wb") as f:
            f.write(b"y" * size)
        with ledger.transaction() as tx:
            budget.publish(tx, layout.key(rel), temp, size, reserved=size)


def test_first_use_builds_the_ledger_from_one_scan_lru_first(layout, ledger):
    _put(layout, "b.bin", 20, atime_s=300)
    _put(layout, "d/a.bin", 10, atime_s=100)
    stale = CacheLayout(layout.root, "other").new_temp("x.bin", None)  # another dataset; a dead temp
    os.makedirs(os.path.join(layout.root, ".lrs", "stats"))
    with open(os.path.join(layout.root, ".lrs", "stats", "1.json"), "w") as f:
        f.write("{}")  # the cache's own bookkeeping is not budgeted

    snap = ledger.snapshot()

    assert snap.files == (("fp/d/a.bin", 10), ("fp/b.bin", 20))
    assert (snap.total, snap.reserved, ledger.rebuilds) == (30, 0, 1)
    assert not os.path.exists(stale)


def test_a_rebuild_counts_live_downloads_at_their_reservation(layout, ledger):
    live = layout.new_temp("live.bin", 500)
    with open(live, "wb") as f:
        f.write(b"x" * 100)  # written so far
    with FileLock(layout.lock_path("live.bin")) as downloader:
        downloader.acquire(shared=False)
        snap = ledger.snapshot()
    assert (snap.reserved, snap.total) == (500, 500)


def test_eviction_follows_uses_and_skips_files_in_use(layout, ledger):
    a = _put(layout, "a.bin", 10, atime_s=100)
    b = _put(layout, "b.bin", 10, atime_s=200)
    c = _put(layout, "c.bin", 10, atime_s=300)
    budget = Budget(layout.root, 30)
    ledger.note_use("fp/b.bin")  # b is now the most recent: a, c, b
    assert _names(ledger) == ["a.bin", "c.bin", "b.bin"]
    with FileLock(layout.lock_path("a.bin")) as reader, ledger.transaction() as tx:
        reader.acquire(shared=True)  # a is in use: c goes instead
        result = budget.make_room(tx, 10)
    assert (result.count, result.bytes, result.used, result.fits) == (1, 10, 20, True)
    assert [os.path.exists(p) for p in (a, b, c)] == [True, True, False]
    assert _names(ledger) == ["a.bin", "b.bin"] and _consistent(ledger)


def test_make_room_reports_an_overrun_when_everything_is_in_use(layout, ledger):
    _put(layout, "a.bin", 10, atime_s=100)
    budget = Budget(layout.root, 15)
    with FileLock(layout.lock_path("a.bin")) as reader, ledger.transaction() as tx:
        reader.acquire(shared=True)
        result = budget.make_room(tx, 10)
    assert (result.count, result.used, result.fits) == (0, 10, False)


def test_downloads_stay_within_budget_with_no_scan(layout, ledger, monkeypatch):
    budget = Budget(layout.root, 50)
    ledger.snapshot()  # built (from an empty directory)
    scans = []
    monkeypatch.setattr("cache.ledger._scan", lambda root: scans.append(root))
    for i in range(20):
        _download(budget, ledger, layout, f"d/{i:02d}.bin", 10)
        assert disk_usage(layout.root) <= 50
    assert scans == [] and _names(ledger) == [f"{i:02d}.bin" for i in range(15, 20)]
    assert _consistent(ledger)


def _crash_inside_a_transaction(root: str, layout: CacheLayout, rel: str, step: str) -> None:
    """In a forked child: do the file operation of a publish or an eviction, then die before the commit."""
    ledger, budget = Ledger(root), Budget(root, 10)
    real_replace, real_unlink = os.replace, os.unlink

    def then_die(fn):
        def wrapped(*args, **kwargs):
            fn(*args, **kwargs)
            os._exit(9)

        return wrapped

    if step == "publish":
        os.replace = then_die(real_replace)
        _download(budget, ledger, layout, rel, 10)
    else:
        os.unlink = then_die(real_unlink)
        with ledger.transaction() as tx:
            budget.make_room(tx, 10)
    os._exit(0)


@pytest.mark.parametrize("step", ["publish", "evict"])
def test_a_process_killed_mid_transaction_leaves_the_ledger_recoverable(layout, ledger, step):
    _put(layout, "old.bin", 10, atime_s=100)
    budget = Budget(layout.root, 10)
    assert ledger.snapshot().total == 10
    child = multiprocessing.get_context("fork").Process(
        target=_crash_inside_a_transaction, args=(layout.root, layout, "new.bin", step)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 9
    # publish: old.bin was evicted and new.bin renamed into place, neither committed. evict: old.bin is
    # gone but still recorded. Either way the next download that needs room repairs the ledger.
    rebuilds = ledger.rebuilds
    _download(budget, ledger, layout, "next.bin", 10)
    assert disk_usage(layout.root) <= 10 and _consistent(ledger)
    assert _names(ledger) == ["next.bin"]
    assert ledger.rebuilds == rebuilds + (step == "evict")  # a missing file; a dead reservation needs none


def test_a_file_removed_behind_the_ledgers_back_triggers_one_rebuild(layout, ledger):
    budget = Budget(layout.root, 30)
    for rel in ("a.bin", "b.bin", "c.bin"):
        _download(budget, ledger, layout, rel, 10)
    os.unlink(layout.data_path("a.bin"))
    os.unlink(layout.data_path("b.bin"))
    before = ledger.rebuilds
    _download(budget, ledger, layout, "d.bin", 10)  # meets a missing a.bin: rebuild, no eviction needed
    assert ledger.rebuilds == before + 1
    assert _names(ledger) == ["c.bin", "d.bin"] and _consistent(ledger)


def _write_garbage(path: str) -> None:
    with open(path, "r+b") as f:
        f.write(b"not a database at all" * 10)


def _set_version(path: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()


@pytest.mark.parametrize(
    "damage",
    [os.unlink, _write_garbage, _set_version],
    ids=["deleted", "corrupt", "other-version"],
)
def test_a_missing_or_damaged_database_is_rebuilt_from_the_directory(layout, ledger, damage):
    budget = Budget(layout.root, 100)
    for rel in ("a.bin", "b.bin"):
        _download(budget, ledger, layout, rel, 10)
    ledger.close()  # as a process exits; the next one finds the damage
    damage(os.path.join(layout.root, ".lrs", LEDGER_NAME))
    for suffix in ("-wal", "-shm"):
        if damage is not _set_version and os.path.exists(ledger.path + suffix):
            os.unlink(ledger.path + suffix)

    fresh = Ledger(layout.root)
    _download(budget, fresh, layout, "c.bin", 10)
    assert fresh.rebuilds == 1 and _consistent(fresh)
    assert sorted(_names(fresh)) == ["a.bin", "b.bin", "c.bin"]
    fresh.close()


def test_a_database_deleted_under_an_open_ledger_is_noticed(layout, ledger):
    budget = Budget(layout.root, 100)
    _download(budget, ledger, layout, "a.bin", 10)
    for suffix in ("", "-wal", "-shm"):
        os.unlink(ledger.path + suffix)
    _download(budget, ledger, layout, "b.bin", 10)
    assert ledger.rebuilds == 2 and _names(ledger) == ["a.bin", "b.bin"] and _consistent(ledger)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (sqlite3.SQLITE_FULL, r"Could not write the cache ledger \(L\): No space left on device"),
        (sqlite3.SQLITE_CORRUPT, r"Invalid cache ledger \(L\): .*Expected a readable SQLite database\."),
    ],
    ids=["disk-full", "damaged"],
)
def test_a_full_disk_under_the_ledger_is_said_as_such(code: int, message: str) -> None:
    from cache.ledger import _ledger_error

    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = code  # what sqlite3 sets on the errors it raises
    assert re.match(message, str(_ledger_error("L", exc)))
