"""`Catalog.open`: the metadata files read at once, with the errors each missing or broken file always had."""

from __future__ import annotations

from pathlib import Path

import pytest

from reader.errors import DatasetError, LayoutError
from reader.format.catalog import Catalog
from reader.format.index import FILES_INDEX, LAYOUT_JSON
from reshard.demo.sample import write_sample
from reshard.job.run import reshard
from tests.servers import Faults, RangeServer


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("catalog")
    src = write_sample(base / "v3", episodes=3, cameras=1)
    reshard(str(src), base / "lrs", quiet=True)
    return src, base / "lrs"


def test_lrs_metadata_is_read_in_one_round_each_file_once(pair: tuple[Path, Path]) -> None:
    """layout.json, info.json, the two index tables, tasks and the range probe are asked for together: the
    server holds every answer until 5 requests are open at once, which only a client that sends them
    without waiting reaches (a fixed latency made this depend on how fast the machine started threads)."""
    with RangeServer(pair[1], faults=Faults(gather=5)) as server:
        catalog = Catalog.open(server.url)
        assert catalog.kind == "lrs/1" and len(catalog.episodes) == 3
        gets = [r.path for r in server.requests if r.method == "GET" and r.byte_range is None]
        assert len(gets) == len(set(gets)), f"a metadata file was read twice: {sorted(gets)}"
        # Range support is probed in the same round: one byte of info.json.
        probes = [(r.path, r.byte_range) for r in server.requests if r.byte_range is not None]
        assert probes == [("meta/info.json", "bytes=0-0")]
        assert server.max_in_flight >= 5


def test_plain_v3_opens_over_http_asking_for_layout_json_once(pair: tuple[Path, Path]) -> None:
    with RangeServer(pair[0]) as server:
        catalog = Catalog.open(server.url)
        assert catalog.kind == "v3" and len(catalog.episodes) == 3
        assert server.count(LAYOUT_JSON) == 1


def test_plain_v3_reads_each_metadata_file_once(pair: tuple[Path, Path]) -> None:
    with RangeServer(pair[0]) as server:
        Catalog.open(server.url)
        gets = [r.path for r in server.requests if r.method == "GET" and r.byte_range is None]
        assert "meta/tasks.parquet" in gets
        assert len(gets) == len(set(gets)), f"a metadata file was read twice: {sorted(gets)}"


def test_an_empty_v3_dataset_is_refused_with_reshards_message(tmp_path: Path) -> None:
    src = write_sample(tmp_path / "empty", episodes=0)
    with pytest.raises(DatasetError, match="meta/episodes: no episodes"):
        Catalog.open(str(src))


@pytest.mark.parametrize(
    ("rel", "error", "message"),
    [
        (FILES_INDEX, LayoutError, "missing: not an lrs/1 dataset"),
        ("meta/tasks.parquet", DatasetError, "missing"),
        ("meta/info.json", DatasetError, "missing: not a LeRobot dataset root"),
    ],
    ids=["files-index", "tasks", "info"],
)
def test_a_missing_metadata_file_keeps_its_error(
    pair: tuple[Path, Path], copy_ds, rel: str, error: type, message: str
) -> None:  # type: ignore[no-untyped-def]
    root = copy_ds(pair[1])
    (root / rel).unlink()
    with pytest.raises(error, match=message) as caught:
        Catalog.open(str(root))
    assert rel in str(caught.value)


def test_a_corrupt_index_is_a_layout_error(pair: tuple[Path, Path], copy_ds) -> None:  # type: ignore[no-untyped-def]
    root = copy_ds(pair[1])
    (root / FILES_INDEX).write_bytes(b"not parquet")
    with pytest.raises(LayoutError, match="not a readable parquet file"):
        Catalog.open(str(root))
