"""The on-disk layout of a node cache directory, and the file primitives the cache is built from.

```
<cache_dir>/
  <fingerprint>/<rel>                                published files: complete and checked
  <fingerprint>/<dir>/.<name>.<size|x>.<token>.lrs-part  a download in flight, or left by a killed one
  .lrs/budget.lock                                   held around every ledger transaction (cache.ledger)
  .lrs/ledger.sqlite                                 files, sizes, LRU order and reservations (cache.ledger)
  .lrs/locks/<fingerprint>/<rel>.lock                per-file flock: shared = in use, exclusive = written
  .lrs/stats/<pid>-<token>.json                      the counters of one cache object in one process
```

Locks are `fcntl.flock` on lock files that are never deleted (deleting one would let two processes lock
two different inodes under one name). The kernel drops a flock when its process dies, so a SIGKILLed
downloader or reader never wedges the others. A temp file exists only while its downloader holds the
exclusive lock of its target; one found with that lock free is stale and anyone may delete it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from cache.errors import IntegrityError
from cache.trust import private_makedirs

META_DIR = ".lrs"
TEMP_SUFFIX = ".lrs-part"
_FINGERPRINT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<size>\d+|x)\.[0-9a-f]{12}" + re.escape(TEMP_SUFFIX) + "$")
_CHUNK = 1 << 20
T = TypeVar("T")


def check_fingerprint(fingerprint: str) -> str:
    """Return `fingerprint` if it can name a directory of the cache, else raise ValueError."""
    if not isinstance(fingerprint, str) or not _FINGERPRINT.match(fingerprint):
        raise ValueError(
            f"Invalid fingerprint ({fingerprint!r}). Expected letters, digits, '.', '_' or '-', "
            "not starting with '.' or '-'."
        )
    return fingerprint


def check_rel(rel: str) -> str:
    """Return `rel` if it is a dataset-relative POSIX file path, else raise ValueError."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel:
        raise ValueError(
            f"Invalid dataset path ({rel!r}). Expected a relative POSIX path like 'data/a.parquet'."
        )
    if rel.endswith(TEMP_SUFFIX):
        raise ValueError(f"Invalid dataset path ({rel!r}). Expected a name not ending in {TEMP_SUFFIX!r}.")
    return rel


def is_key(key: object, *, temp: bool = False) -> bool:
    """Whether `key` can be a ledger key under a cache directory: `<fingerprint>/<rel>` (with `temp`, the
    same with a temp file's name). The ledger is a file on disk: a key read from it is checked before lrs
    deletes, locks or stats what it names, so that no row can point outside the cache directory."""
    if not isinstance(key, str):
        return False
    fingerprint, _, rel = key.partition("/")
    if not _FINGERPRINT.match(fingerprint):
        return False
    if temp:
        directory, _, name = rel.rpartition("/")
        rel = f"{directory}/x" if directory else "x"
        if parse_temp(name) is None:
            return False
    try:
        check_rel(rel)
    except ValueError:
        return False
    return True


def check_sha256(sha256: str | None) -> str | None:
    """Return `sha256` if it is None or 64 lowercase hex digits, else raise ValueError."""
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256.match(sha256)):
        raise ValueError(f"Invalid sha256 ({sha256!r}). Expected 64 lowercase hex digits.")
    return sha256


def check_size(size: int | None) -> int | None:
    """Return `size` if it is None or a non-negative int, else raise ValueError."""
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ValueError(f"Invalid size ({size!r}). Expected a non-negative number of bytes or None.")
    return size


@dataclass(frozen=True)
class CacheLayout:
    """Where the files of one dataset live inside a cache directory.

    Attributes:
        root: the cache directory, absolute.
        fingerprint: the dataset's directory name under `root`.
    """

    root: str
    fingerprint: str

    def data_path(self, rel: str) -> str:
        """Where the published copy of `rel` lives."""
        return os.path.join(self.root, self.fingerprint, rel)

    def lock_path(self, rel: str) -> str:
        """The lock file guarding `rel`."""
        return lock_path_of(self.root, self.data_path(rel))

    def key(self, rel: str) -> str:
        """The name of `rel` in the cache's ledger: its path relative to the cache directory."""
        return f"{self.fingerprint}/{rel}"

    def temp_path(self, rel: str, size: int | None) -> str:
        """A fresh temp file name beside the target of `rel`, carrying the size it reserves."""
        directory, name = os.path.split(self.data_path(rel))
        return os.path.join(
            directory, f".{name}.{'x' if size is None else size}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}"
        )

    def new_temp(self, rel: str, size: int | None) -> str:
        """Create an empty temp file beside the target of `rel`; its name carries the size it reserves."""
        temp = self.temp_path(rel, size)
        create_empty(temp)
        return temp


