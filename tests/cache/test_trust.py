"""A node other users share: a directory lrs reuses must be the user's own, and nothing a cache
directory's files say may reach outside it (`cache.trust`, the ledger's key check)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cache import NodeCache, TrustError
from cache.ledger import ledger_of
from cache.store import is_key
from cache.trust import owned_dir
from tests.cache.conftest import UNIT
from tests.cache.helpers import FINGERPRINT, SourceFile, fast_remote

OTHER_UID = 4321
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another uid needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_new_directory_is_private(tmp_path: Path) -> None:
    owned_dir(str(tmp_path / "a" / "b"), what="cache directory")
    assert mode(tmp_path / "a" / "b") == 0o700


@pytest.mark.parametrize(
    ("prepare", "problem"),
    [
        (lambda p: (p.mkdir(), p.chmod(0o777)), "writable by other users"),
        (lambda p: (p.mkdir(), p.chmod(0o775)), "writable by other users"),
        (
            lambda p: (p.with_name("elsewhere").mkdir(), p.symlink_to(p.with_name("elsewhere"))),
            "a symbolic link",
        ),
        (lambda p: p.write_text("x"), "not a directory"),
    ],
    ids=["world-writable", "group-writable", "symlink", "file"],
)
def test_a_directory_others_control_is_refused(tmp_path: Path, prepare, problem: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "c"
    prepare(path)
    with pytest.raises(TrustError, match=rf"^Invalid cache directory \({path}\): {problem} \(owner .*mode "):
        owned_dir(str(path), what="cache directory")


def test_a_parent_any_user_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(TrustError, match=r"its parent .*open .* lets any user replace it"):
        owned_dir(str(tmp_path / "open" / "c"), what="cache directory")
    (tmp_path / "open").chmod(0o1777)  # like /tmp: nobody renames another's entry
    owned_dir(str(tmp_path / "open" / "c"), what="cache directory")


@as_root
def test_a_cache_directory_of_another_user_is_refused(
    tmp_path: Path, source: tuple[Path, dict[str, SourceFile]]
) -> None:
    root, _ = source
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, OTHER_UID, OTHER_UID)
    with pytest.raises(TrustError, match=r"owned by another user \(owner uid 4321"):
        NodeCache(shared, fast_remote(str(root)), fingerprint=FINGERPRINT)
    assert os.listdir(shared) == []


@as_root
def test_an_lrs_directory_of_another_user_is_refused(
    tmp_path: Path, source: tuple[Path, dict[str, SourceFile]]
) -> None:
    root, _ = source
    (tmp_path / "c" / ".lrs").mkdir(parents=True, mode=0o700)
    os.chown(tmp_path / "c" / ".lrs", OTHER_UID, OTHER_UID)
    with pytest.raises(TrustError, match=r"\.lrs\): owned by another user"):
        NodeCache(tmp_path / "c", fast_remote(str(root)), fingerprint=FINGERPRINT)


@pytest.mark.parametrize(
    ("key", "temp", "ok"),
    [
        (f"{FINGERPRINT}/a.bin", False, True),
        (f"{FINGERPRINT}/videos/cam/x.mp4", False, True),
        ("/etc/passwd", False, False),
        (f"{FINGERPRINT}/../../victim", False, False),
        ("../victim", False, False),
        (f"{FINGERPRINT}/a.bin.lrs-part", False, False),
        (f"{FINGERPRINT}/.a.bin.10.0123456789ab.lrs-part", True, True),
        (f"{FINGERPRINT}/../.a.bin.10.0123456789ab.lrs-part", True, False),
        ("/tmp/.a.bin.10.0123456789ab.lrs-part", True, False),
        (f"{FINGERPRINT}/victim", True, False),
    ],
)
def test_ledger_keys_name_files_under_the_cache(key: str, temp: bool, ok: bool) -> None:
    assert is_key(key, temp=temp) is ok


def test_a_planted_ledger_row_deletes_and_creates_nothing_outside(
    tmp_path: Path, source: tuple[Path, dict[str, SourceFile]], serve
) -> None:  # type: ignore[no-untyped-def]
    """The ledger is a file: a row naming a path outside the cache (a damaged or planted ledger) is
    dropped when eviction reaches it, never unlinked or locked."""
    root, _ = source
    victim = tmp_path / "victim" / "file"
    victim.parent.mkdir()
    victim.write_bytes(b"mine")
    cache_dir = tmp_path / "cache"
    cache = NodeCache(cache_dir, fast_remote(serve(root).url), fingerprint=FINGERPRINT, max_bytes=2 * UNIT)
    try:
        with ledger_of(str(cache_dir)).transaction() as tx:
            tx.record(str(victim), 10**12, 0)  # the least recently used, and far over the budget
            tx.record(f"{FINGERPRINT}/../../victim/file", 10**12, 0)
            tx.reserve(str(victim), f"{FINGERPRINT}/a.bin", 1)
        cache.fetch("a.bin", size=UNIT)
        cache.fetch("b.bin", size=UNIT)
    finally:
        cache.close()
    assert victim.read_bytes() == b"mine"
    assert os.listdir(victim.parent) == ["file"]  # no lock file made beside it
    with ledger_of(str(cache_dir)).transaction() as tx:
        assert tx.used() <= 2 * UNIT  # the planted rows are gone
