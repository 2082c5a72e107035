"""`verify --against SRC`: an lrs/1 dataset equals the v3 source it was resharded from.

Class 6 of `reshard.verify`, `source-tables`: schema, metadata, tasks, stats and every row equal the
source's (NaN equal to NaN). Class 7, `source-videos` (decoded frames identical when copied or above a
PSNR floor when re-encoded, each camera's re-encoded colours where the source's are, depth codes
identical whatever the mode), is judged in `reshard.verify.episode_videos`, which reads each episode
video once for both `videos` and `source-videos`.

Where the output left episodes out (`meta/lrs/dropped.json`), the source is compared as the output saw
it (`as_resharded`): the kept episodes, renumbered.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cache.remote import Remote
from reader.format.jsonfile import cat_json
from reader.format.v3 import EPISODES_DIR, STATS_PATH, TASKS_PATH
from reshard.job.meta import stats_json
from reshard.job.tables import SourceFileRows
from reshard.source.dropped import DROPPED_JSON, Selection
from reshard.source.model import V3Source
from reshard.source.selection import select
from reshard.verify.context import VerifyRun
from reshard.verify.output_checks import tables_to_check

# The v3 pointer columns of meta/episodes: rewritten by reshard, compared with the source's otherwise.
_POINTER_PREFIXES = ("data/", "videos/", "dataset_from_index", "dataset_to_index", "meta/episodes/")


def as_resharded(source: V3Source, remote: Remote) -> V3Source:
    """The source as the output saw it: where the output left episodes out (`meta/lrs/dropped.json`),
    the kept ones, renumbered."""
    if remote.exists(DROPPED_JSON):
        selection = Selection.from_json(cat_json(remote, DROPPED_JSON), file=remote.display(DROPPED_JSON))
        source = select(source, selection)
    return source


# --- 6. source tables ---------------------------------------------------------------------------------


def check_source_tables(run: VerifyRun) -> None:
    src, out = run.source, run.dataset
    if src is None:
        return
    if [e.length for e in src.episodes] != [e.length for e in out.episodes]:
        run.fail("source-tables", "Invalid episode lengths. Expected the source's, episode for episode.")
        return
    if src.remote.cat(TASKS_PATH) != out.remote.cat(TASKS_PATH):
        run.fail("source-tables", "Invalid content. Expected the source's bytes.", TASKS_PATH)
    stats = stats_json(src)
    if stats is not None and (not out.remote.exists(STATS_PATH) or stats != out.remote.cat(STATS_PATH)):
        expected = "the source's bytes" if src.parent is None else "the kept episodes' stats"
        run.fail("source-tables", f"Invalid content. Expected {expected}.", STATS_PATH)
    _compare_episode_columns(run, src, out)
    with _SourceRows(run, src) as source_rows:
        for rel, positions in tables_to_check(run):
            with run.local(run.remote, rel) as path:
                file = pq.ParquetFile(path)
                for entry in (run.layout.episodes[p] for p in positions):
                    expected = source_rows.read(entry.episode_index)
                    _compare_rows(run, entry, file.read_row_group(entry.row_group), expected)


class _SourceRows:
    """The source rows of episodes visited in order: one source data file open at a time."""

    def __init__(self, run: VerifyRun, source: V3Source) -> None:
        self.run, self.source = run, source
        self.stack = contextlib.ExitStack()
        self.current: tuple[str, SourceFileRows] | None = None
        self.schema: pa.Schema | None = None

    def __enter__(self) -> _SourceRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def read(self, ep: int) -> pa.Table:
        """The rows of output episode `ep` as the source has them (renumbered where episodes were left out)."""
        rel = self.source.data_file(self.source.episodes[ep])
        if self.current is None or self.current[0] != rel:
            self.stack.close()
            path = self.stack.enter_context(self.run.local(self.source.remote, rel))
            self.schema = self.schema or pq.read_schema(path)
            rows = SourceFileRows(self.source, rel, path, self.schema)
            self.stack.callback(rows.close)
            self.current = (rel, rows)
        table = self.current[1].episode(ep)
        return table.replace_schema_metadata(self.schema.metadata if self.schema else None)


def _compare_episode_columns(run: VerifyRun, src: V3Source, out: V3Source) -> None:
    a, b = src.episodes_table, out.episodes_table
    for name in a.column_names:
        if name.startswith(_POINTER_PREFIXES):
            continue
        if name not in b.column_names or not a.column(name).equals(b.column(name)):
            run.fail("source-tables", f"Invalid column {name!r}. Expected the source's values.", EPISODES_DIR)


def _compare_rows(run: VerifyRun, entry: Any, got: pa.Table, expected: pa.Table) -> None:
    ep, rel = entry.episode_index, entry.data_path
    if got.schema.metadata != expected.schema.metadata or not got.schema.equals(expected.schema):
        run.fail("source-tables", "Invalid schema or schema metadata. Expected the source's.", rel, ep)
    elif not tables_equal(got, expected):
        run.fail("source-tables", "Invalid rows. Expected every value equal to the source's.", rel, ep)


def tables_equal(a: pa.Table, b: pa.Table) -> bool:
    """Equal values, with NaN equal to NaN (a sensor that reported NaN is copied, not changed)."""
    if a.equals(b):
        return True
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    return all(
        a.column(n).equals(b.column(n)) or _nan_equal(a.column(n), b.column(n)) for n in a.column_names
    )


def _nan_equal(x: pa.ChunkedArray | pa.Array, y: pa.ChunkedArray | pa.Array) -> bool:
    x = x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x
    y = y.combine_chunks() if isinstance(y, pa.ChunkedArray) else y
    while pa.types.is_list(x.type) or pa.types.is_large_list(x.type) or pa.types.is_fixed_size_list(x.type):
        if not (x.is_null().equals(y.is_null()) and pc.list_value_length(x).equals(pc.list_value_length(y))):
            return False
        x, y = pc.list_flatten(x), pc.list_flatten(y)
    if not pa.types.is_floating(x.type) or not x.is_null().equals(y.is_null()):
        return False
    return bool(
        np.array_equal(x.to_numpy(zero_copy_only=False), y.to_numpy(zero_copy_only=False), equal_nan=True)
    )
