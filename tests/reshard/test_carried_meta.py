"""Files under the source's `meta/` that the reshard does not write itself (a tool's own provenance, like
embodied-data's `meta/extra/uuid_map.parquet`) reach the output unchanged and listed in the index."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reader.errors import DatasetError
from reader.format.catalog import Catalog
from reader.format.index import FILES_INDEX
from reshard.job import carried_meta
from reshard.source.model import open_source
from tests.support.datasets import resharded, verified

EXTRA = ("meta/extra/uuid_map.parquet", "meta/notes.txt")


def test_unknown_meta_files_are_carried_and_listed(
    sample_ds: Path, copy_ds: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    src = copy_ds(sample_ds, "src")
    (src / "meta/extra").mkdir()
    pq.write_table(
        pa.table({"episode_index": list(range(8)), "uuid": [f"u{i}" for i in range(8)]}), src / EXTRA[0]
    )
    (src / EXTRA[1]).write_text("recorded on robot 7\n")
    (src / "meta/.DS_Store").write_bytes(b"\0")
    out = resharded(src, tmp_path / "out")
    listed = pq.read_table(out / FILES_INDEX).column("path").to_pylist()
    for rel in EXTRA:
        assert (out / rel).read_bytes() == (src / rel).read_bytes()
        assert rel in listed
    assert not (out / "meta/.DS_Store").exists()
    verified(out, src)
    assert Catalog.open(str(out)).kind == "lrs/1"  # the carried files are part of a fresh index


def test_a_source_s_own_index_is_not_carried(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    src = copy_ds(sample_resharded_ds, "src")
    (src / "meta/lrs/stale-note.txt").write_text("left by an older lrs\n")
    out = resharded(src, tmp_path / "out")
    assert not (out / "meta/lrs/stale-note.txt").exists()
    assert Catalog.open(str(out)).kind == "lrs/1"


def test_a_carried_meta_file_over_the_bound_is_refused_after_reading_one_byte_past_it(
    sample_ds: Path, copy_ds: Callable[[Path, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = copy_ds(sample_ds, "src")
    (src / "meta/notes.txt").write_bytes(b"x" * 5000)
    monkeypatch.setattr(carried_meta, "MAX_METADATA_PARQUET_BYTES", 1000)
    with pytest.raises(
        DatasetError,
        match=r"meta/notes\.txt: Invalid meta file \(1001 bytes or more\)\. Expected at most 1000",
    ):
        carried_meta.carried_meta_files(open_source(str(src)))
