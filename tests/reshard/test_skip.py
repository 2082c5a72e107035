"""`lrs reshard --skip-defective` and `--skip-episodes`: the other episodes as a valid v3 dataset.

The defective fixture (`tests.reshard.defects`) has one of each defect public datasets ship, in every
episode but 6. Reshard refuses it, naming every defective episode and writing nothing; with
`--skip-defective` it writes episode 6 alone, as episode 0. On the clean sample, `--skip-episodes`
drops a user's choice. Each output passes `verify --against` its source (which reads the mapping back),
its stats are the kept episodes' (checked against numpy over the kept rows), and the reader gives the
source's rows, renumbered.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from reader import EpisodeStream
from reader.errors import DatasetError
from reshard.cli import cli
from reshard.job.execute import ReshardOptions
from reshard.job.run import reshard
from reshard.source.dropped import DROPPED_JSON, Selection, make_selection, parse_episode_list
from reshard.source.selection import renumber_rows
from reshard.verify import verify


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*args, "-q"])
    return result.exit_code, result.output


def _rows(root: Path) -> pa.Table:
    files = sorted((root / "data").rglob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    return table.sort_by("index")


def _info(root: Path) -> dict:
    return json.loads((root / "meta/info.json").read_text())


# --- pure parts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3", [3]), ("3,1", [1, 3]), ("0-2,5", [0, 1, 2, 5]), (" 4 , 4-5 ", [4, 5])],
    ids=["one", "unsorted", "range", "overlap"],
)
def test_episode_lists_parse(text: str, expected: list[int]) -> None:
    assert parse_episode_list(text, 8) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("8", r"Invalid episode \(8\).*0\.\.7"),
        ("x", "Invalid episode list item"),
        ("5-2", "FIRST-LAST"),
        ("", "item"),
    ],
    ids=["past-the-end", "word", "backwards", "empty"],
)
def test_bad_episode_lists_are_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_episode_list(text, 8)


def test_a_selection_round_trips_and_refuses_to_drop_everything() -> None:
    selection = make_selection(5, [1], {3: "short video"}, ["orphan"])
    assert selection.kept == (0, 2, 4)
    assert [(d.episode, d.reason) for d in selection.dropped] == [(1, "skip-episodes"), (3, "short video")]
    assert Selection.from_json(selection.to_json(), file="x") == selection
    with pytest.raises(DatasetError, match="all 2 episodes would be left out"):
        make_selection(2, [0], {1: "empty video"})
    with pytest.raises(DatasetError, match="Invalid dropped-episodes record"):
        Selection.from_json(b'{"dropped": 3}', file="x")


def test_rows_are_renumbered_in_their_own_types() -> None:
    from reader.format.v3 import EpisodeInfo

    rows = pa.table({"index": pa.array([10, 11], pa.int64()), "episode_index": pa.array([4, 4], pa.int32())})
    episode = EpisodeInfo(1, 2, 3, 5, 0, 0, (), ())
    out = renumber_rows(rows, episode)
    assert out.column("index").to_pylist() == [3, 4] and out.column("episode_index").to_pylist() == [1, 1]
    assert out.schema == rows.schema


# --- reshard ------------------------------------------------------------------------------------------


def test_a_defective_source_is_refused_with_every_defective_episode(defective: Path, tmp_path: Path) -> None:
    code, output = _run("reshard", str(defective), "--out", str(tmp_path / "out"))
    assert code == 3, output
    assert "in episodes 0-5,7" in output and "--skip-defective" in output, output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, no work directory


def test_skip_defective_writes_the_other_episodes(defective: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, output = _run("reshard", str(defective), "--out", str(out), "--skip-defective")
    assert code == 0, output
    assert "left out 7 source episodes (0-5,7)" in output
    dropped = json.loads((out / DROPPED_JSON).read_text())
    assert [d["episode"] for d in dropped["dropped"]] == [0, 1, 2, 3, 4, 5, 7]
    reasons = {d["episode"]: d["reason"] for d in dropped["dropped"]}
    assert "missing file" in reasons[0] and "empty video" in reasons[3] and "Invalid rows" in reasons[7]
    assert any("file-009.parquet" in n for n in dropped["ignored"])  # the orphan: not copied
    assert any("Invalid row count" in n for n in dropped["ignored"])  # rows of no episode: not read
    info = _info(out)
    source_rows = _rows(defective)
    kept = source_rows.filter(pa.compute.equal(source_rows.column("episode_index"), 6))
    assert info["total_episodes"] == 1 and info["total_frames"] == kept.num_rows
    assert info["splits"] == {"train": "0:1"}
    rows = _rows(out)
    assert rows.column("episode_index").to_pylist() == [0] * kept.num_rows
    assert rows.column("index").to_pylist() == list(range(kept.num_rows))
    others = [n for n in rows.column_names if n not in ("index", "episode_index")]
    assert rows.select(others).equals(kept.select(others))
    layout = json.loads((out / "meta/lrs/layout.json").read_text())
    assert layout["dropped_episodes"] == 7 and layout["source"]["total_episodes"] == 8
    report = verify(str(out), against=str(defective))
    assert report.ok, report.describe()
    assert "source-tables" in report.passed and "source-videos" in report.passed
    samples = list(EpisodeStream(out, shuffle=False, cache_dir=tmp_path / "cache"))
    assert [int(s["index"]) for s in samples] == list(range(kept.num_rows))
    assert {int(s["episode_index"]) for s in samples} == {0}


def test_skip_episodes_renumbers_and_keeps_meta_consistent(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, output = _run("reshard", str(sample_ds), "--out", str(out), "--skip-episodes", "1,3-4")
    assert code == 0, output
    kept = [0, 2, 5, 6, 7]
    source_rows = _rows(sample_ds)
    expected = source_rows.filter(pa.compute.is_in(source_rows.column("episode_index"), pa.array(kept)))
    rows = _rows(out)
    assert rows.num_rows == expected.num_rows == _info(out)["total_frames"]
    assert rows.column("index").to_pylist() == list(range(rows.num_rows))
    renumbered = {old: new for new, old in enumerate(kept)}
    assert rows.column("episode_index").to_pylist() == [
        renumbered[e] for e in expected.column("episode_index").to_pylist()
    ]
    episodes = pq.read_table(out / "meta/episodes").sort_by("episode_index")
    assert episodes.column("episode_index").to_pylist() == list(range(5))
    starts = episodes.column("dataset_from_index").to_pylist()
    ends = episodes.column("dataset_to_index").to_pylist()
    assert starts[0] == 0 and starts[1:] == ends[:-1] and ends[-1] == rows.num_rows
    assert episodes.column("stats/episode_index/max").to_pylist() == [[e] for e in range(5)]
    assert episodes.column("stats/index/min").to_pylist() == [[s] for s in starts]
    # The stats are the kept rows', computed here from the rows themselves.
    stats = json.loads((out / "meta/stats.json").read_text())
    action = np.stack(expected.column("action").to_numpy(zero_copy_only=False))
    assert stats["action"]["count"] == [rows.num_rows]
    np.testing.assert_allclose(stats["action"]["mean"], action.mean(axis=0), rtol=1e-6)  # float32 rows
    np.testing.assert_allclose(stats["action"]["std"], action.std(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats["action"]["min"], action.min(axis=0))
    assert stats["index"]["max"] == [rows.num_rows - 1]
    assert verify(str(out), against=str(sample_ds)).ok


def test_verify_catches_an_output_that_lies_about_its_dropped_episodes(
    sample_ds: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    reshard(str(sample_ds), out, options=ReshardOptions(skip_episodes="2"), quiet=True)
    path = out / DROPPED_JSON
    path.write_bytes(path.read_bytes().replace(b'"episode": 2', b'"episode": 3'))  # same size
    report = verify(str(out), against=str(sample_ds))
    assert not report.ok and report.failed_check == "files", report.describe()  # files.parquet's hash
    # With the hash made to match, the rows of the wrong episodes differ from the source's.
    files = pq.read_table(out / "meta/lrs/files.parquet").to_pylist()
    for row in files:
        if row["path"] == DROPPED_JSON:
            row["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    pq.write_table(pa.Table.from_pylist(files), out / "meta/lrs/files.parquet")
    report = verify(str(out), against=str(sample_ds))
    assert not report.ok and report.failed_check == "source-tables", report.describe()


def test_the_reader_gives_the_kept_rows_renumbered(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    reshard(str(sample_ds), out, options=ReshardOptions(skip_episodes="0,4"), quiet=True)
    source_rows = _rows(sample_ds)
    kept = source_rows.filter(
        pa.compute.is_in(source_rows.column("episode_index"), pa.array([1, 2, 3, 5, 6, 7]))
    )
    samples = list(EpisodeStream(out, shuffle=False, cache_dir=tmp_path / "cache"))
    assert len(samples) == kept.num_rows
    assert sorted(int(s["index"]) for s in samples) == list(range(kept.num_rows))
    by_index = {int(s["index"]): s for s in samples}
    actions = np.stack(kept.column("action").to_numpy(zero_copy_only=False))
    for i in (0, kept.num_rows // 2, kept.num_rows - 1):
        np.testing.assert_array_equal(by_index[i]["action"].numpy(), actions[i])
        assert int(by_index[i]["frame_index"]) == kept.column("frame_index")[i].as_py()


def test_parts_and_finalize_give_the_bytes_of_one_run(defective: Path, tmp_path: Path) -> None:
    one, split = tmp_path / "one", tmp_path / "split"
    options = ReshardOptions(skip_defective=True, skip_episodes="6", data_file_mb=0.01)
    with pytest.raises(DatasetError, match="all 8 episodes would be left out"):
        reshard(str(defective), one, options=options, quiet=True)
    assert not one.exists() and not any(tmp_path.iterdir())
    options = ReshardOptions(skip_defective=True, data_file_mb=0.01)
    reshard(str(defective), one, options=options, quiet=True)
    for index in range(3):
        reshard(str(defective), split, options=options, part=(index, 3), quiet=True)
    reshard(str(defective), split, options=options, finalize_only=True, quiet=True)
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(split) for p in split.rglob("*") if p.is_file())
    for rel in files:
        assert (one / rel).read_bytes() == (split / rel).read_bytes(), rel


def test_a_rerun_with_other_skip_options_is_refused(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    reshard(str(sample_ds), out, options=ReshardOptions(skip_episodes="1"), quiet=True)
    code, output = _run("reshard", str(sample_ds), "--out", str(out), "--skip-episodes", "2")
    assert code != 0 and "skip_episodes: '1' -> '2'" in output, output
    code, output = _run("reshard", str(sample_ds), "--out", str(out), "--skip-episodes", "1")
    assert code == 0 and "already a complete reshard" in output, output


def test_a_clean_reshard_records_no_skip_options(sample_resharded_ds: Path) -> None:
    params = json.loads((sample_resharded_ds / "meta/lrs/layout.json").read_text())["params"]
    assert "skip_defective" not in params and "skip_episodes" not in params
    assert not (sample_resharded_ds / DROPPED_JSON).exists()


def test_a_missing_video_drops_only_its_episodes(sample_ds: Path, tmp_path: Path) -> None:
    root = tmp_path / "v3"
    shutil.copytree(sample_ds, root)
    (root / "videos/observation.images.cam0/chunk-000/file-001.mp4").unlink()  # episodes 3-5
    reshard(str(root), tmp_path / "out", options=ReshardOptions(skip_defective=True), quiet=True)
    dropped = Selection.from_json((tmp_path / "out" / DROPPED_JSON).read_bytes(), file="x")
    assert [d.episode for d in dropped.dropped] == [3, 4, 5]
    assert verify(str(tmp_path / "out"), against=str(root)).ok


def test_skip_defective_leaves_out_exactly_the_episodes_a_cut_video_lost(
    truncated: Path, tmp_path: Path
) -> None:
    # cam0's first file is cut inside episode 1: episode 0 is whole and is kept.
    code, output = _run("reshard", str(truncated), "--out", str(tmp_path / "refused"))
    assert code == 3 and "in episodes 1-2" in output and "Invalid video (truncated: " in output, output
    out = tmp_path / "out"
    code, output = _run("reshard", str(truncated), "--out", str(out), "--skip-defective")
    assert code == 0, output
    assert "left out 2 source episodes (1-2)" in output, output
    dropped = json.loads((out / DROPPED_JSON).read_text())
    assert [d["episode"] for d in dropped["dropped"]] == [1, 2]
    report = verify(str(out), against=str(truncated))
    assert report.ok, report.describe()
    assert _info(out)["total_episodes"] == 6
