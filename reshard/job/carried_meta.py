"""The source's `meta/` files a reshard does not write itself, carried to the output unchanged.

Tools write their own files beside lerobot's (`embodied-data`'s `meta/extra/uuid_map.parquet`, the map back
to the source's episode ids): provenance a reshard must not drop. Every file under the source's `meta/`
is carried byte for byte and listed in `meta/lrs/files.parquet`, except what the reshard writes
(`info.json`, `tasks.parquet`, `stats.json`, `meta/episodes/`) and a source's own `meta/lrs/` index
(stale or not, the output gets a new one). Hidden files and interrupted writes are left behind. A store
that cannot list (plain HTTP) carries none.
"""

from __future__ import annotations

from cache.store import TEMP_SUFFIX, check_rel
from reader.errors import DatasetError
from reader.format.index import LRS_DIR
from reader.format.parquet import MAX_METADATA_PARQUET_BYTES
from reader.format.v3 import INFO_PATH, STATS_PATH, TASKS_PATH
from reshard.source.model import V3Source

META_DIR = "meta"
_WRITTEN = frozenset({INFO_PATH, TASKS_PATH, STATS_PATH})
_REWRITTEN_DIRS = (f"{META_DIR}/episodes/", f"{LRS_DIR}/")


def carried_paths(source: V3Source) -> list[str]:
    """The dataset-relative paths of the source's `meta/` files the output carries, sorted.

    Raises:
        DatasetError: a listed path is not one a dataset may hold (`check_rel`: `..`, a backslash, ...).
    """
    remote = source.whole.remote
    if remote.is_http:
        return []
    try:
        found = remote.fs.find(remote.path(META_DIR))
    except (FileNotFoundError, NotImplementedError):
        return []
    prefix = f"{remote.root}/" if remote.root else ""
    carried = []
    for path in sorted(found):
        rel = path[len(prefix) :] if path.startswith(prefix) else path
        name = rel.rsplit("/", 1)[-1]
        if (
            rel in _WRITTEN
            or rel.startswith(_REWRITTEN_DIRS)
            or name.startswith(".")
            or name.endswith(TEMP_SUFFIX)
        ):
            continue
        try:
            check_rel(rel)
        except ValueError as exc:
            raise DatasetError(str(exc), file=remote.display(META_DIR)) from None
        if not rel.startswith(f"{META_DIR}/"):
            raise DatasetError(
                f"Invalid meta file path ({rel!r}). Expected a path under meta/.",
                file=remote.display(META_DIR),
            )
        carried.append(rel)
    return carried


def carried_meta_files(source: V3Source) -> list[tuple[str, bytes]]:
    """Each carried `meta/` file (`carried_paths`) with its bytes, as the source holds them, each read no
    further than one byte past `MAX_METADATA_PARQUET_BYTES`.

    Raises:
        DatasetError: a file is larger than that (naming it).
    """
    remote = source.whole.remote
    carried = []
    for rel in carried_paths(source):
        data = remote.cat(rel, limit=MAX_METADATA_PARQUET_BYTES)
        if len(data) > MAX_METADATA_PARQUET_BYTES:
            raise DatasetError(
                f"Invalid meta file ({len(data)} bytes or more). Expected at most {MAX_METADATA_PARQUET_BYTES} "
                "bytes for a file a reshard carries.",
                file=remote.display(rel),
            )
        carried.append((rel, data))
    return carried
