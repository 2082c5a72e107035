"""The cache directory layout and file primitives: names, locks, checks of published files."""

from __future__ import annotations

import hashlib
import os

import pytest

from cache.store import (
    CacheLayout,
    FileLock,
    Verified,
    check_published,
    check_rel,
    lock_path_of,
    parse_temp,
    read_span,
)


@pytest.fixture
def layout(tmp_path) -> CacheLayout:
    return CacheLayout(str(tmp_path), "fp")


def _publish(layout: CacheLayout, rel: str, data: bytes) -> str:
    path = layout.data_path(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_paths_mirror_the_dataset(layout, tmp_path):
    rel = "videos/cam/episode_000.mp4"
    assert layout.data_path(rel) == str(tmp_path / "fp" / rel)
    assert layout.lock_path(rel) == str(tmp_path / ".lrs" / "locks" / "fp" / (rel + ".lock"))
    assert lock_path_of(str(tmp_path), layout.data_path(rel)) == layout.lock_path(rel)


@pytest.mark.parametrize("size", [None, 0, 1234], ids=["unknown", "empty", "sized"])
def test_temp_names_carry_target_and_reservation(layout, size):
    temp = layout.new_temp("data/a.parquet", size)
    assert os.path.dirname(temp) == os.path.dirname(layout.data_path("data/a.parquet"))
    assert parse_temp(os.path.basename(temp)) == ("a.parquet", size)
    assert os.path.getsize(temp) == 0


@pytest.mark.parametrize(
    "name",
    ["a.parquet", ".a.parquet.12.tmp", ".a.12.nothex000000.lrs-part", "a.12.0123456789ab.lrs-part"],
    ids=["plain", "other-temp", "bad-token", "not-hidden"],
)
def test_other_names_are_not_temps(name):
    assert parse_temp(name) is None


def test_rel_paths_ending_like_temps_are_refused():
    with pytest.raises(
        ValueError, match=r"Invalid dataset path \('a\.lrs-part'\)\. Expected a name not ending in"
    ):
        check_rel("a.lrs-part")


@pytest.mark.parametrize(
    ("first_shared", "second_shared", "second_gets_it"),
    [(True, True, True), (True, False, False), (False, True, False), (False, False, False)],
    ids=["shared-shared", "shared-exclusive", "exclusive-shared", "exclusive-exclusive"],
)
def test_file_locks_conflict_like_readers_and_writers(tmp_path, first_shared, second_shared, second_gets_it):
    path = str(tmp_path / "locks" / "x.lock")
    with FileLock(path) as first, FileLock(path) as second:
        assert first.acquire(shared=first_shared, blocking=False)
        assert second.acquire(shared=second_shared, blocking=False) is second_gets_it
        first.close()  # closing drops the lock, as the kernel does for a dead process
        assert second.acquire(shared=second_shared, blocking=False)


def test_closed_lock_refuses_to_lock(tmp_path):
    lock = FileLock(str(tmp_path / "x.lock"))
    lock.close()
    with pytest.raises(
        ValueError, match=r"Invalid lock \(.+x\.lock\)\. Expected an open lock of this process\."
    ):
        lock.acquire(shared=True)


def test_check_published_hashes_once_per_process_and_version(layout):
    data = b"hello"
    sha = hashlib.sha256(data).hexdigest()
    path = _publish(layout, "a.bin", data)
    verified = Verified()

    assert check_published(path, size=5, sha256=sha, verified=verified) is None
    assert check_published(path, size=4, sha256=None, verified=verified) == "size 5, expected 4"
    assert (
        check_published(path, size=None, sha256="0" * 64, verified=verified)
        == f"sha256 {sha}, expected {'0' * 64}"
    )
    assert (
        check_published(layout.data_path("missing.bin"), size=None, sha256=None, verified=verified)
        == "not cached"
    )
    # Bytes that rot in place, mtime kept: this process trusts the version it hashed; a new process does not.
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"J")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert check_published(path, size=5, sha256=sha, verified=verified) is None
    assert check_published(path, size=5, sha256=sha, verified=Verified()) == (
        f"sha256 {hashlib.sha256(b'Jello').hexdigest()}, expected {sha}"
    )


def test_check_published_leaves_the_file_alone(layout):
    # Uses are recorded in the ledger: a hit costs no utime, and mtime stays the version stamp.
    path = _publish(layout, "a.bin", b"x")
    os.utime(path, ns=(1_000_000_000, 2_000_000_000))
    assert check_published(path, size=1, sha256=None, verified=Verified()) is None
    st = os.stat(path)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000, 2_000_000_000)


def test_read_span_reads_exactly_the_range(layout):
    path = _publish(layout, "a.bin", bytes(range(100)))
    assert read_span(path, 10, 20) == bytes(range(10, 20))
    with pytest.raises(ValueError, match=r"Invalid byte range \(\[90, 101\)\) for .+a\.bin of 100 bytes"):
        read_span(path, 90, 101)
