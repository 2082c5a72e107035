"""How an lrs process ends on a signal: SIGTERM (what SLURM, torchrun and `kill` send) unwinds like Ctrl-C.

Python turns SIGINT into `KeyboardInterrupt`, so `finally` blocks remove temporaries; SIGTERM's default
ends the process at once and leaves them. The command line and reshard's workers raise `Terminated`
instead (`raise_on_sigterm`), and exit 143 once unwound. A library object that owns a temporary (the
stream's default cache directory) registers its removal with `cleanup_on_sigterm`, which runs it and then
does what the process did before on SIGTERM (the previous handler, or the default: end with 143).
"""

from __future__ import annotations

import os
import signal
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

# The shell's exit status of a process ended by a signal: 128 + its number.
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived: raised like `KeyboardInterrupt` (a BaseException, so `except Exception` lets it
    through) to unwind and remove temporaries before the process exits with `EXIT_SIGTERM`."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


def raise_on_sigterm() -> bool:
    """Make SIGTERM raise `Terminated` in the main thread; False where that cannot be set (not the main
    thread)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGTERM, _raise_terminated)
    return True


# A finalizer holds its object weakly, so keeping it here keeps nothing else alive; spent ones are pruned.
_cleanups: list[weakref.finalize[Any, Any]] = []
_previous: Any = None
_installed_in: int | None = None


def cleanup_on_sigterm(finalizer: weakref.finalize[Any, Any]) -> None:
    """Run `finalizer` (e.g. the removal of a temporary directory) when SIGTERM arrives, then end as the
    process would have without it. Registered from another thread than the main one, it runs at exit
    only (a handler can only be set from the main thread)."""
    global _previous, _installed_in
    _cleanups[:] = [f for f in _cleanups if f.alive]
    _cleanups.append(finalizer)
    if _installed_in == os.getpid() or threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        return
    _previous, _installed_in = current, os.getpid()
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    for finalizer in list(_cleanups):
        finalizer()
    previous: Callable[[int, FrameType | None], Any] | int | None = _previous
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        # The default action, as if no handler had been set: the exit status stays "killed by SIGTERM".
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
