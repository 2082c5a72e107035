"""Bodies of the processes the multi-process cache tests spawn (module level, so spawn can import them)."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from concurrent.futures import Future
from multiprocessing.synchronize import Event

from cache import NodeCache
from tests.cache.helpers import FINGERPRINT, SourceFile, fast_remote, read


def access_order(files: Sequence[SourceFile], seed: int, accesses: int) -> list[SourceFile]:
    """The files one churning process reads, in order (also computed by the test to know the set)."""
    rng = random.Random(seed)
    return [rng.choice(list(files)) for _ in range(accesses)]


def churn(
    url: str,
    cache_dir: str,
    source_dir: str,
    files: list[SourceFile],
    *,
    seed: int,
    accesses: int,
    max_bytes: int | None,
) -> None:
    """Read files like a training worker: prefetch the next, hold the current, read a range of one.

    Exits non-zero (SystemExit) on the first wrong byte or failed prefetch.
    """
    rng = random.Random(seed + 1)
    order = access_order(files, seed, accesses)
    prefetched: list[Future[str]] = []
    with NodeCache(
        cache_dir, fast_remote(url), fingerprint=FINGERPRINT, max_bytes=max_bytes, max_workers=2
    ) as cache:
        for i, spec in enumerate(order):
            if i + 1 < len(order):
                upcoming = order[i + 1]
                prefetched.append(
                    cache.prefetch(
                        upcoming.rel, size=upcoming.size, sha256=upcoming.sha256 if i % 2 else None
                    )
                )
            expected = read(os.path.join(source_dir, spec.rel))
            with cache.hold(spec.rel, size=spec.size, sha256=spec.sha256 if i % 3 == 0 else None) as path:
                if read(path) != expected:
                    raise SystemExit(f"wrong bytes for {spec.rel} from {path}")
            # A range of any file, like a row group: served from the cache if there, else one ranged read.
            other = rng.choice(files)
            start = rng.randrange(other.size)
            end = rng.randrange(start, other.size + 1)
            if (
                cache.read_range(other.rel, start, end)
                != read(os.path.join(source_dir, other.rel))[start:end]
            ):
                raise SystemExit(f"wrong bytes for {other.rel} [{start}, {end})")
        for future in prefetched:
            future.result()


def fetch_one(url: str, cache_dir: str, spec: SourceFile) -> None:
    """Fetch one file (the test kills this process mid-download)."""
    with NodeCache(cache_dir, fast_remote(url), fingerprint=FINGERPRINT) as cache:
        cache.fetch(spec.rel, size=spec.size, sha256=spec.sha256)


def hold_until_killed(url: str, cache_dir: str, spec: SourceFile, held: Event, never: Event) -> None:
    """Hold one file, say so, and wait for an event that never comes (the test kills this process)."""
    with (
        NodeCache(cache_dir, fast_remote(url), fingerprint=FINGERPRINT) as cache,
        cache.hold(spec.rel, size=spec.size),
    ):
        held.set()
        never.wait()
