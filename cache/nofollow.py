"""Files of a cache directory reached through directory descriptors, never through a symbolic link.

The ledger's rebuild scan and eviction delete files. A symbolic link inside the cache (`zz -> /victim`,
planted by whoever controlled the directory at some time) must never take them outside it: a path such
as `<root>/zz/important.txt` follows `zz` in every `open`, `stat` and `unlink`, and `DirEntry.is_dir()`
follows links unless told not to. So these operations start from a descriptor of the cache directory
(opened once per process with `O_NOFOLLOW`, see `cache.ledger.Ledger.open_dir`) and open every
directory below it with `O_DIRECTORY | O_NOFOLLOW` relative to its parent's descriptor; files are
stat'ed and unlinked relative to their directory's descriptor without following a link. A rename of
the cache directory or of any ancestor after the descriptor was opened changes nothing they do.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_subdir(dir_fd: int, rel: str) -> int:
    """A new descriptor of the directory `rel` ("" for `dir_fd`'s own) below the directory open at
    `dir_fd`, each component opened without following a link. The caller closes it.

    Raises:
        FileNotFoundError: a component is missing.
        NotADirectoryError: a component is a symbolic link, `.`, `..` or not a directory.
    """
    fd = os.open(".", DIR_FLAGS, dir_fd=dir_fd)
    for name in rel.split("/") if rel else ():
        try:
            if name in ("", ".", ".."):
                raise NotADirectoryError(errno.ENOTDIR, "not a plain directory name", name)
            below = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
                raise NotADirectoryError(errno.ENOTDIR, "a symbolic link", name) from exc
            raise
        os.close(fd)
        fd = below
    return fd


def walk_files(dir_fd: int, prefix: str) -> Iterator[tuple[str, int, os.stat_result]]:
    """(path `prefix/...`, descriptor of its directory, lstat) of every regular file below the directory
    open at `dir_fd`, depth first. Links are never followed (a link to a folder is not entered, a link to
    a file is not listed); the descriptor yielded may be used (to unlink the file) until the next item."""
    fd = os.open(".", DIR_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        for entry in entries:
            rel = f"{prefix}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    sub = open_subdir(fd, entry.name)
                    try:
                        yield from walk_files(sub, rel)
                    finally:
                        os.close(sub)
            elif entry.is_file(follow_symlinks=False):
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield rel, fd, st
    finally:
        os.close(fd)
