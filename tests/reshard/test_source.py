"""The v3 source model: opening from local paths and URLs, and each validation error."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from reader.errors import DatasetError
from reader.format.v3 import episode_columns
from reshard.demo.sample import write_sample
from reshard.source.checks import check_rows, check_videos, validate
from reshard.source.model import V3Source, describe, open_source
from tests.reshard.test_bad_input import edit_info, set_value
from tests.servers import RangeServer

EPISODES = "meta/episodes/chunk-000/file-000.parquet"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample(tmp_path_factory.mktemp("src") / "ds", episodes=6, cameras=2)


@pytest.fixture
def ds(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ds"
    shutil.copytree(pristine, copy)
    return copy


def test_open_local_exposes_everything(pristine: Path) -> None:
    source = open_source(str(pristine))
    assert len(source.episodes) == 6
    assert source.video_keys == ["observation.images.cam0", "observation.images.cam1"]
    assert source.info.fps == 30
    assert source.tasks[0].startswith("task 0")
    assert "observation.state" in source.stats
    ep = source.episodes[4]
    assert source.data_file(ep) == "data/chunk-000/file-001.parquet"
    assert (
        source.video_file(ep, "observation.images.cam1")
        == "videos/observation.images.cam1/chunk-000/file-001.mp4"
    )
    assert ep.tasks == (source.tasks[4 % 3],)
    assert source.episodes_table.num_rows == 6
    assert "stats/action/mean" in source.episodes_table.column_names
    validate(source)
    assert describe(source)["frames"] == source.total_frames


def test_open_with_the_episode_columns_only(pristine: Path) -> None:
    whole, narrow = open_source(str(pristine)), open_source(str(pristine), all_columns=False)
    assert narrow.episodes == whole.episodes and narrow.fingerprint == whole.fingerprint
    assert set(narrow.episodes_table.column_names) == set(episode_columns(narrow.video_keys))
    assert not any(name.startswith("stats/") for name in narrow.episodes_table.column_names)


def test_the_whole_table_read_later_is_the_one_opened(ds: Path) -> None:
    whole, narrow = open_source(str(ds)), open_source(str(ds), all_columns=False)
    assert narrow.whole_episodes_table().equals(whole.episodes_table)
    table = pq.read_table(ds / EPISODES)
    pq.write_table(table, ds / EPISODES, compression="gzip")  # the same rows, other bytes
    with pytest.raises(
        DatasetError, match=r"file-000.parquet: Invalid content \(changed while lrs was reading"
    ):
        narrow.whole_episodes_table()


def test_open_file_url(pristine: Path) -> None:
    source = open_source(f"file://{pristine}")
    assert source.url == f"file://{pristine}"
    assert len(source.episodes) == 6


def test_open_http(pristine: Path) -> None:
    with RangeServer(pristine.parent) as server:
        source = open_source(f"{server.url}/{pristine.name}")
        assert len(source.episodes) == 6
        check_rows(source, source.data_files()[0])
        check_videos(source, source.video_files()[:1])
        assert server.count(method="GET") > 0


def _edit_episodes(root: Path, fn: Callable[[pa.Table], pa.Table]) -> None:
    path = root / EPISODES
    pq.write_table(fn(pq.read_table(path)), path)


def test_v2_dataset_says_how_to_convert(ds: Path) -> None:
    edit_info(ds, codebase_version="v2.1")
    with pytest.raises(
        DatasetError, match=r"meta/info.json.*codebase_version.*'v2.1'.*convert_dataset_v21_to_v30"
    ):
        open_source(str(ds))


def test_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"meta/info.json: missing: not a LeRobot v3 dataset"):
        open_source(str(tmp_path))


@pytest.mark.parametrize(
    "template",
    [
        "../outside/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "/etc/chunk-{chunk_index}.parquet",
        "data/../../x/{chunk_index}-{file_index}.parquet",
    ],
    ids=["dotdot", "absolute", "nested-dotdot"],
)
def test_escaping_templates_are_refused(ds: Path, template: str) -> None:
    edit_info(ds, data_path=template)
    with pytest.raises(DatasetError, match=r"info.json.*field 'data_path'.*Expected a relative path"):
        open_source(str(ds))


def test_missing_data_file_names_file_and_episode(ds: Path) -> None:
    (ds / "data/chunk-000/file-001.parquet").unlink()
    with pytest.raises(DatasetError, match=r"data/chunk-000/file-001.parquet, episode 3.*missing file"):
        open_source(str(ds))


def test_missing_video_names_camera(ds: Path) -> None:
    (ds / "videos/observation.images.cam1/chunk-000/file-000.mp4").unlink()
    with pytest.raises(
        DatasetError,
        match=r"cam1/chunk-000/file-000.mp4, episode 0, field 'videos/observation.images.cam1/file_index'",
    ):
        open_source(str(ds))


def test_pointer_to_nonexistent_file(ds: Path) -> None:
    _edit_episodes(ds, lambda t: set_value(t, "data/file_index", 2, 7))
    source = open_source(str(ds))  # episode 2's rows are whole in file 0: read there, with a warning
    assert source.data_file(source.episodes[2]) == "data/chunk-000/file-000.parquet"
    assert (
        "1 episode (2) at the wrong data file (episode 2: data/chunk-000/file-007.parquet"
        in source.warnings[0]
    )
    (ds / "data/chunk-000/file-000.parquet").unlink()  # now its rows are nowhere: episodes 0-2 defective
    with pytest.raises(DatasetError, match=r"file-000.parquet, episode 0.*missing file.*in episodes 0-2"):
        open_source(str(ds))


def test_ranges_must_tile(ds: Path) -> None:
    def shift(t: pa.Table) -> pa.Table:
        t = set_value(t, "dataset_from_index", 3, t.column("dataset_from_index")[3].as_py() + 1)
        return set_value(t, "length", 3, t.column("length")[3].as_py() - 1)

    _edit_episodes(ds, shift)
    with pytest.raises(
        DatasetError, match=r"episode 3, field 'dataset_from_index'.*Invalid dataset_from_index"
    ):
        open_source(str(ds))


def test_length_disagrees_with_range(ds: Path) -> None:
    _edit_episodes(ds, lambda t: set_value(t, "length", 1, 999))
    with pytest.raises(DatasetError, match=r"episode 1.*Invalid episode range"):
        open_source(str(ds))


def test_duplicated_frame_index(ds: Path) -> None:
    path = ds / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    frames = table.column("frame_index").to_pylist()
    frames[5] = frames[4]
    table = table.set_column(
        table.column_names.index("frame_index"), "frame_index", pa.array(frames, pa.int64())
    )
    pq.write_table(table, path)
    source = open_source(str(ds))
    with pytest.raises(DatasetError, match=r"file-000.parquet, episode 0, field 'frame_index'.*1 duplicated"):
        check_rows(source, "data/chunk-000/file-000.parquet")


def test_rows_missing_for_episode(ds: Path) -> None:
    path = ds / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    keep = pc.not_equal(table.column("index"), pa.scalar(3, pa.int64()))
    pq.write_table(table.filter(keep), path)
    source = open_source(str(ds))
    with pytest.raises(DatasetError, match=r"file-000.parquet, episode 0, field 'index'.*Invalid rows"):
        check_rows(source, "data/chunk-000/file-000.parquet")


def test_video_timestamps_outside_file(ds: Path) -> None:
    key = "observation.images.cam0"

    def push_out(t: pa.Table) -> pa.Table:
        t = set_value(t, f"videos/{key}/from_timestamp", 2, 50.0)
        return set_value(t, f"videos/{key}/to_timestamp", 2, 50.0 + t.column("length")[2].as_py() / 30)

    _edit_episodes(ds, push_out)
    source = open_source(str(ds))
    with pytest.raises(
        DatasetError, match=rf"cam0/chunk-000/file-000.mp4, episode 2, field 'videos/{key}/to_timestamp'"
    ):
        check_videos(source)


@pytest.mark.parametrize(
    ("rel", "size", "check", "message"),
    [
        ("data/chunk-000/file-001.parquet", 100, validate, r"file-001.parquet: not a readable parquet file"),
        (
            "videos/observation.images.cam0/chunk-000/file-001.mp4",
            50,
            check_videos,
            r"cam0/chunk-000/file-001.mp4: not a readable video",
        ),
    ],
    ids=["parquet", "video"],
)
def test_truncated_file(
    ds: Path, rel: str, size: int, check: Callable[[V3Source], None], message: str
) -> None:
    path = ds / rel
    path.write_bytes(path.read_bytes()[:size])
    source = open_source(str(ds))
    with pytest.raises(DatasetError, match=message):
        check(source)


def test_empty_dataset(ds: Path) -> None:
    _edit_episodes(ds, lambda t: t.slice(0, 0))  # info.json still says 6 episodes
    with pytest.raises(
        DatasetError, match=r"file-001.parquet: missing: 0 of total_episodes=6 episodes found"
    ):
        open_source(str(ds))
