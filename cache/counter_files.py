"""Per-process counters files: how the cache and the reader add up the counters of every process.

A process keeps its counters in memory and mirrors them to `<directory>/<pid>-<token>.json` with a
`CounterFile`, written atomically (temp file, then rename): at most once per `FLUSH_INTERVAL_S` while
they change, when asked (`changed(now=True)`, `flush()`), and when the process exits (a DataLoader worker
included), so a process that is killed loses at most an interval of counts. The figures are advisory: a
write that fails (a full disk, a directory removed under a running download) loses them until a later
write, never the work that counted.

`read_counter_files` reads the file of every process, dead or alive. One failure policy: a file removed
since the directory was listed is skipped (a pruned run). A file that is not what `CounterFile` writes
(not JSON, no object of numeric counters, or rejected by the caller's parser) cannot be a live writer's
half-written file, since the rename is atomic: it is foreign or damaged (a crash before the data reached
the disk). It is left out of the sum with a `CountersWarning` naming it, so that asking for the figures
never fails on it and never miscounts without saying so.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from cache.store import at_exit, atomic_write

T = TypeVar("T")

# How often, at most, a process rewrites its counters file while the counters change.
FLUSH_INTERVAL_S = 1.0


class CountersWarning(UserWarning):
    """A counters file that is not what `CounterFile` writes was left out of a sum."""


class CounterFile:
    """This process's counters file in `directory` (see the module docstring for the policy).

    Args:
        directory: where every process of the same counters writes its file (made on the first write).
        payload: the JSON object to write: `{"counters": {name: number}}` and any other fields (a
            `pid` field is added). Called under this file's lock, so files never go back in time.
    """

    def __init__(self, directory: str, payload: Callable[[], Mapping[str, Any]]) -> None:
        self.path = os.path.join(directory, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        self.written = False
        self._payload = payload
        self._lock = threading.Lock()
        self._dirty = False
        self._discarded = False
        self._flushed_at = float("-inf")
        _live.add(self)
        at_exit(_flush_live)

    def changed(self, *, now: bool = False) -> None:
        """Note that the counters changed: write the file now if `now` or if the last write is
        `FLUSH_INTERVAL_S` old."""
        with self._lock:
            self._dirty = True
            due = now or time.monotonic() - self._flushed_at >= FLUSH_INTERVAL_S
        if due:
            self.flush()

    def flush(self) -> None:
        """Write the file if the counters changed since the last write; a failed write is tried again
        at the next change an interval later, or at the next `flush`."""
        with self._lock:
            if not self._dirty or self._discarded:
                return
            self._flushed_at = time.monotonic()
            try:
                atomic_write(
                    self.path, json.dumps({"pid": os.getpid(), **self._payload()}).encode(), mode=0o600
                )
            except OSError:
                return
            self._dirty = False
            self.written = True


# The counters files of this process, written once more when it exits.
_live: weakref.WeakSet[CounterFile] = weakref.WeakSet()


def discard_counter_files(directory: str) -> None:
    """Write no more counters files of this process under `directory`, which its owner is removing (a
    stream's temporary cache, at exit: a later write would make the directory again, for a stats file
    alone)."""
    root = os.path.join(os.path.abspath(directory), "")
    for file in list(_live):
        if os.path.abspath(file.path).startswith(root):
            _live.discard(file)
            with file._lock:
                file._discarded = True


def _flush_live() -> None:
    for file in list(_live):
        file.flush()


def read_counter_files(directory: str, parse: Callable[[Mapping[str, Any]], T | None]) -> list[T]:
    """`parse` of every process's counters file in `directory`, in file name order (None: not counted,
    e.g. another dataset's). A file that is not what `CounterFile` writes is left out with a
    `CountersWarning`; `parse` rejects a payload by raising `ValueError`, `KeyError` or `TypeError`."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json") and not n.startswith("."))
    except FileNotFoundError:
        return []
    out: list[T] = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
            _check_counters(payload)
            parsed = parse(payload)
        except FileNotFoundError:
            continue  # removed since listed
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(
                f"Invalid counters file ({path}): {exc!r}. Expected JSON written by lrs; left out of the sum.",
                CountersWarning,
                stacklevel=3,
            )
            continue
        if parsed is not None:
            out.append(parsed)
    return out


def _check_counters(payload: Any) -> None:
    counters = payload["counters"]
    if not isinstance(counters, dict):
        raise TypeError(f"counters {counters!r:.40}, expected an object")
    for name, value in counters.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"counter {name!r} is {value!r:.40}, expected a number")
