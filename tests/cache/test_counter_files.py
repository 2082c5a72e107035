"""`cache.counter_files`: one per-process counters file, written atomically, summed, and discarded."""

from __future__ import annotations

import os
from pathlib import Path

from cache.counter_files import CounterFile, discard_counter_files, read_counter_files


def _counts(directory: Path) -> list[int]:
    return read_counter_files(str(directory), lambda payload: payload["counters"]["n"])


def test_a_discarded_file_is_never_written_again(tmp_path: Path) -> None:
    inside, outside = tmp_path / "temporary-cache" / "stats", tmp_path / "kept" / "stats"
    values = {"n": 1}
    doomed = CounterFile(str(inside), lambda: {"counters": dict(values)})
    kept = CounterFile(str(outside), lambda: {"counters": dict(values)})
    doomed.changed(now=True)
    kept.changed(now=True)
    assert _counts(inside) == [1] and _counts(outside) == [1]

    discard_counter_files(str(tmp_path / "temporary-cache"))
    os.remove(doomed.path)
    os.rmdir(inside)
    values["n"] = 2
    doomed.changed(now=True)
    kept.changed(now=True)
    doomed.flush()
    assert not inside.exists()  # the removed directory is not made again for a stats file
    assert _counts(outside) == [2]


def test_discarding_a_sibling_with_a_common_prefix_keeps_the_file(tmp_path: Path) -> None:
    file = CounterFile(str(tmp_path / "cache-2" / "stats"), lambda: {"counters": {"n": 3}})
    discard_counter_files(str(tmp_path / "cache"))
    file.changed(now=True)
    assert _counts(tmp_path / "cache-2" / "stats") == [3]
