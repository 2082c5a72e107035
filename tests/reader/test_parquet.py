"""`parse_parquet`: the one read of a metadata parquet file, done in the calling thread.

Exit 134 (`terminate called without an active exception`) came from `pq.read_table` over the file's bytes:
its dataset scan finishes on Arrow's worker threads after it returns, and one of them freed the bytes (a
Python object, so under the GIL) while the interpreter was exiting. The read must hold no reference to
the bytes once it has returned.
"""

from __future__ import annotations

import gc
import io
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cache.remote import resolve
from reader.errors import DatasetError
from reader.format.locate import FileRows, file_rows
from reader.format.parquet import (
    check_row_group_sizes,
    data_row_bytes,
    leaf_columns,
    parquet_limits,
    parse_parquet,
)


@pytest.fixture(scope="module")
def data() -> bytes:
    sink = io.BytesIO()
    table = pa.table({"index": list(range(1000)), "episode_index": [i // 100 for i in range(1000)]})
    pq.write_table(table, sink, row_group_size=100)
    return sink.getvalue()


def test_no_reference_to_the_bytes_outlives_the_read(data: bytes) -> None:
    for _ in range(50):  # the scan's tail on Arrow's threads kept one now and then (2 in 50 under load)
        before = sys.getrefcount(data)
        table = parse_parquet(data, file="f.parquet", columns=["index"])
        assert sys.getrefcount(data) == before
        assert table.column_names == ["index"] and table.num_rows == 1000


def test_missing_columns_and_bad_bytes(data: bytes) -> None:
    table = parse_parquet(data, file="f.parquet", columns=["index", "absent"], missing_ok=True)
    assert table.column_names == ["index"]
    with pytest.raises(DatasetError, match=r"f.parquet: not a readable parquet file"):
        parse_parquet(data[:100], file="f.parquet")


def test_a_footer_read_for_its_rows_is_freed_without_the_cycle_collector(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`FileMetaData.schema` ties the footer into a reference cycle: read once per data file, footers then
    piled up until the collector ran (50 MB at 8,000 episodes in 16 files). `file_rows` must not."""
    nested = pa.table({"state": [[float(i)] * 2 for i in range(1000)], "index": list(range(1000))})
    pq.write_table(nested, tmp_path / "file.parquet", row_group_size=100)
    gc.collect()
    gc.disable()
    try:
        rows = file_rows(resolve(str(tmp_path)), "file.parquet")
        alive = [o for o in gc.get_objects() if type(o) is pq.FileMetaData]
    finally:
        gc.enable()
    assert rows == FileRows("file.parquet", 1000, 0, 999)
    assert alive == []


def test_leaf_columns_number_the_column_chunks() -> None:
    sink = io.BytesIO()
    pq.write_table(pa.table({"state": [[1.0, 2.0]], "index": [7]}), sink)
    metadata = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    assert leaf_columns(metadata) == ["state.list.element", "index"]
    assert metadata.row_group(0).column(leaf_columns(metadata).index("index")).statistics.min == 7


def _bomb(rows: int, row_bytes: int) -> bytes:
    sink = io.BytesIO()
    table = pa.table({"index": list(range(rows)), "bomb": pa.array([bytes(row_bytes)] * rows, pa.binary())})
    pq.write_table(table, sink, compression="zstd", use_dictionary=False)
    return sink.getvalue()


def test_a_row_group_over_its_declared_bound_is_refused_before_it_is_decompressed() -> None:
    data = _bomb(20, 1 << 20)
    assert len(data) < 64 << 10  # 20 MiB of zeros: a few KiB of zstd
    with pytest.raises(
        DatasetError,
        match=r"^f\.parquet: Invalid row group 0 \(2\d{7} bytes uncompressed for 20 rows\)\. Expected at most "
        rf"{(16 << 20) + 20 * 1000} bytes \({16 << 20} \+ 1000 per row",
    ):
        parse_parquet(data, file="f.parquet", bytes_per_row=1000)
    assert parse_parquet(data, file="f.parquet", columns=["index"]).num_rows == 20  # no bound asked for
    metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    check_row_group_sizes(metadata, 1 << 20, file="f.parquet")  # 16 MiB + 20 MiB: within


def test_data_row_bytes_follows_the_declared_features() -> None:
    features = {
        "state": {"dtype": "float32", "shape": [6]},
        "index": {"dtype": "int64", "shape": [1]},
        "cam": {"dtype": "video", "shape": [64, 96, 3]},
        "img": {"dtype": "image", "shape": [64, 96, 3]},
        "task": {"dtype": "string", "shape": [1]},
    }
    assert data_row_bytes(features) == (64 << 10) + 4 * (24 + 8) + (32 << 20) + (64 << 10)


def test_a_metadata_parquet_file_over_its_bound_is_refused_before_it_is_parsed(data: bytes) -> None:
    with pytest.raises(
        DatasetError,
        match=r"^f\.parquet: Invalid parquet file \(\d+ bytes or more\)\. Expected at most 100 bytes",
    ):
        parse_parquet(data, file="f.parquet", max_bytes=100)
    assert parse_parquet(data, file="f.parquet", max_bytes=len(data)).num_rows == 1000
    assert parquet_limits("meta/tasks.parquet", "meta/info.json") == {"meta/tasks.parquet": 256 << 20}


def test_an_endless_meta_episodes_file_over_http_is_read_no_further_than_its_bound(
    tmp_path,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    from reader.format import v3
    from reader.format.v3 import Info, read_episode_files
    from tests.servers import Faults, RangeServer

    monkeypatch.setattr(v3, "MAX_METADATA_PARQUET_BYTES", 1 << 20)
    rel = "meta/episodes/chunk-000/file-000.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(b"PAR1")
    info = Info.parse(b'{"codebase_version": "v3.0", "fps": 30, "features": {}, "total_episodes": 1}')
    with RangeServer(tmp_path, faults=Faults(endless={rel: None})) as server:
        with pytest.raises(
            DatasetError, match=r"file-000\.parquet: Invalid parquet file \(1048577 bytes or more\)"
        ):
            read_episode_files(resolve(server.url, probe_ranges=False), info)
        assert server.endless_bytes < 64 << 20
