"""Read what is there: stale data pointers (lerobot 0.4.x's converter) and `meta/episodes` without its
optional columns are read as lerobot reads them, with a warning, not refused.

The stale fixture (`tests.reshard.defects.stale_pointers`) names, for the first episode of each data file
after the first, the file before, as lerobot 0.4.x's v2.1 -> v3.0 converter does. On the sample (3
episodes a file) episodes 3 and 6 move; on the chunked sample (1 episode a file, 2 files a chunk) every
episode but 0 does, across chunk directories, and the last file is named by no episode at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from reader import EpisodeStream
from reader.errors import DatasetError
from reader.format.catalog import Catalog
from reader.format.locate import FileRows, locate, template_pattern
from reader.format.v3 import DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH, EpisodeInfo, Info
from reshard.cli import cli
from reshard.job.execute import ReshardOptions
from reshard.job.run import reshard
from reshard.source.model import open_source
from reshard.verify import verify
from tests.reshard.defects import stale_pointers, without_columns
from tests.servers import RangeServer


@pytest.fixture(scope="module")
def stale(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stale_pointers(sample_ds, tmp_path_factory.mktemp("stale") / "v3")


@pytest.fixture(scope="module")
def stale_chunked(sample_chunked_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stale_pointers(sample_chunked_ds, tmp_path_factory.mktemp("stale-chunked") / "v3")


def _doctor(root: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["doctor", str(root), "--json", "-q"])
    return result.exit_code, json.loads(result.output)


def _rows(root: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in sorted((root / "data").rglob("*.parquet"))]).sort_by(
        "index"
    )


def _pointers(root: Path) -> list[tuple[int, int]]:
    table = pq.read_table(root / "meta/episodes").sort_by("episode_index")
    return list(
        zip(*(table.column(n).to_pylist() for n in ("data/chunk_index", "data/file_index")), strict=True)
    )


# --- pure parts ---------------------------------------------------------------------------------------


def _episode(index: int, start: int, length: int, file: int) -> EpisodeInfo:
    return EpisodeInfo(index, length, start, start + length, 0, file, (), ())


def test_an_episode_moves_only_to_the_one_file_holding_its_rows() -> None:
    info = Info({"fps": 10, "features": {}, "data_path": DEFAULT_DATA_PATH})
    path = lambda f: DEFAULT_DATA_PATH.format(chunk_index=0, file_index=f)  # noqa: E731
    files = {path(f): FileRows(path(f), 10, 10 * f, 10 * f + 9) for f in (0, 1, 2)}
    files[path(3)] = FileRows(path(3), 10, 20, 29)  # the same rows as file 2: ambiguous
    episodes = [_episode(0, 0, 10, 0), _episode(1, 10, 10, 0), _episode(2, 20, 10, 1), _episode(3, 30, 5, 0)]
    located, moved = locate(info, episodes, files)
    assert [e.data_file_index for e in located] == [0, 1, 1, 0]  # 2: two files hold it; 3: none does
    assert [(m.episode, m.stated, m.found) for m in moved] == [(1, path(0), path(1))]


def test_the_data_path_template_reads_back_its_numbers() -> None:
    match = template_pattern(DEFAULT_DATA_PATH).fullmatch("data/chunk-002/file-1234.parquet")
    assert match is not None and (match["chunk_index"], match["file_index"]) == ("002", "1234")
    assert template_pattern(DEFAULT_DATA_PATH).fullmatch("data/chunk-002/file-001.parquet.tmp") is None


# --- stale pointers -----------------------------------------------------------------------------------


def test_the_fixture_is_stale_as_lerobot_0_4_writes_it(sample_chunked_ds: Path, stale_chunked: Path) -> None:
    true = _pointers(sample_chunked_ds)
    assert true == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0)]
    assert _pointers(stale_chunked) == [true[0], *true[:-1]]


@pytest.mark.parametrize("name", ["stale", "stale_chunked"])
def test_doctor_warns_and_finds_no_defect(request: pytest.FixtureRequest, name: str) -> None:
    code, report = _doctor(request.getfixturevalue(name))
    assert code == 0 and report["clean"], report["defects"]
    [warning] = report["warnings"]
    moved = "(3,6)" if name == "stale" else "(1-6)"
    assert (
        f"episodes {moved} at the wrong data file" in warning and "reshard` writes true pointers" in warning
    )


def test_missing_rows_stay_defects(stale: Path, copy_ds) -> None:  # type: ignore[no-untyped-def]
    root = copy_ds(stale)
    (root / "data/chunk-000/file-001.parquet").unlink()  # episodes 3-5: episode 3 is named in file 0
    code, report = _doctor(root)
    assert code == 1 and report["defective_episodes"] == [3, 4, 5], report["defects"]
    [warning] = report["warnings"]  # episode 6's rows are still found whole in file 2
    assert "1 episode (6) at the wrong data file" in warning


@pytest.mark.parametrize("name", ["stale", "stale_chunked"])
def test_reshard_writes_true_pointers_and_verifies(
    request: pytest.FixtureRequest, name: str, tmp_path: Path
) -> None:
    source = request.getfixturevalue(name)
    out = tmp_path / "out"
    reshard(str(source), out, quiet=True)
    assert verify(str(out), against=str(source)).ok
    rows = _rows(out)
    assert rows.equals(_rows(source).select(rows.column_names))
    for (chunk, file), episode in zip(_pointers(out), range(rows.num_rows), strict=False):
        held = pq.read_table(out / DEFAULT_DATA_PATH.format(chunk_index=chunk, file_index=file))
        assert episode in held.column("episode_index").to_pylist()


def test_skip_defective_keeps_every_episode(stale: Path, tmp_path: Path) -> None:
    reshard(str(stale), tmp_path / "out", options=ReshardOptions(skip_defective=True), quiet=True)
    assert json.loads((tmp_path / "out/meta/info.json").read_text())["total_episodes"] == 8


@pytest.mark.parametrize(
    ("name", "original"), [("stale", "sample_ds"), ("stale_chunked", "sample_chunked_ds")]
)
def test_the_plain_v3_reader_reads_the_rows_where_they_are(
    request: pytest.FixtureRequest, name: str, original: str, tmp_path: Path
) -> None:
    source = request.getfixturevalue(name)
    true = Catalog.open(str(request.getfixturevalue(original))).episodes
    assert Catalog.open(str(source)).episodes == true
    samples = list(EpisodeStream(source, shuffle=False, cache_dir=tmp_path / "cache"))
    rows = _rows(source)
    assert [int(s["index"]) for s in samples] == rows.column("index").to_pylist()
    assert [int(s["episode_index"]) for s in samples] == rows.column("episode_index").to_pylist()
    actions = np.stack(rows.column("action").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(np.stack([s["action"].numpy() for s in samples]), actions)


def test_over_http_the_file_after_the_last_named_is_found(
    stale_chunked: Path, sample_chunked_ds: Path
) -> None:
    with RangeServer(stale_chunked) as server:  # plain HTTP cannot list: the last file is named by none
        assert Catalog.open(server.url).episodes == Catalog.open(str(sample_chunked_ds)).episodes


# --- optional columns ---------------------------------------------------------------------------------


def test_info_without_path_templates_takes_lerobots() -> None:
    raw = {"codebase_version": "v3.0", "fps": 30, "features": {"cam": {"dtype": "video"}}}
    info = Info.parse(json.dumps(raw))
    assert info.data_path == DEFAULT_DATA_PATH and info.video_path == DEFAULT_VIDEO_PATH
    with pytest.raises(DatasetError, match="video_path.*missing although the dataset has videos"):
        Info.parse(json.dumps({**raw, "video_path": None}))  # lerobot cannot read that either


def test_episodes_without_optional_columns_read(sample_ds: Path, tmp_path: Path) -> None:
    cam = "videos/observation.images.cam0/to_timestamp"
    root = without_columns(sample_ds, tmp_path / "v3", ["tasks", "length", cam])
    source = open_source(str(root))
    reference = open_source(str(sample_ds))
    assert [e.length for e in source.episodes] == [e.length for e in reference.episodes]
    ends = [e.video("observation.images.cam0").to_timestamp for e in source.episodes]
    expected = [e.video("observation.images.cam0").to_timestamp for e in reference.episodes]
    np.testing.assert_allclose(ends, expected, atol=1e-6)
    [warning] = source.warnings
    assert "no 'tasks', 'length', 'videos/observation.images.cam0/to_timestamp' columns" in warning
    code, report = _doctor(root)
    assert code == 0 and report["warnings"] == [warning]
    reshard(str(root), tmp_path / "out", quiet=True)
    assert verify(str(tmp_path / "out"), against=str(root)).ok
    samples = list(EpisodeStream(root, shuffle=False, cache_dir=tmp_path / "cache"))
    tasks = pq.read_table(sample_ds / "meta/tasks.parquet").to_pylist()
    by_index = {row["task_index"]: row.get("task") or row.get("__index_level_0__") for row in tasks}
    assert [s["task"] for s in samples] == [by_index[int(s["task_index"])] for s in samples]
    assert len(samples) == reference.total_frames
