"""Fixtures of the cache tests: a generated source dataset and loopback HTTP servers over it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cache import NodeCache
from tests.cache.helpers import FINGERPRINT, SourceFile, fast_remote, write_files
from tests.servers import Faults, RangeServer

# Equal sizes keep budget arithmetic in the tests readable: a budget of 3 * UNIT holds 3 of them.
UNIT = 1000
SOURCE_SIZES = {
    "a.bin": UNIT,
    "b.bin": UNIT,
    "c.bin": UNIT,
    "d.bin": UNIT,
    "videos/cam/episode_000.mp4": UNIT,
    "data/chunk-000/file-000.parquet": 4 * UNIT,
    "empty.bin": 0,
}


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, SourceFile]]:
    """A read-only dataset directory and the specs of its files."""
    root = tmp_path_factory.mktemp("source")
    return root, write_files(root, SOURCE_SIZES, seed=1)


@pytest.fixture
def serve() -> Iterator[Callable[..., RangeServer]]:
    """Start a `RangeServer(root, faults=...)`; every server started is stopped at teardown."""
    started: list[RangeServer] = []

    def start(root: str | Path, faults: Faults | None = None) -> RangeServer:
        server = RangeServer(root, faults=faults or Faults()).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    """An empty cache directory."""
    return tmp_path / "cache"


@pytest.fixture
def open_cache(cache_dir: Path) -> Iterator[Callable[..., NodeCache]]:
    """Open `NodeCache(cache_dir, fast_remote(url), fingerprint=FINGERPRINT, **options)`; closed at teardown."""
    opened: list[NodeCache] = []

    def open_(url: str, **options: object) -> NodeCache:
        cache = NodeCache(cache_dir, fast_remote(url), fingerprint=FINGERPRINT, **options)
        opened.append(cache)
        return cache

    yield open_
    for cache in opened:
        cache.close()
