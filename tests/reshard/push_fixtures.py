"""A tiny lrs/1-shaped dataset directory for the push tests: random bytes where the layout puts files.

Push moves bytes and reads only `meta/lrs/files.parquet`, so the other files need the right names and
sizes, not valid content.
"""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from reader.format.index import FILES_INDEX, LAYOUT_JSON, FileEntry, files_to_table, kind_of

TOKEN = "hf_PlantedTokenDoNotLeak0123456789"
AWS_SECRET = "AwsSecretPlanted/DoNotLeak+0123456789abcdef"


def dataset_paths(episodes: int = 4, cameras: tuple[str, ...] = ("front", "wrist")) -> dict[str, int]:
    """Relative path -> size of every file but the files index (one larger video for the progress bar)."""
    sizes = {
        "data/chunk-000/file-000.parquet": 3000,
        "data/chunk-000/file-001.parquet": 2500,
        "meta/info.json": 700,
        "meta/stats.json": 900,
        "meta/tasks.parquet": 400,
        "meta/episodes/chunk-000/file-000.parquet": 1200,
        LAYOUT_JSON: 300,
        "meta/lrs/episodes.parquet": 800,
    }
    for cam in cameras:
        for ep in range(episodes):
            sizes[f"videos/observation.images.{cam}/chunk-000/file-{ep:03d}.mp4"] = 1500 + 100 * ep
    sizes["videos/observation.images.front/chunk-000/file-000.mp4"] = 200_000
    return sizes


def make_dataset(root: Path, *, seed: int = 0, **kwargs: object) -> Path:
    """Write the files of `dataset_paths(**kwargs)` with random bytes, then `meta/lrs/files.parquet`."""
    rng = random.Random(seed)
    entries = []
    for rel, size in dataset_paths(**kwargs).items():  # type: ignore[arg-type]
        data = rng.randbytes(size)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        entries.append(FileEntry(rel, size, hashlib.sha256(data).hexdigest(), kind_of(rel)))
    pq.write_table(files_to_table(entries), root / FILES_INDEX)
    return root


def copy_dataset(source: Path, dest: Path) -> Path:
    """A private copy of a dataset a test may modify."""
    shutil.copytree(source, dest)
    return dest


def all_files(root: Path) -> dict[str, bytes]:
    """Every regular file under `root`, by relative path, with its content."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def expected_files(root: Path) -> dict[str, bytes]:
    """What a complete push of the dataset in `root` must put at the target."""
    names = [row["path"] for row in pq.read_table(root / FILES_INDEX).to_pylist()] + [FILES_INDEX]
    return {rel: (root / rel).read_bytes() for rel in names}
