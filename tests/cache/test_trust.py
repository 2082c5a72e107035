"""A node other users share: a directory lrs reuses must be the user's own, and nothing a cache
directory's files say may reach outside it (`cache.trust`, the ledger's key check)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cache import NodeCache, TrustError
from cache.errors import PathError
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
    with pytest.raises(
        TrustError, match=r"its ancestor .*open \(.*\) is writable by every user and not sticky"
    ):
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


# -- every ancestor up to / --------------------------------------------------------------------------


def ancestor_refusal(ancestor: Path, problem: str) -> str:
    return rf"^Invalid cache directory \(.*\): its ancestor {ancestor} \(owner .*mode d.*\) {problem}.* Expected "


def test_a_group_writable_ancestor_is_refused(tmp_path: Path) -> None:
    """A group project directory (setgid 2775, not sticky): a member could swap the cache for theirs."""
    group = tmp_path / "projects" / "g"
    group.mkdir(parents=True)
    group.chmod(0o2775)
    with pytest.raises(TrustError, match=ancestor_refusal(group, "is writable by its group and not sticky")):
        owned_dir(str(group / "cache"), what="cache directory")
    with pytest.raises(TrustError, match=r"chmod g-w,o-w.*chmod \+t"):
        owned_dir(str(group / "deeper" / "cache"), what="cache directory")
    assert os.listdir(group) == []  # refused before anything was made there


def test_a_world_writable_grandparent_is_refused(tmp_path: Path) -> None:
    """/scratch 0777 above /scratch/alice/cache: anyone could rename alice away and make the path again."""
    scratch = tmp_path / "scratch"
    (scratch / "alice").mkdir(parents=True, mode=0o755)
    scratch.chmod(0o777)
    with pytest.raises(
        TrustError, match=ancestor_refusal(scratch, "is writable by every user and not sticky")
    ):
        owned_dir(str(scratch / "alice" / "cache"), what="cache directory")


@as_root
def test_an_ancestor_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "mine").mkdir(parents=True, mode=0o755)
    theirs.chmod(0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(TrustError, match=ancestor_refusal(theirs, "is owned by another user")):
        owned_dir(str(theirs / "mine" / "cache"), what="cache directory")


@as_root
def test_a_sticky_ancestor_of_another_user_is_refused(tmp_path: Path) -> None:
    """Sticky protects entries only from users other than the directory's owner."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    theirs.chmod(0o1777)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(TrustError, match=ancestor_refusal(theirs, "is owned by another user")):
        owned_dir(str(theirs / "cache"), what="cache directory")


def test_sticky_ancestors_like_tmp_are_accepted(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    (shared / "sub").mkdir(parents=True, mode=0o700)
    shared.chmod(0o1777)
    (shared / "sub").chmod(0o1777)
    owned_dir(str(shared / "sub" / "cache"), what="cache directory")
    owned_dir("/tmp/lrs-test-trust-sticky", what="cache directory")
    os.rmdir("/tmp/lrs-test-trust-sticky")


def test_a_symlinked_ancestor_is_checked_where_it_leads(tmp_path: Path) -> None:
    """Like /var/run -> /run: the link's own directory and its target's chain must both pass."""
    (tmp_path / "real").mkdir(mode=0o755)
    (tmp_path / "link").symlink_to("real")  # relative, as most such links are
    owned_dir(str(tmp_path / "link" / "cache"), what="cache directory")
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o2775)
    (tmp_path / "to-group").symlink_to(group)
    with pytest.raises(TrustError, match=ancestor_refusal(group, "is writable by its group")):
        owned_dir(str(tmp_path / "to-group" / "cache"), what="cache directory")
    (group / "inside").mkdir(mode=0o755)
    (tmp_path / "real" / "via").symlink_to(group / "inside")
    with pytest.raises(TrustError, match=ancestor_refusal(group, "is writable by its group")):
        owned_dir(str(tmp_path / "real" / "via" / "cache"), what="cache directory")
    assert os.listdir(group / "inside") == []


def test_a_symlink_loop_above_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(TrustError, match=r"more than 40 symbolic links above it"):
        owned_dir(str(tmp_path / "a" / "cache"), what="cache directory")


def test_a_node_cache_under_a_group_writable_parent_is_refused(
    tmp_path: Path, source: tuple[Path, dict[str, SourceFile]]
) -> None:
    root, _ = source
    group = tmp_path / "g"
    group.mkdir()
    group.chmod(0o2775)
    with pytest.raises(TrustError, match="is writable by its group"):
        NodeCache(group / "cache", fast_remote(str(root)), fingerprint=FINGERPRINT)


# -- no symbolic link inside a cache is followed ----------------------------------------------------


