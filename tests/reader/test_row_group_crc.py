"""Every ranged row-group read is checked against the CRC-32 the lrs/1 index records: a damaged file is
an error naming it, and a dataset re-published under a running stream is told apart by reading the index
once more."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reader import EpisodeStream
from reader.errors import DatasetError, RowGroupMismatch
from reader.format.index import EPISODES_INDEX, episodes_from_table
from tests.support.datasets import resharded


def _first_entry(root: Path):  # type: ignore[no-untyped-def]
    keys = [k for k in pq.read_table(root / EPISODES_INDEX).column_names if k.endswith("/path")]
    cameras = [k[len("videos/") : -len("/path")] for k in keys]
    return episodes_from_table(pq.read_table(root / EPISODES_INDEX), cameras)


def _reindex_files(root: Path) -> None:
    import hashlib

    from reader.format.index import FILES_INDEX, FileEntry, files_to_table, kind_of

    entries = [
        FileEntry(rel, len(data), hashlib.sha256(data).hexdigest(), kind_of(rel))
        for rel, data in ((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file())
        if rel != FILES_INDEX
    ]
    pq.write_table(files_to_table(entries), root / FILES_INDEX)


def test_the_index_records_a_crc_per_row_group_and_older_indexes_still_read(
    sample_resharded_ds: Path, tmp_path: Path
) -> None:
    entries = _first_entry(sample_resharded_ds)
    assert all(isinstance(e.row_group_crc32, int) for e in entries)
    old = shutil.copytree(sample_resharded_ds, tmp_path / "old")
    table = pq.read_table(old / EPISODES_INDEX)
    pq.write_table(table.drop_columns(["row_group_crc32"]), old / EPISODES_INDEX)
    assert all(e.row_group_crc32 is None for e in _first_entry(old))


def test_a_damaged_row_group_is_an_error_naming_the_file(sample_resharded_ds: Path, tmp_path: Path) -> None:
    root = shutil.copytree(sample_resharded_ds, tmp_path / "ds")
    entry = _first_entry(root)[0]
    path = root / entry.data_path
    data = bytearray(path.read_bytes())
    data[entry.row_group_offset + entry.row_group_bytes // 2] ^= 0x55
    path.write_bytes(bytes(data))
    with pytest.raises(RowGroupMismatch, match=rf"{entry.data_path}: Invalid row group 0 \(bytes .* CRC-32"):
        for _ in EpisodeStream(root, shuffle=False):
            pass


def test_a_dataset_republished_under_a_running_stream_is_named(sample_ds: Path, tmp_path: Path) -> None:
    live = resharded(sample_ds, tmp_path / "live")
    stream = EpisodeStream(live, shuffle=False)  # opens version 1's index
    # Version 2: the same episodes, other row groups (a rewrite with different column encodings).
    v2 = resharded(sample_ds, tmp_path / "v2")
    for path in sorted((v2 / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        pq.write_table(
            table.replace_schema_metadata(table.schema.metadata),
            path,
            row_group_size=10**9,
            use_dictionary=False,
            compression="zstd",
        )
    entries = _first_entry(v2)
    columns = pq.read_table(v2 / EPISODES_INDEX).to_pydict()
    columns["row_group_crc32"] = [e.row_group_crc32 + 1 for e in entries]  # any other index content
    pq.write_table(pa.table(columns), v2 / EPISODES_INDEX)
    shutil.rmtree(live / "data")
    shutil.copytree(v2 / "data", live / "data")
    shutil.rmtree(live / "meta/lrs")
    shutil.copytree(v2 / "meta/lrs", live / "meta/lrs")
    (live / "meta/lrs/files.parquet").write_bytes(b"")  # rewritten below: the index of version 2
    _reindex_files(live)
    with pytest.raises(DatasetError, match=r"changed since this stream opened it .* restart the job"):
        for _ in stream:
            pass


def _frames(root: str | Path, cache: Path) -> list[tuple[int, int, bytes]]:
    stream = EpisodeStream(root, shuffle=False, return_uint8=True, cache_dir=cache)
    key = stream.meta.video_keys[0]
    return [(int(s["episode_index"]), int(s["frame_index"]), s[key].numpy().tobytes()) for s in stream]


@pytest.mark.integration
def test_a_reader_that_starts_after_a_re_push_reads_the_new_version(sample_ds: Path, tmp_path: Path) -> None:
    from reshard.push.publish import push

    v1 = resharded(sample_ds, tmp_path / "v1")
    v2 = resharded(sample_ds, tmp_path / "v2", video="h264")  # the same episodes, other frames
    target, cache = tmp_path / "bucket", tmp_path / "cache"
    url = f"file://{target}"  # remote storage to the reader: fetched into its node cache
    push(v1, url, quiet=True)
    assert _frames(url, cache) == _frames(v1, tmp_path / "c1")  # the cache now holds version 1
    push(v2, url, quiet=True)  # data and videos first, meta/ and the index last
    after = _frames(url, cache)
    assert after == _frames(v2, tmp_path / "c2") and after != _frames(v1, tmp_path / "c1")


def test_a_reader_that_starts_during_a_re_push_never_mixes_versions(sample_ds: Path, tmp_path: Path) -> None:
    from reader.errors import LrsError
    from reshard.push.publish import push

    v1 = resharded(sample_ds, tmp_path / "v1")
    v2 = resharded(sample_ds, tmp_path / "v2", video="h264")
    target = tmp_path / "bucket"
    push(v1, str(target), quiet=True)
    # A re-push stopped after its first phase: version 2's videos under version 1's index.
    shutil.copytree(v2 / "videos", target / "videos", dirs_exist_ok=True)
    with pytest.raises(LrsError, match=r"videos/.*\.mp4"):
        _frames(f"file://{target}", tmp_path / "cache")
