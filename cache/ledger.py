"""The ledger of a node cache directory: every published file with its size and last use, the bytes
reserved by downloads in flight, and their total, kept incrementally in one SQLite database
(`.lrs/ledger.sqlite`, WAL mode). The budget then costs a few indexed row operations per download or
eviction, whatever the number of files cached, where a directory scan per download made it quadratic.

Why SQLite rather than an append-only journal: LRU eviction asks for "the least recently used files",
which an index on the use time answers directly, and a hit is an update in place. A journal would be
replayed into memory by every process at start (time and memory growing with its history), compacted
by someone, and guarded against torn appends; SQLite's write-ahead log does all of that, atomically
across a crash, in the standard library.

Locking. Every write is a `Ledger.transaction()`: `.lrs/budget.lock` (flock, exclusive) around
`BEGIN IMMEDIATE` ... `COMMIT`. The flock orders the writers of every process with an immediate hand-over
from the kernel (SQLite's busy handler sleeps and polls) and makes a rebuild exclusive. It is held for
bookkeeping only: row updates, plus the one metadata operation that must happen in step with them (the
rename that publishes a file, the unlink that evicts one, a non-blocking flock that tells whether a file
is in use); never a download, a hash or a directory listing, except in a rebuild. The threads of a
process share one connection, one transaction at a time; a forked child opens its own (SQLite forbids
using a connection across fork, so the parent's is neither used nor closed there).

Crash safety. Inside a transaction the file operation comes first and the commit last, so a process
killed between the two leaves one of two states, each repaired where it is met:
- a reservation whose download is dead (its target's lock is free): its temp file is deleted and the
  target's row made to match the disk (a file renamed into place but not recorded gets its row);
- a row whose file is gone (evicted but not recorded, or deleted behind the cache's back), met by the
  eviction that reaches it. Files may have been removed behind the cache's back, so this triggers a
  rebuild.
A rebuild is one scan of the directory, under the lock, that writes the ledger afresh (LRU order from
each file's atime and mtime). The scan, the sweep of dead temp files and eviction reach files through
directory descriptors from one descriptor of the cache directory per connection, never through a
symbolic link (`cache.nofollow`). It happens when the database is missing, unreadable, of another schema
version or of an earlier boot of the machine (the last writes before a power loss may be lost), when a
rebuild was interrupted, or when a recorded file is missing; and only then.

Uses are batched: a hit is noted in memory and written with this process's next transaction, at most a
second later (`USE_FLUSH_INTERVAL_S`), and at `flush()` (`NodeCache.close`) and process exit: one row
update per file however often it was used meanwhile. A use not yet written may let another process evict
a file that was just used; that costs a download, never a wrong byte (a file in use is pinned by its
lock, not by the order).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from cache.errors import CacheError, TrustError
from cache.nofollow import DIR_FLAGS, open_subdir, walk_files
from cache.store import META_DIR, FileLock, at_exit, is_key, lock_path_of, parse_temp
from cache.trust import private_makedirs

log = logging.getLogger(__name__)

VERSION = 1
USE_FLUSH_INTERVAL_S = 1.0
LEDGER_NAME = "ledger.sqlite"
# Dead reservations (a downloader killed mid-download) are looked for at most this often by a process
# that must evict, and always before it reports the budget overrun: a look costs a non-blocking flock
# per download in flight on the node, never a listing.
_PURGE_INTERVAL_S = 1.0
# Writers queue on the flock, not in SQLite; this only bounds a wait on a checkpoint or a foreign reader.
_BUSY_TIMEOUT_S = 600.0
_BOOT_ID = "/proc/sys/kernel/random/boot_id"

_SCHEMA = f"""
PRAGMA journal_mode = WAL;
BEGIN;
CREATE TABLE files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, used_ns INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX files_lru ON files (used_ns, path);
CREATE TABLE reservations (temp TEXT PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX reservations_path ON reservations (path);
CREATE TABLE totals (id INTEGER PRIMARY KEY CHECK (id = 0), bytes INTEGER NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
INSERT INTO totals VALUES (0, 0);
CREATE TRIGGER files_in AFTER INSERT ON files BEGIN UPDATE totals SET bytes = bytes + new.size; END;
CREATE TRIGGER files_out AFTER DELETE ON files BEGIN UPDATE totals SET bytes = bytes - old.size; END;
CREATE TRIGGER files_resize AFTER UPDATE OF size ON files
    BEGIN UPDATE totals SET bytes = bytes - old.size + new.size; END;
CREATE TRIGGER reservations_in AFTER INSERT ON reservations
    BEGIN UPDATE totals SET bytes = bytes + new.size; END;
CREATE TRIGGER reservations_out AFTER DELETE ON reservations
    BEGIN UPDATE totals SET bytes = bytes - old.size; END;
PRAGMA user_version = {VERSION};
COMMIT;
"""


@dataclass(frozen=True)
class Snapshot:
    """What the ledger holds (for checks and tests).

    Attributes:
        files: (path relative to the cache directory, size), least recently used first.
        reserved: bytes reserved by downloads in flight.
        total: the running total: the files' bytes plus `reserved`.
    """

    files: tuple[tuple[str, int], ...]
    reserved: int
    total: int


class Ledger:
    """The ledger of the cache directory `root`, as this process uses it (get it from `ledger_of`)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.path = os.path.join(root, META_DIR, LEDGER_NAME)
        self.rebuilds = 0  # by this process (tests and benchmarks read it)
        self._lock_path = os.path.join(root, META_DIR, "budget.lock")
        self._guard = threading.Lock()  # one transaction at a time on the connection and the flock
        self._flock: FileLock | None = None
        self._conn: sqlite3.Connection | None = None
        self._ino: int | None = None
        self._uses_guard = threading.Lock()
        self._uses: dict[str, int] = {}
        self._last_ns = 0
        self._flushed_at = float("-inf")
        self._purged_at = float("-inf")
        self._fd_guard = threading.Lock()
        self._root_fd: int | None = None

    def open_dir(self, rel: str = "") -> int:
        """A new descriptor of the directory `rel` of the cache ("" for the cache directory), reached
        from this process's descriptor of the cache directory without following a link (see
        `cache.nofollow`). The caller closes it.

        Raises:
            FileNotFoundError: it is missing.
            NotADirectoryError: a directory on its way is a symbolic link or not a directory.
            TrustError: the cache directory is no longer the user's own.
        """
        with self._fd_guard:
            if self._root_fd is None:
                self._root_fd = _open_root(self.root)
            return open_subdir(self._root_fd, rel)

    def unlink(self, key: str) -> None:
        """Delete the file `key` (a path relative to the cache directory) through `open_dir`: a link on
        its way is never followed, a link at its end is deleted itself.

        Raises:
            FileNotFoundError, NotADirectoryError: as `open_dir`, or the file is missing.
            IsADirectoryError: it is a directory.
        """
        directory, _, name = key.rpartition("/")
        fd = self.open_dir(directory)
        try:
            os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)

    def regular_size(self, key: str) -> int | None:
        """The size of the regular file `key`, or None when it is missing, not a regular file, or reached
        only through a symbolic link."""
        directory, _, name = key.rpartition("/")
        try:
            fd = self.open_dir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One write transaction under the budget lock; this process's pending uses are written with it.

        Raises:
            CacheError: the ledger could not be read or written (it is rebuilt at the next transaction).
        """
        with self._guard:
            if self._flock is None:
                self._flock = FileLock(self._lock_path)
            self._flock.acquire(shared=False)
            try:
                with self._transaction() as tx:
                    yield tx
            finally:
                self._flock.release()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Transaction]:
        conn = self._begin()
        tx = Transaction(self, conn)
        try:
            tx.write_uses(self._take_uses())
            yield tx
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.DatabaseError):
                self._drop_connection()
                if not isinstance(exc, sqlite3.OperationalError):
                    self._ino = -1  # damaged (not merely busy or failing to write): rebuild it
                raise _ledger_error(
                    self.path, exc, " (it is rebuilt from the cache directory at the next operation)"
                ) from exc
            raise

    def note_use(self, key: str) -> None:
        """Record that the file `key` was used now (written within a second; never raises)."""
        with self._uses_guard:
            self._uses[key] = self._stamp()
            due = time.monotonic() - self._flushed_at >= USE_FLUSH_INTERVAL_S
        if due:
            self.flush(quiet=True)

    def flush(self, *, quiet: bool = False) -> None:
        """Write the pending uses; with `quiet`, a failure to do so is logged, not raised."""
        with self._uses_guard:
            if not self._uses:
                return
            if not os.path.isdir(self.root):  # removed (a stream's temporary cache): nothing to order
                self._uses.clear()
                return
        try:
            with self.transaction():
                pass
        except (OSError, CacheError, sqlite3.Error) as exc:
            if not quiet:
                raise
            log.debug("could not write cache uses to %s: %s", self.path, exc)

    def snapshot(self) -> Snapshot:
        """The files (LRU first), the reserved bytes and the running total."""
        with self.transaction() as tx:
            conn = tx.conn
            files = conn.execute("SELECT path, size FROM files ORDER BY used_ns, path").fetchall()
            reserved = conn.execute("SELECT coalesce(sum(size), 0) FROM reservations").fetchone()[0]
            return Snapshot(tuple(files), reserved, tx.used())

    def close(self) -> None:
        """Write pending uses and close the connection (the next transaction opens it again)."""
        self.flush(quiet=True)
        with self._guard:
            self._drop_connection()
            if self._flock is not None:
                self._flock.close()
                self._flock = None
            self._close_root()

    def purge_due(self) -> bool:
        """Whether this process last looked for dead reservations long enough ago."""
        return time.monotonic() - self._purged_at >= _PURGE_INTERVAL_S

    # -- internals -----------------------------------------------------------------------------------

    def _stamp(self) -> int:
        self._last_ns = max(time.time_ns(), self._last_ns + 1)
        return self._last_ns

    def _take_uses(self) -> dict[str, int]:
        with self._uses_guard:
            uses, self._uses = self._uses, {}
            self._flushed_at = time.monotonic()
        return uses

    def _begin(self) -> sqlite3.Connection:
        """Open (or rebuild) the database if needed and begin; call under the budget lock."""
        for attempt in range(2):
            try:
                conn = self._connection()
            except sqlite3.DatabaseError as exc:  # a new ledger on a full disk, one that cannot be made
                self._drop_connection()
                raise _ledger_error(self.path, exc) from exc
            try:
                conn.execute("BEGIN IMMEDIATE")
                return conn
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                if attempt or isinstance(exc, sqlite3.OperationalError):
                    raise _ledger_error(self.path, exc) from exc
                self._drop_connection()
                self._ino = -1  # unreadable: rebuild
        raise AssertionError("unreachable")

    def _connection(self) -> sqlite3.Connection:
        try:
            ino: int | None = os.stat(self.path).st_ino
        except FileNotFoundError:
            ino = None
        if self._conn is not None and ino == self._ino:
            return self._conn
        damaged = self._ino == -1
        self._drop_connection()
        # A new database (first use, or the cache directory made again): the directory is opened anew.
        self._close_root()
        self._conn = self._open(exists=ino is not None, damaged=damaged)
        self._ino = os.stat(self.path).st_ino
        return self._conn

    def _open(self, *, exists: bool, damaged: bool) -> sqlite3.Connection:
        reason = "missing" if not exists else "unreadable" if damaged else None
        conn = None
        if reason is None:
            try:
                conn = _connect(self.path)
                reason = _stale(conn)
            except sqlite3.DatabaseError as exc:
                reason = f"unreadable ({exc})"
            if reason is None and conn is not None:
                return conn
            if conn is not None:
                conn.close()
        log.info("rebuilding the cache ledger %s: %s", self.path, reason)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + suffix)
        conn = _connect(self.path)
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        Transaction(self, conn).rebuild()
        conn.execute("COMMIT")
        return conn

    def _close_root(self) -> None:
        with self._fd_guard:
            if self._root_fd is not None:
                os.close(self._root_fd)
                self._root_fd = None

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn, self._ino = None, None


class Transaction:
    """The operations of one ledger transaction. Keys are paths relative to the cache directory."""

    def __init__(self, ledger: Ledger, conn: sqlite3.Connection) -> None:
        self.ledger = ledger
        self.conn = conn

    def used(self) -> int:
        """Bytes of the published files plus the bytes reserved."""
        return self.conn.execute("SELECT bytes FROM totals").fetchone()[0]

    def reserve(self, temp: str, key: str, size: int) -> None:
        """Count `size` bytes for the download of `key` into the temp file `temp`."""
        self.conn.execute("INSERT INTO reservations VALUES (?, ?, ?)", (temp, key, size))

    def unreserve(self, temp: str) -> None:
        """Drop the reservation of the temp file `temp`."""
        self.conn.execute("DELETE FROM reservations WHERE temp = ?", (temp,))

    def unreserve_all(self, key: str) -> list[str]:
        """Drop every reservation of `key` (call with its exclusive lock held); their temp files."""
        temps = self.conn.execute("DELETE FROM reservations WHERE path = ? RETURNING temp", (key,))
        return [t for (t,) in temps if is_key(t, temp=True)]

    def record(self, key: str, size: int, used_ns: int | None = None) -> None:
        """Record the published file `key` of `size` bytes, used at `used_ns` (now by default)."""
        self.conn.execute(
            "INSERT INTO files VALUES (?, ?, ?) ON CONFLICT (path) DO UPDATE SET size = excluded.size, "
            "used_ns = excluded.used_ns",
            (key, size, self.ledger._stamp() if used_ns is None else used_ns),
        )

    def forget(self, key: str) -> None:
        """Drop the row of `key` (evicted, or gone)."""
        self.conn.execute("DELETE FROM files WHERE path = ?", (key,))

    def least_recent(self, limit: int, offset: int) -> list[tuple[str, int]]:
        """Up to `limit` files (key, size), least recently used first, after skipping `offset`."""
        rows = self.conn.execute(
            "SELECT path, size FROM files ORDER BY used_ns, path LIMIT ? OFFSET ?", (limit, offset)
        ).fetchall()
        bad = [key for key, _size in rows if not is_key(key)]
        if not bad:
            return rows
        # A row no publish could have written (a planted or damaged ledger): dropped, never acted on.
        log.warning("cache %s: ledger rows outside the cache dropped: %s", self.ledger.root, bad[:3])
        self.conn.executemany("DELETE FROM files WHERE path = ?", [(key,) for key in bad])
        return self.least_recent(limit, offset)

    def write_uses(self, uses: dict[str, int]) -> None:
        """Move the files of `uses` to their new place in the LRU order."""
        for key, used_ns in uses.items():
            updated = self.conn.execute(
                "UPDATE files SET used_ns = max(used_ns, ?) WHERE path = ?", (used_ns, key)
            ).rowcount
            if not updated:
                # On disk but not recorded (its publisher died before its commit): record it if still there.
                self._reconcile(key, used_ns)

    def purge_dead(self) -> int:
        """Drop the reservations of dead downloads, deleting their temp files; bytes released."""
        self.ledger._purged_at = time.monotonic()
        released = 0
        rows = self.conn.execute("SELECT temp, path, size FROM reservations").fetchall()
        for temp, key, size in rows:
            if not (is_key(temp, temp=True) and is_key(key)):
                self.unreserve(temp)  # not a reservation a download made: dropped, never acted on
                continue
            if download_alive(self.ledger.root, os.path.join(self.ledger.root, key)):
                continue
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                self.ledger.unlink(temp)
            self.unreserve(temp)
            self._reconcile(key, None)
            released += size
        return released

    def rebuild(self) -> None:
        """Write the ledger afresh from one scan of the cache directory (deleting dead temp files)."""
        self.conn.execute("DELETE FROM files")
        self.conn.execute("DELETE FROM reservations")
        self.conn.execute("UPDATE totals SET bytes = 0")
        files, reservations = _scan(self.ledger)
        self.conn.executemany("INSERT INTO files VALUES (?, ?, ?)", files)
        self.conn.executemany("INSERT INTO reservations VALUES (?, ?, ?)", reservations)
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", [("complete", "1"), ("boot", _boot_id())]
        )
        self.ledger.rebuilds += 1
        self.ledger._purged_at = time.monotonic()

    def _reconcile(self, key: str, used_ns: int | None) -> None:
        """Make the row of `key` match the disk."""
        if not is_key(key):
            self.forget(key)
            return
        size = self.ledger.regular_size(key)
        if size is None:
            self.forget(key)
            return
        self.conn.execute(
            "INSERT INTO files VALUES (?, ?, ?) ON CONFLICT (path) DO UPDATE SET size = excluded.size",
            (key, size, self.ledger._stamp() if used_ns is None else used_ns),
        )


def download_alive(root: str, target: str) -> bool:
    """Whether a download of `target` runs: downloaders hold its lock exclusively while their temp exists."""
    with FileLock(lock_path_of(root, target)) as lock:
        return not lock.acquire(shared=True, blocking=False)


# Directories whose dead temp files this process has deleted (see `sweep_once`).
_swept: set[str] = set()
_swept_guard = threading.Lock()


def sweep_once(root: str, target: str) -> list[str]:
    """Delete the temp files of dead downloads beside `target` (whose exclusive lock the caller holds),
    the first time this process writes into its directory (a listing per directory per process, not
    per download); the ledger keys of those deleted.

    Dead downloads that reserved through the ledger are cleaned without it (their reservation names
    their temp file); this catches temp files the ledger never knew, such as an older version's. The
    directory is reached without following a link (`Ledger.open_dir`).
    """
    directory, held = os.path.split(target)
    with _swept_guard:
        if directory in _swept:
            return []
        _swept.add(directory)
    rel = os.path.relpath(directory, root)
    try:
        fd = ledger_of(root).open_dir(rel)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e in entries]
        for name in names:
            temp = parse_temp(name)
            if temp is None:
                continue
            # Ours to replace (we hold its lock), or nobody's: the lock of its target is free.
            if temp[0] == held or not download_alive(root, os.path.join(directory, temp[0])):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
                    removed.append(f"{rel}/{name}")
    finally:
        os.close(fd)
    return removed


def _scan(ledger: Ledger) -> tuple[list[tuple[str, int, int]], list[tuple[str, str, int]]]:
    """(files, live reservations) of every dataset directory of the ledger's cache directory; dead temp
    files are deleted. Nothing behind a symbolic link is listed, entered or deleted (`cache.nofollow`)."""
    root = ledger.root
    files: list[tuple[str, int, int]] = []
    reservations: list[tuple[str, str, int]] = []
    top = ledger.open_dir()
    try:
        for key, fd, st in dataset_files(top):
            directory, _, name = key.rpartition("/")
            temp = parse_temp(name)
            if temp is None:
                files.append((key, st.st_size, max(st.st_atime_ns, st.st_mtime_ns)))
            elif download_alive(root, os.path.join(root, directory, temp[0])):
                reservations.append((key, f"{directory}/{temp[0]}", max(st.st_size, temp[1] or 0)))
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
    finally:
        os.close(top)
    return files, reservations


def dataset_files(root_fd: int) -> Iterator[tuple[str, int, os.stat_result]]:
    """`cache.nofollow.walk_files` over every dataset directory of the cache directory open at `root_fd`
    (every real directory but `.lrs` and other dot names), keys relative to the cache directory."""
    listing = os.open(".", DIR_FLAGS, dir_fd=root_fd)  # its own offset: `root_fd` is shared by threads
    try:
        with os.scandir(listing) as entries:
            names = sorted(
                e.name for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            )
    finally:
        os.close(listing)
    for name in names:
        try:
            fd = open_subdir(root_fd, name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            yield from walk_files(fd, name)
        finally:
            os.close(fd)


def _open_root(root: str) -> int:
    """A descriptor of the cache directory `root` once it is still the user's own (`cache.trust` checked
    its path; this checks what the descriptor names)."""
    fd = os.open(root, DIR_FLAGS)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise TrustError(
            f"Invalid cache directory ({root}): owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}. "
            "Expected a directory of your own that only you can write."
        )
    return fd


def _connect(path: str) -> sqlite3.Connection:
    """Open the database at `path`, made 0600 first when new: SQLite gives its `-wal` and `-shm` files
    the database's mode, and its own default (0644 less the umask) would let every user read the cache's
    file names."""
    private_makedirs(os.path.dirname(path))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
            os.fchmod(fd, 0o600)  # made by an earlier version, or under an odd umask
    finally:
        os.close(fd)
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous = NORMAL")  # durable across a process crash; a power loss: see _boot_id
    return conn


def _stale(conn: sqlite3.Connection) -> str | None:
    """Why an existing database cannot be trusted as it is, or None."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != VERSION:
        return f"schema version {version}, expected {VERSION}"
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("complete") != "1":
        return "an earlier rebuild did not finish"
    if meta.get("boot") != _boot_id():
        return "written before the machine last started"
    return None


