"""What lrs trusts on a node that other users share: directories it owns, and nothing else.

A cache directory, its `.lrs/` and a reshard's work directory hold files that lrs reads back and acts
on (a ledger whose rows it deletes, hash records it believes, a worker context it unpickles, locks it
creates). Another user who could write there could make lrs delete, write or run anything. So a
directory lrs reuses must be

- a real directory, not a symbolic link;
- owned by the current user and writable by nobody else (created 0700);
- in a parent that every user may write only when it is sticky (`/tmp`): in any other parent another
  user could rename the checked directory away and put their own in its place.

Anything else is one `TrustError` (exit 3 in the CLI) naming the path, its owner and its mode. (A cache
that a group shares on purpose, setgid and group-writable, is not supported yet: each user keeps their
own.)
"""

from __future__ import annotations

import grp
import os
import pwd
import stat

from cache.errors import PathError, TrustError, os_error_message

PRIVATE_DIR_MODE = 0o700


def owned_dir(path: str, *, what: str) -> str:
    """Create the directory `path` if missing (0700), and return it once it is one lrs may reuse (see
    the module docstring); its missing parents are created as `os.makedirs` does.

    Args:
        path: the directory.
        what: what it is, for the message ("cache directory", "work directory").

    Raises:
        TrustError: it belongs to another user, others may write it, it is a symbolic link or not a
            directory, or its parent lets another user replace it.
        PathError: it cannot be created (no permission, a read-only mount, a full disk).
    """
    try:
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise PathError(os_error_message(exc)) from exc
    check_owned_dir(path, what=what)
    return path


def check_owned_dir(path: str, *, what: str) -> None:
    """Raise TrustError unless `path` is a directory lrs may reuse (see `owned_dir`)."""
    st = os.lstat(path)
    problem = _problem(st)
    if problem is None:
        parent = os.path.dirname(os.path.abspath(path))
        pst = os.stat(parent)
        if pst.st_mode & stat.S_IWOTH and not pst.st_mode & stat.S_ISVTX:
            raise TrustError(
                f"Invalid {what} ({path}): its parent {parent} ({_describe(pst)}) lets any user replace it. "
                "Expected a parent that only its owner can write, or a sticky one like /tmp."
            )
        return
    raise TrustError(
        f"Invalid {what} ({path}): {problem} ({_describe(st)}). Expected a directory of your own that only "
        "you can write (chmod 700, or choose another path)."
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