def plant_link(cache_dir: Path, tmp_path: Path) -> Path:
    """`<cache>/<fingerprint>/zz -> victim/`, holding a file the attacker wants deleted."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "important.txt").write_bytes(b"x" * (10 * UNIT))
    (cache_dir / "zz").symlink_to(victim)  # a dataset folder
    (cache_dir / FINGERPRINT / "zz").symlink_to(victim)
    (cache_dir / FINGERPRINT / "file-link.bin").symlink_to(victim / "important.txt")
    return victim


def force_rebuild(cache_dir: Path) -> None:
    ledger_of(str(cache_dir)).close()
    for suffix in ("", "-wal", "-shm"):
        (cache_dir / ".lrs" / f"ledger.sqlite{suffix}").unlink(missing_ok=True)


def test_the_rebuild_and_eviction_never_follow_a_symlink(
    tmp_path: Path, source: tuple[Path, dict[str, SourceFile]], serve
) -> None:  # type: ignore[no-untyped-def]
    root, _ = source
    cache_dir = tmp_path / "cache"
    cache = NodeCache(cache_dir, fast_remote(serve(root).url), fingerprint=FINGERPRINT, max_bytes=2 * UNIT)
    try:
        cache.fetch("a.bin", size=UNIT)
        victim = plant_link(cache_dir, tmp_path)
        force_rebuild(cache_dir)
        snapshot = ledger_of(str(cache_dir)).snapshot()
        assert snapshot.files == ((f"{FINGERPRINT}/a.bin", UNIT),)  # neither link recorded
        with ledger_of(str(cache_dir)).transaction() as tx:  # a row through the link, oldest of all
            tx.record(f"{FINGERPRINT}/zz/important.txt", 10 * UNIT, 0)
            tx.record("zz/important.txt", 10 * UNIT, 0)
            tx.record(f"{FINGERPRINT}/file-link.bin", 10 * UNIT, 0)
        for rel in ("b.bin", "c.bin", "d.bin"):
            cache.fetch(rel, size=UNIT)
    finally:
        cache.close()
    assert (victim / "important.txt").read_bytes() == b"x" * (10 * UNIT)
    assert os.listdir(victim) == ["important.txt"]
    assert ledger_of(str(cache_dir)).snapshot().total <= 2 * UNIT


# -- modes whatever the umask ------------------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_a_cache_is_private_under_umask_022(
    tmp_path: Path, source: tuple[Path, dict[str, SourceFile]], serve, umask_022: None
) -> None:  # type: ignore[no-untyped-def]
    """0700 directories and 0600 files, the ledger's -wal and -shm and the reader's stats included."""
    root, _ = source
    cache_dir = tmp_path / "parent" / "cache"
    cache = NodeCache(cache_dir, fast_remote(serve(root).url), fingerprint=FINGERPRINT, max_bytes=10 * UNIT)
    try:
        cache.fetch("videos/cam/episode_000.mp4", size=UNIT)
        cache.fetch("a.bin", size=UNIT)
        ledger_of(str(cache_dir)).snapshot()
        wrong = {
            str(p.relative_to(tmp_path)): oct(mode(p))
            for p in [tmp_path / "parent", *cache_dir.rglob("*"), cache_dir]
            if mode(p) != (0o700 if p.is_dir() else 0o600)
        }
        assert {p.name for p in (cache_dir / ".lrs").iterdir()} >= {"ledger.sqlite-wal", "ledger.sqlite-shm"}
    finally:
        cache.close()
    assert wrong == {}


def test_an_old_world_readable_ledger_is_made_private(tmp_path: Path, umask_022: None) -> None:
    from cache.ledger import LEDGER_NAME

    owned_dir(str(tmp_path / "c"), what="cache directory")
    owned_dir(str(tmp_path / "c" / ".lrs"), what="cache directory")
    ledger = tmp_path / "c" / ".lrs" / LEDGER_NAME
    ledger.write_bytes(b"")
    ledger.chmod(0o644)
    ledger_of(str(tmp_path / "c")).snapshot()
    assert mode(ledger) == 0o600


def test_reader_stats_are_private_under_umask_022(tmp_path: Path) -> None:
    """In a child with umask 022 (as a login shell has it): the reader's counters directory and file."""
    code = (
        "import os, sys; os.umask(0o022); from cache.counter_files import CounterFile; "
        "f = CounterFile(os.path.join(sys.argv[1], '.lrs', 'reader-stats', 'run'), lambda: {'counters': {}}); "
        "f.changed(now=True)"
    )
    owned_dir(str(tmp_path / "c"), what="cache directory")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "c")], check=True, env={**os.environ})
    stats = tmp_path / "c" / ".lrs" / "reader-stats"
    assert [oct(mode(p)) for p in (tmp_path / "c" / ".lrs", stats, stats / "run")] == [oct(0o700)] * 3
    assert {oct(mode(p)) for p in (stats / "run").iterdir()} == {oct(0o600)}


def test_a_dangling_link_above_is_one_path_error(tmp_path: Path) -> None:
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(PathError, match=r"^Invalid path \(.*nowhere\): No such file"):
        owned_dir(str(tmp_path / "gone" / "cache"), what="cache directory")
