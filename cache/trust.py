"""What lrs trusts on a node that other users share: directories that only the user (or root) controls.

A cache directory, its `.lrs/` and a reshard's work directory hold files that lrs reads back and acts
on (a ledger whose rows it deletes, hash records it believes, a worker context it unpickles, locks it
creates). Another user who could write there, or replace the directory by another of their own, could
make lrs delete, write or run anything. So a directory lrs reuses must be

- a real directory, not a symbolic link;
- owned by the current user and writable by nobody else (created 0700);
- under a chain of ancestors, every one up to `/`, that nobody else can change: each is owned by the
  user or root and either writable by nobody else (no group or other write bit), or sticky (`/tmp`,
  1777), where nobody renames or deletes an entry they do not own. A group member who may write
  `/projects/<group>` (2775), or anyone who may write a non-sticky `/scratch` (0777) above
  `/scratch/alice/cache`, could rename the checked directory (or an ancestor) away and put their own in
  its place after the check.

The path is made absolute with `os.path.abspath` (not resolved), then walked from `/` one component at
a time with `lstat`, as the kernel walks it. An ancestor that is a symbolic link (`/var/run -> /run`) is
accepted when the directory holding the link passes (so nobody else can replace the link) and its
target, walked the same way, does; the walk continues from that target. At most 40 links are followed
(the kernel's own limit), beyond that the path is refused.

Anything else is one `TrustError` (exit 3 in the CLI) naming the path, the offending directory, its
owner, group and mode, and the fix. (A cache that a group shares on purpose, setgid and group-writable,
is not supported yet: each user keeps their own.) POSIX ACLs are not read: a directory whose ACL lets
others write it passes this check.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat

from cache.errors import PathError, TrustError, os_error_message

PRIVATE_DIR_MODE = 0o700
# Symbolic links followed while walking one path (Linux's MAXSYMLINKS).
_MAX_LINKS = 40


def owned_dir(path: str, *, what: str) -> str:
    """Create the directory `path` if missing (0700, its missing parents too), and return it once it is
    one lrs may reuse (see the module docstring).

    Args:
        path: the directory.
        what: what it is, for the message ("cache directory", "work directory").

    Raises:
        TrustError: it belongs to another user, others may write it, it is a symbolic link or not a
            directory, or an ancestor lets another user replace it.
        PathError: it cannot be created (no permission, a read-only mount, a full disk).
    """
    if not os.path.lexists(path):
        check_owned_dir(path, what=what)  # its ancestors first: nothing is made where others rule
        try:
            private_makedirs(path)
        except FileExistsError:
            pass  # made meanwhile, maybe not a directory: the check below says so
        except OSError as exc:
            raise PathError(os_error_message(exc)) from exc
    check_owned_dir(path, what=what)
    return path


def private_makedirs(path: str) -> None:
    """`os.makedirs(path, exist_ok=True)`, but every directory it creates is 0700 whatever the umask
    (`os.makedirs` gives the parents it creates the umask's default mode)."""
    try:
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileNotFoundError:
            parent = os.path.dirname(os.path.abspath(path))
            if parent == os.path.abspath(path):
                raise
            private_makedirs(parent)
            os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    _make_private(path)


def _make_private(path: str) -> None:
    """Give the directory just made at `path` the mode 0700 the umask may have cut (never through a link)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_DIR_MODE:
            os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)


def check_owned_dir(path: str, *, what: str) -> None:
    """Raise TrustError unless `path` is a directory lrs may reuse (see `owned_dir`); when it does not
    exist yet, unless the ancestors of it that exist let nobody else replace what lrs would make there.

    Raises:
        TrustError: as `owned_dir`.
        PathError: a part of it vanished while it was checked, or an ancestor is a dangling link.
    """
    try:
        _check(os.path.abspath(path), what=what)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise PathError(os_error_message(exc)) from exc


def _check(path: str, *, what: str) -> None:
    if not os.path.lexists(path):
        existing = os.path.dirname(path)
        while not os.path.lexists(existing):
            existing = os.path.dirname(existing)
        _walk(existing, what=what, path=path, links=[0])
        return
    st = os.lstat(path)
    problem = _problem(st)
    if problem is not None:
        raise TrustError(
            f"Invalid {what} ({path}): {problem} ({_describe(st)}). Expected a directory of your own that only "
            "you can write (chmod 700, or choose another path)."
        )
    _walk(os.path.dirname(path), what=what, path=path, links=[0])


def _walk(directory: str, *, what: str, path: str, links: list[int]) -> str:
    """Check `directory` (absolute, normalized) and every ancestor, following links as the kernel would;
    return the real directory it names."""
    current = "/"
    _check_ancestor(current, os.lstat(current), what=what, path=path)
    for name in directory.split("/"):
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)  # `current` holds no link: its lexical parent is its parent
            continue
        entry = os.path.join(current, name)
        st = os.lstat(entry)
        if stat.S_ISLNK(st.st_mode):
            links[0] += 1
            if links[0] > _MAX_LINKS:
                raise TrustError(
                    f"Invalid {what} ({path}): more than {_MAX_LINKS} symbolic links above it (at {entry}). "
                    "Expected a path that resolves in fewer."
                )
            # An absolute target replaces `current` in the join.
            current = _walk(os.path.join(current, os.readlink(entry)), what=what, path=path, links=links)
            continue
        _check_ancestor(entry, st, what=what, path=path)
        current = entry
    return current


def _check_ancestor(directory: str, st: os.stat_result, *, what: str, path: str) -> None:
    """Raise TrustError unless nobody but the user and root can rename or replace entries of `directory`."""
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        problem, fix = "is not a directory", "a path whose every ancestor is a directory"
    elif st.st_uid not in (0, me):
        problem = "is owned by another user, who can put their own directory in its place"
        fix = "a path under directories only you (or root) can write"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        who = "its group" if not st.st_mode & stat.S_IWOTH else "every user"
        problem = (
            f"is writable by {who} and not sticky, so another user can put their own directory in its place"
        )
        fix = (
            "a path under directories only you can write, or `chmod g-w,o-w` (or `chmod +t`) on that ancestor"
        )
    else:
        return
    raise TrustError(
        f"Invalid {what} ({path}): its ancestor {directory} ({_describe(st)}) {problem}. Expected {fix}."
    )


def _problem(st: os.stat_result) -> str | None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if not stat.S_ISDIR(mode):
        return "not a directory"
    if st.st_uid != os.geteuid():
        return "owned by another user"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by other users"
    return None


def _describe(st: os.stat_result) -> str:
    return f"owner {_user(st.st_uid)}, group {_group(st.st_gid)}, mode {stat.filemode(st.st_mode)}"


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"
