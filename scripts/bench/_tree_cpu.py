"""CPU time of a process tree while it runs, shared by the reader bench and its peer child
(`_peer_case.py`, run in lerobot's reference venv: standard library only)."""

from __future__ import annotations

import multiprocessing
import os


def tree_cpu_seconds() -> float:
    """CPU time of this process and of its live multiprocessing children (the DataLoader workers), read
    while they run: the steady-state CPU per sample leaves out what starting the workers cost."""
    t = os.times()
    total = t.user + t.system
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total