def create_empty(path: str) -> None:
    """Create an empty file at `path` (which must not exist), and its directory if needed."""
    fd = in_dir(path, lambda: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    os.close(fd)


# Directories this process knows exist: the hot paths (a download's temp file, a lock file) skip the
# `makedirs` stat walk for them. A directory removed behind our back fails the open, which is then
# retried once after `makedirs`.
_known_dirs: set[str] = set()


def in_dir(path: str, create: Callable[[], T]) -> T:
    """`create()` a file at `path`, making its directory first (0700, as every directory it makes)
    unless this process has seen it."""
    directory = os.path.dirname(path)
    if directory not in _known_dirs:
        private_makedirs(directory)
        _known_dirs.add(directory)
        return create()
    try:
        return create()
    except FileNotFoundError:
        _known_dirs.discard(directory)
        private_makedirs(directory)
        _known_dirs.add(directory)
        return create()


def lock_path_of(root: str, data_path: str) -> str:
    """The lock file of a published file at `data_path` under the cache directory `root`."""
    prefix = os.path.join(root, "")
    rel = data_path[len(prefix) :] if data_path.startswith(prefix) else os.path.relpath(data_path, root)
    return os.path.join(root, META_DIR, "locks", rel + ".lock")


def parse_temp(name: str) -> tuple[str, int | None] | None:
    """(target file name, reserved size or None) for a temp file name; None if it is not one."""
    match = _TEMP.match(name)
    if match is None:
        return None
    size = match.group("size")
    return match.group("name"), None if size == "x" else int(size)


# Lock descriptors open in this process. A forked child shares its parent's open file descriptions, and a
# flock belongs to the description: a copy kept in the child would keep the parent's lock alive for as
# long as the child lives (a file pinned forever, a finished download still blocking everyone, the child
# included). The child closes its copies at once; the parent's locks stay exactly as they were.
_lock_fds: set[int] = set()
_lock_fds_guard = threading.Lock()


def _close_inherited_lock_fds() -> None:
    global _lock_fds_guard
    for fd in _lock_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _lock_fds.clear()
    _lock_fds_guard = threading.Lock()


# Holding the guard across fork keeps a descriptor from being opened but not yet registered in the child.
os.register_at_fork(
    before=lambda: _lock_fds_guard.acquire(),
    after_in_parent=lambda: _lock_fds_guard.release(),
    after_in_child=_close_inherited_lock_fds,
)


_exit_hooks: list[Callable[[], None]] = []
_exit_hooks_pid: int | None = None


def at_exit(hook: Callable[[], None]) -> None:
    """Run `hook` when this process exits normally, a multiprocessing child included (those end with
    `os._exit`, which skips `atexit`, but run multiprocessing's own exit finalizers first)."""
    global _exit_hooks_pid
    if _exit_hooks_pid != os.getpid():
        import atexit
        import multiprocessing.util

        _exit_hooks_pid = os.getpid()
        _exit_hooks.clear()
        atexit.register(_run_exit_hooks)
        multiprocessing.util.Finalize(None, _run_exit_hooks, exitpriority=10)
    if hook not in _exit_hooks:
        _exit_hooks.append(hook)


def _run_exit_hooks() -> None:
    for hook in list(_exit_hooks):
        hook()


class FileLock:
    """A flock on a lock file (created on demand). One object, one open file description.

    Converting shared <-> exclusive on the same object is allowed (the kernel does not promise it is
    atomic, so callers re-check what they guard after a conversion). An object copied into a forked
    child is closed there.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._pid = os.getpid()
        with _lock_fds_guard:
            # O_NOFOLLOW: a lock path is never a link to somewhere else to create.
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
            self._fd: int | None = in_dir(path, lambda: os.open(path, flags, 0o600))
            _lock_fds.add(self._fd)

    def _own_fd(self) -> int | None:
        return self._fd if self._pid == os.getpid() else None

    def acquire(self, *, shared: bool, blocking: bool = True) -> bool:
        """Take the lock; False when `blocking` is off and another holder conflicts."""
        fd = self._own_fd()
        if fd is None:
            raise ValueError(f"Invalid lock ({self.path}). Expected an open lock of this process.")
        flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, flags)
        except OSError as exc:
            if not blocking and exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        return True

    def release(self) -> None:
        """Release the lock, keeping the file open for the next `acquire`."""
        fd = self._own_fd()
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release the lock and close the file (in a forked child, only forget it: it is closed)."""
        fd = self._own_fd()
        self._fd = None
        if fd is not None:
            with _lock_fds_guard:
                _lock_fds.discard(fd)
                os.close(fd)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def file_sha256(fd: int) -> str:
    """The sha256 of the whole file open at `fd` (read with pread, the offset is left alone)."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _version(st: os.stat_result) -> tuple[int, int, int, int]:
    # A published file is never modified in place, so device + inode + size + mtime name one version of it
    # (a rename keeps them: a download checked as a temp file is the same version once published).
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Verified:
    """The file versions this process has hashed and found to have the sha256 asked for.

    Every process hashes a file the first time it opens it, cached or read in place: nothing on disk
    vouches for a file's content, since bytes rot without a change of mtime and a record beside the file
    is only as trustworthy as whoever could write it. At most `limit` versions are remembered (the least
    recently checked go first, and are hashed again if opened again).
    """

    def __init__(self, limit: int = 65536) -> None:
        self._seen: OrderedDict[tuple[tuple[int, int, int, int], str], None] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, st: os.stat_result, sha256: str) -> None:
        """Remember that the version `st` has `sha256`."""
        key = (_version(st), sha256)
        with self._lock:
            self._seen[key] = None
            self._seen.move_to_end(key)
            while len(self._seen) > self._limit:
                self._seen.popitem(last=False)

    def mismatch(self, fd: int, sha256: str) -> str | None:
        """None when the file open at `fd` has `sha256` (hashed unless this process already has);
        otherwise the sha256 it has."""
        st = os.fstat(fd)
        with self._lock:
            if (_version(st), sha256) in self._seen:
                return None
        got = file_sha256(fd)
        if got != sha256:
            return got
        self.add(st, sha256)
        return None


def check_published(path: str, *, size: int | None, sha256: str | None, verified: Verified) -> str | None:
    """Check the published file at `path` (its use is recorded in the ledger by the caller).

    Returns:
        None when the file is there with the right size (and sha256, when given: hashed the first time
        this process opens this version of it); otherwise what is wrong.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return "not cached"
    try:
        st = os.fstat(fd)
        if size is not None and st.st_size != size:
            return f"size {st.st_size}, expected {size}"
        got = None if sha256 is None else verified.mismatch(fd, sha256)
        return None if got is None else f"sha256 {got}, expected {sha256}"
    finally:
        os.close(fd)


def read_span(path: str, start: int, end: int) -> bytes:
    """Bytes `[start, end)` of a local file.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: `end` is past the end of the file.
    """
    with open_fd(path) as fd:
        st = os.fstat(fd)
        if end > st.st_size:
            raise ValueError(
                f"Invalid byte range ([{start}, {end})) for {path} of {st.st_size} bytes. Expected end <= size."
            )
        chunks, offset = [], start
        while offset < end:
            chunk = os.pread(fd, end - offset, offset)
            if not chunk:
                raise IntegrityError(
                    f"Invalid file ({path}): it shrank while read. Expected {st.st_size} bytes."
                )
            chunks.append(chunk)
            offset += len(chunk)
    return b"".join(chunks)


def atomic_write(path: str, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to a temp file beside `path` (created with `mode`, before the umask), then rename it
    over `path`. A published output keeps the default; the cache's own files pass 0o600."""
    directory = os.path.dirname(path)
    temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        fd = in_dir(temp, lambda: os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


@contextlib.contextmanager
def open_fd(path: str) -> Iterator[int]:
    """A read-only file descriptor, closed on exit."""
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)
