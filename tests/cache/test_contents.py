"""`lrs cache`: what a node cache holds per dataset, and a clean that evicts least recently used first and
never deletes a file in use (through the ledger, as every reader evicts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cache import CacheError, cache_contents, clean_cache
from reshard.cli import cli
from tests.cache.conftest import FINGERPRINT, UNIT


def test_a_clean_keeps_what_is_in_use_and_the_newest(source, serve, open_cache, cache_dir: Path) -> None:
    root, _files = source
    cache = open_cache(serve(root).url)
    for name in ("a.bin", "b.bin", "c.bin"):
        cache.fetch(name, size=UNIT)
    listed = cache_contents(cache_dir)
    assert [(d.fingerprint, d.files, d.bytes) for d in listed.datasets] == [(FINGERPRINT, 3, 3 * UNIT)]
    with cache.hold("a.bin", size=UNIT):  # the least recently used, but a reader holds it
        kept = clean_cache(cache_dir, keep_bytes=UNIT)
        assert os.path.exists(cache.path("a.bin"))
    assert (kept.count, kept.bytes, kept.fits) == (2, 2 * UNIT, True)
    assert not os.path.exists(cache.path("b.bin")) and not os.path.exists(cache.path("c.bin"))
    assert cache_contents(cache_dir).total == UNIT
    emptied = clean_cache(cache_dir)
    assert emptied.count == 1 and cache_contents(cache_dir).datasets == ()
    assert cache.fetch("b.bin", size=UNIT)  # the cache works on: its ledger is true


def test_the_command_lists_and_cleans(source, serve, open_cache, cache_dir: Path) -> None:
    root, _files = source
    cache = open_cache(serve(root).url)
    cache.fetch("a.bin", size=UNIT)
    listed = CliRunner().invoke(cli, ["cache", "--cache-dir", str(cache_dir)])
    assert listed.exit_code == 0 and f"{FINGERPRINT}  1 files  1000 B" in listed.output, listed.output
    cleaned = CliRunner().invoke(cli, ["cache", "--cache-dir", str(cache_dir), "--clean"])
    assert cleaned.exit_code == 0 and "0 datasets, 0 B; evicted 1 files (1000 B)." in cleaned.output
    keep = CliRunner().invoke(cli, ["cache", "--cache-dir", str(cache_dir), "--keep", "1GiB"])
    assert keep.exit_code == 2 and "--keep goes with --clean" in keep.output


def test_a_folder_that_is_no_cache_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("not a cache")
    with pytest.raises(CacheError, match=r"Invalid cache directory \(.*\): no \.lrs/ in it"):
        clean_cache(tmp_path)
    assert (tmp_path / "mine.txt").exists()
