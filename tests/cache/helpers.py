"""Helpers shared by the cache tests and by the processes they spawn (importable, light imports)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cache.backoff import RetryPolicy
from cache.remote import Remote, resolve

if TYPE_CHECKING:
    from cache.node import NodeCache

FINGERPRINT = "fp0"
# Fast backoff keeps fault-injection tests quick; 8 tries make a permanent failure of a 20% fault rate
# (0.2 ** 8) negligible.
FAST_RETRY = RetryPolicy(attempts=8, base_delay_s=0.002, max_delay_s=0.02)


def in_cache(cache: NodeCache, *rels: str) -> list[str]:
    """Those of `rels` whose files are in the cache directory, in the order given."""
    return [rel for rel in rels if os.path.exists(cache.path(rel))]


@dataclass(frozen=True)
class SourceFile:
    """A generated dataset file: path relative to the dataset root, size and sha256."""

    rel: str
    size: int
    sha256: str


def write_files(
    root: str | os.PathLike[str], sizes: dict[str, int], *, seed: int = 0
) -> dict[str, SourceFile]:
    """Write files of random bytes under `root`; returns their specs by relative path."""
    rng = random.Random(seed)
    specs = {}
    for rel, size in sizes.items():
        data = rng.randbytes(size)
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        specs[rel] = SourceFile(rel, size, hashlib.sha256(data).hexdigest())
    return specs


def read(path: str | os.PathLike[str]) -> bytes:
    """The whole content of a file."""
    with open(path, "rb") as f:
        return f.read()


def fast_remote(url: str) -> Remote:
    """`resolve(url)` with a fast retry policy."""
    return dataclasses.replace(resolve(url), retry=FAST_RETRY)


def part_files(cache_dir: str | os.PathLike[str]) -> list[str]:
    """Temp files (downloads in flight or left behind) anywhere in the cache directory."""
    found = []
    for dirpath, _dirs, names in os.walk(cache_dir):
        found += [os.path.join(dirpath, n) for n in names if n.endswith(".lrs-part")]
    return sorted(found)