def _boot_id() -> str:
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


# -- one ledger per cache directory per process ----------------------------------------------------------

_ledgers: dict[str, Ledger] = {}
_ledgers_guard = threading.Lock()
_inherited: list[Ledger] = []


def ledger_of(root: str) -> Ledger:
    """This process's ledger of the cache directory `root` (absolute)."""
    with _ledgers_guard:
        ledger = _ledgers.get(root)
        if ledger is None:
            ledger = _ledgers[root] = Ledger(root)
            at_exit(_flush_all)
        return ledger


def _flush_all() -> None:
    for ledger in list(_ledgers.values()):
        ledger.flush(quiet=True)


def _forget_inherited() -> None:
    global _ledgers_guard, _swept_guard
    # Kept referenced, never closed: closing a connection inherited across fork may touch the parent's
    # WAL files; the child opens its own on first use.
    _inherited.extend(_ledgers.values())
    _ledgers.clear()
    _ledgers_guard = threading.Lock()
    _swept_guard = threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited)


def _ledger_error(path: str, exc: sqlite3.DatabaseError, rebuilt: str = "") -> CacheError:
    """A full disk (SQLite's SQLITE_FULL) said as such, in the words of a cache file that cannot be
    written; any other SQLite error as a ledger that cannot be read."""
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return CacheError(
            f"Could not write the cache ledger ({path}): {os.strerror(errno.ENOSPC)} ({exc}). Expected room "
            "on the cache directory's disk for cache_max_bytes (free space, or lower it)."
        )
    return CacheError(f"Invalid cache ledger ({path}): {exc}. Expected a readable SQLite database{rebuilt}.")
