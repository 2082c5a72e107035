"""`lrs verify`: every class of violation is caught and reported first-class-first, with file and episode.

Each corruption is applied to a copy of a good lrs/1 output, then the index is made consistent again
(`reindex`: sizes, hashes and row-group ranges recomputed) so that the earlier check classes pass and
the check under test is the one that must fail.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from reader.format.index import EPISODES_INDEX, FILES_INDEX, LAYOUT_JSON, FileEntry, files_to_table, kind_of
from reshard.cli import cli
from reshard.demo.sample import draw_frame, encode_frames
from reshard.job.tables import row_group_ranges
from reshard.verify import verify
from tests.support.opens import count_av_opens

DATA = "data/chunk-000/file-000.parquet"
CAM0 = "observation.images.cam0"


def video(episode: int, key: str = CAM0) -> str:
    return f"videos/{key}/chunk-000/file-{episode:03d}.mp4"


def reindex(root: Path) -> None:
    """Recompute files.parquet and the episodes index's sizes, row-group ranges and CRCs from the files on
    disk."""
    index = pq.read_table(root / EPISODES_INDEX)
    columns = {name: index.column(name).to_pylist() for name in index.column_names}
    for row, path in enumerate(columns["data_path"]):
        ranges = row_group_ranges(pq.read_metadata(root / path))
        if columns["row_group"][row] < len(ranges):
            offset, size = ranges[columns["row_group"][row]]
            columns["row_group_offset"][row], columns["row_group_bytes"][row] = offset, size
            data = (root / path).read_bytes()[offset : offset + size]
            columns["row_group_crc32"][row] = zlib.crc32(data)
    for name in [n for n in columns if n.endswith("/path")]:
        sizes = name[: -len("path")] + "bytes"
        columns[sizes] = [(root / p).stat().st_size for p in columns[name]]
    pq.write_table(pa.table(columns, schema=index.schema), root / EPISODES_INDEX)
    entries = [
        FileEntry(rel, len(data), hashlib.sha256(data).hexdigest(), kind_of(rel))
        for rel, data in ((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file())
        if rel != FILES_INDEX
    ]
    pq.write_table(files_to_table(entries), root / FILES_INDEX)


def rewrite_data(root: Path, fn: Callable[[list[pa.Table]], list[pa.Table]], **writer: object) -> None:
    """Rewrite the data file from its row groups, transformed by `fn`, one written row group per table."""
    file = pq.ParquetFile(root / DATA)
    groups = fn([file.read_row_group(i) for i in range(file.num_row_groups)])
    options = {"write_page_index": True, **writer}
    with pq.ParquetWriter(root / DATA, file.schema_arrow, **options) as out:
        for table in groups:
            out.write_table(table, row_group_size=table.num_rows)


def edit_episodes_meta(root: Path, column: str, episode: int, delta: float) -> None:
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[episode] += delta
    table = table.set_column(
        table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)
    )
    pq.write_table(table, path)


def bump_action(groups: list[pa.Table]) -> list[pa.Table]:
    table = groups[3]
    action = table.column("action").combine_chunks()
    values = pc.add(action.flatten(), pa.scalar(1.0, pa.float32()))
    bumped = pa.FixedSizeListArray.from_arrays(values, action.type.list_size)
    groups[3] = table.set_column(table.schema.get_field_index("action"), "action", bumped)
    return groups


def merge_pairs(groups: list[pa.Table]) -> list[pa.Table]:
    return [pa.concat_tables(groups[i : i + 2]) for i in range(0, len(groups), 2)]


def swap_videos(root: Path) -> None:
    a, b = root / video(0), root / video(1)
    tmp = a.with_suffix(".tmp")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def other_pixels(root: Path, source: Path) -> None:
    """Episode 2's video encoded like the source (AV1, GOP 2) from frames drawn with another seed."""
    length = pq.read_table(source / "meta/episodes/chunk-000/file-000.parquet").column("length")[2].as_py()
    frames = (draw_frame(2, i, 0, height=64, width=96, seed=99) for i in range(length))
    encode_frames(frames, str(root / video(2)), codec="av1", fps=30, gop=2, crf=30, height=64, width=96)


# (check class, message pattern, corruption of the output root given the source root, reindex after)
CORRUPTIONS: dict[str, tuple[str, str, Callable[[Path, Path], None], bool]] = {
    "no-layout-json": (
        "layout",
        r"layout\.json: missing: not an lrs/1",
        lambda r, s: (r / LAYOUT_JSON).unlink(),
        False,
    ),
    "info-totals": (
        "layout",
        r"Invalid totals \(8 episodes, 1 frames\)",
        lambda r, s: (r / "meta/info.json").write_text(
            json.dumps({**json.loads((r / "meta/info.json").read_text()), "total_frames": 1})
        ),
        False,
    ),
    "flipped-byte": (
        "files",
        rf"{video(4)}: Invalid sha256",
        lambda r, s: (r / video(4)).write_bytes(
            bytes([(r / video(4)).read_bytes()[0] ^ 1]) + (r / video(4)).read_bytes()[1:]
        ),
        False,
    ),
    "unlisted-file": (
        "files",
        r"data/extra\.bin: not listed",
        lambda r, s: (r / "data/extra.bin").write_bytes(b"x"),
        False,
    ),
    "missing-video": ("files", rf"{video(5)}: missing", lambda r, s: (r / video(5)).unlink(), False),
    "episodes-share-row-groups": (
        "tables",
        r"Invalid row groups \(4\)\. Expected 8, one per episode",
        lambda r, s: rewrite_data(r, merge_pairs),
        True,
    ),
    "no-page-index": (
        "tables",
        rf"{DATA}, episode 0: Invalid page index",
        lambda r, s: rewrite_data(r, lambda g: g, write_page_index=False),
        True,
    ),
    "rows-out-of-order": (
        "tables",
        rf"{DATA}, episode 6: Invalid index column",
        lambda r, s: rewrite_data(
            r, lambda g: [*g[:6], g[6].take(pa.array(range(g[6].num_rows - 1, -1, -1))), g[7]]
        ),
        True,
    ),
    "shifted-video-timestamps": (
        "pointers",
        r"meta/episodes, episode 2: Invalid video time range \(0\.5, ",
        lambda r, s: [
            edit_episodes_meta(r, f"videos/{CAM0}/{f}", 2, 0.5) for f in ("from_timestamp", "to_timestamp")
        ],
        True,
    ),
    "swapped-videos": (
        "videos",
        rf"{video(0)}, episode 0: Invalid frame count",
        lambda r, s: swap_videos(r),
        True,
    ),
    "changed-value": (
        "source-tables",
        rf"{DATA}, episode 3: Invalid rows\. Expected every value equal",
        lambda r, s: rewrite_data(r, bump_action),
        True,
    ),
    "other-pixels": (
        "source-videos",
        rf"{video(2)}, episode 2: Invalid frames \(PSNR min [\d.]+ dB\)\. Expected frames identical",
        other_pixels,
        True,
    ),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_each_violation_is_caught_in_its_class(
    name: str, sample_resharded_ds: Path, sample_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    check, pattern, corrupt, needs_reindex = CORRUPTIONS[name]
    root = copy_ds(sample_resharded_ds)
    corrupt(root, sample_ds)
    if needs_reindex:
        reindex(root)
    report = verify(str(root), against=str(sample_ds))
    assert not report.ok
    assert report.failed_check == check, report.describe()
    order = ["layout", "files", "tables", "pointers", "videos", "source-tables", "source-videos"]
    assert report.passed == tuple(order[: order.index(check)])
    assert any(re.search(pattern, str(v)) for v in report.violations), report.describe()

    result = CliRunner().invoke(cli, ["verify", str(root), "--against", str(sample_ds)])
    assert result.exit_code == 1
    assert f"FAIL  {check}" in result.output


def test_reindex_alone_keeps_a_good_output_good(
    sample_resharded_ds: Path, sample_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    root = copy_ds(sample_resharded_ds)
    reindex(root)
    assert verify(str(root), against=str(sample_ds)).ok


def test_good_output_passes_every_check_and_exits_zero(sample_resharded_ds: Path, sample_ds: Path) -> None:
    result = CliRunner().invoke(
        cli, ["verify", str(sample_resharded_ds), "--against", str(sample_ds), "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ok"] and doc["violations"] == []
    assert doc["passed"] == [
        "layout",
        "files",
        "tables",
        "pointers",
        "videos",
        "source-tables",
        "source-videos",
    ]
    assert all(v["identical"] and v["psnr_min_db"] is None for v in doc["videos"])
    # Without a source, the layout's own invariants only.
    assert verify(str(sample_resharded_ds)).passed[-1] == "videos"


@pytest.mark.integration
def test_psnr_floor_applies_to_reencoded_outputs(sample_ds: Path, tmp_path: Path) -> None:
    from reshard.job.execute import ReshardOptions
    from reshard.job.run import reshard

    reshard(str(sample_ds), tmp_path / "out", options=ReshardOptions(video="h264"), quiet=True)
    assert verify(str(tmp_path / "out"), against=str(sample_ds), min_psnr=25).ok
    report = verify(str(tmp_path / "out"), against=str(sample_ds), min_psnr=99)
    assert report.failed_check == "source-videos"
    assert "Expected every frame >= 99 dB" in str(report.violations[0])
    assert len(report.violations) == 16


def test_plain_v3_dataset_is_not_lrs(sample_ds: Path) -> None:
    result = CliRunner().invoke(cli, ["verify", str(sample_ds)])
    assert result.exit_code == 1
    assert "FAIL  layout" in result.output and "not an lrs/1 dataset" in result.output


def test_unreadable_source_is_an_input_error(sample_resharded_ds: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["verify", str(sample_resharded_ds), "--against", str(tmp_path / "nope")]
    )
    assert result.exit_code == 3
    assert "meta/info.json: missing" in result.output


def test_verify_over_http(sample_resharded_ds: Path, sample_ds: Path) -> None:
    from tests.servers import RangeServer

    with RangeServer(sample_resharded_ds) as server:
        report = verify(server.url, against=str(sample_ds))
    assert report.ok, report.describe()


@pytest.mark.integration
def test_nan_values_copied_from_the_source_verify_equal(sample_ds: Path, tmp_path: Path) -> None:
    """A sensor that reported NaN: the copy keeps the NaN, and NaN == NaN for verify (it said the rows
    differed)."""
    import shutil

    from reshard.verify.against_source import tables_equal

    src = tmp_path / "src"
    shutil.copytree(sample_ds, src)
    path = src / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    states = table.column("observation.state").to_pylist()
    states[1][2] = float("nan")
    column = table.schema.get_field_index("observation.state")
    table = table.set_column(column, "observation.state", pa.array(states, table.schema.field(column).type))
    pq.write_table(table, path)
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["reshard", str(src), "--out", str(out), "-q"]).exit_code == 0
    result = CliRunner().invoke(cli, ["verify", str(out), "--against", str(src)])
    assert result.exit_code == 0, result.output
    # NaN equals NaN, but a NaN against a number, or a null against a NaN, still differs.
    nan = pa.table({"x": pa.array([[1.0, float("nan")]], pa.list_(pa.float32()))})
    assert tables_equal(nan, nan.select(["x"]))
    assert not tables_equal(nan, pa.table({"x": pa.array([[1.0, 2.0]], pa.list_(pa.float32()))}))
    assert not tables_equal(nan, pa.table({"x": pa.array([[1.0, None]], pa.list_(pa.float32()))}))


# --- workers and opens -------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize(
    "name", ["good", "flipped-byte", "rows-out-of-order", "swapped-videos", "changed-value", "other-pixels"]
)
def test_two_workers_give_the_report_of_one(
    name: str, sample_resharded_ds: Path, sample_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    """`--workers 2` splits files, tables and videos into jobs; the report is the one of a single pass,
    violations in the same order, video comparisons included."""
    root = copy_ds(sample_resharded_ds)
    if name != "good":
        _, _, corrupt, needs_reindex = CORRUPTIONS[name]
        corrupt(root, sample_ds)
        if needs_reindex:
            reindex(root)
    one = verify(str(root), against=str(sample_ds))
    two = verify(str(root), against=str(sample_ds), workers=2)
    assert two.to_json() == one.to_json()
    assert one.ok == (name == "good") and len(one.videos) == (16 if name in ("good", "other-pixels") else 0)


def test_the_cli_runs_two_workers(sample_resharded_ds: Path, sample_ds: Path) -> None:
    args = ["verify", str(sample_resharded_ds), "--against", str(sample_ds)]
    one, two = (CliRunner().invoke(cli, [*args, *extra]) for extra in ([], ["--workers", "2"]))
    assert (two.exit_code, two.output) == (one.exit_code, one.output) == (0, one.output)
    assert CliRunner().invoke(cli, [*args, "--workers", "0"]).exit_code == 2


def test_each_video_is_opened_once(
    sample_resharded_ds: Path, sample_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a source, each episode video is opened once for `videos` and `source-videos` both, and a
    packed source video once for all its episodes (it was 1 + 1 + 1 opens per episode video)."""
    opened = count_av_opens(monkeypatch)
    assert verify(str(sample_resharded_ds), against=str(sample_ds)).ok
    outputs = {str(p) for p in (sample_resharded_ds / "videos").rglob("*.mp4")}
    sources = {str(p) for p in (sample_ds / "videos").rglob("*.mp4")}
    assert {p: opened[p] for p in outputs} == dict.fromkeys(outputs, 1)
    assert {p: opened[p] for p in sources} == dict.fromkeys(sources, 1)


def test_a_good_video_leaves_nothing_to_keep(sample_resharded_ds: Path) -> None:
    """Without a source, reading the videos keeps only the ones with a problem: the parent's memory grows
    with what is wrong, not with the episodes."""
    from reader.format.layout import Layout
    from reshard.source.model import open_source
    from reshard.verify.context import VerifyRun
    from reshard.verify.episode_videos import read_episode_videos

    layout = Layout.load(str(sample_resharded_ds))
    dataset = open_source(str(sample_resharded_ds), check_files=False)
    run = VerifyRun(layout.remote, sample_resharded_ds, 30.0, layout, dataset, None)
    outcome = read_episode_videos(run, range(len(layout.episodes)), compare=False)
    assert outcome.cameras == () and outcome.error is None


@pytest.mark.integration
def test_a_killed_worker_is_one_error_line(sample_resharded_ds: Path) -> None:
    """A verify worker SIGKILLed (the OOM killer): exit 3 with one line, as for reshard."""
    import os
    import subprocess
    import sys

    from reshard.job.execute import KILL_ENV

    argv = [sys.executable, "-c", "from reshard.cli import main; main()", "verify", str(sample_resharded_ds)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), KILL_ENV: "verify-job:1"}
    killed = subprocess.run([*argv, "--workers", "2"], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == 3, killed.stderr[-2000:]
    assert killed.stderr.startswith("Error: A worker process ended abruptly (killed, or out of memory)")
    assert len(killed.stderr.strip().splitlines()) == 1, killed.stderr


def test_a_stale_data_pointer_is_a_violation(
    sample_resharded_ds: Path, sample_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    """The output's `meta/episodes` is checked as written: a data pointer naming another file is reported
    (verify used to relocate it from every data file's footer, as a reader of a v3 source does, and pass).
    The rows of the file it no longer points at no longer add up: `tables` finds it first."""
    root = copy_ds(sample_resharded_ds)
    edit_episodes_meta(root, "data/file_index", 3, 5)
    reindex(root)
    report = verify(str(root), against=str(sample_ds))
    assert report.failed_check == "tables", report.describe()
    assert re.search(
        r"Invalid row count \(\d+\)\. Expected \d+, the rows of the episodes", str(report.violations[0])
    )


def test_what_a_video_job_raises_stops_verify(
    sample_resharded_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error while reading the videos (a failed fetch) is raised, never taken for a clean pass."""
    import reshard.verify.jobs as jobs

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("Could not fetch a video")

    monkeypatch.setattr(jobs, "read_episode_videos", fail)
    with pytest.raises(OSError, match="Could not fetch a video"):
        verify(str(sample_resharded_ds))


# --- a resized re-encode (--resize): compared with its source frames scaled the same way --------------


@pytest.fixture(scope="module")
def resized_ds(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.datasets import resharded

    # 96x64 -> 64x48: a smaller frame than the source, wider than x265's cu-tree fix applies to (<= 48).
    return resharded(sample_ds, tmp_path_factory.mktemp("resized") / "out", video="hevc", resize="64x48")


def _claim_params(root: Path, **params: str) -> None:
    path = root / LAYOUT_JSON
    doc = json.loads(path.read_text())
    doc["params"].update(params)
    path.write_text(json.dumps(doc, indent=1))
    reindex(root)


@pytest.mark.integration
def test_a_resized_reencode_verifies_against_its_source_scaled_alike(
    resized_ds: Path, sample_ds: Path, copy_ds: Callable[..., Path]
) -> None:
    report = verify(str(resized_ds), against=str(sample_ds))
    assert report.ok, report.describe()
    assert all(v.reencoded and v.psnr_min_db >= 30 for v in report.videos)
    right = min(v.psnr_min_db for v in report.videos)
    # Another size is found on every frame; another filter lowers the PSNR (by less than the encode's
    # loss on this smooth content, so within the 30 dB floor: measured 33.5 -> 32.2 dB).
    wrong_size = copy_ds(resized_ds, "size")
    _claim_params(wrong_size, resize="64x46")
    failed = verify(str(wrong_size), against=str(sample_ds))
    assert failed.failed_check == "source-videos"
    assert "output frame size 64x48, expected 64x46" in str(failed.violations[0])
    wrong_filter = copy_ds(resized_ds, "filter")
    _claim_params(wrong_filter, resize_filter="bicubic")
    assert min(v.psnr_min_db for v in verify(str(wrong_filter), against=str(sample_ds)).videos) < right - 0.5


@pytest.mark.integration
def test_frames_of_another_size_than_the_declared_shape_fail_videos(
    resized_ds: Path, copy_ds: Callable[..., Path]
) -> None:
    root = copy_ds(resized_ds)
    info = json.loads((root / "meta/info.json").read_text())
    cam = info["features"][CAM0]
    cam["shape"], cam["info"]["video.height"] = [46, 64, 3], 46
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    reindex(root)
    report = verify(str(root))
    assert report.failed_check == "videos", report.describe()
    assert "Invalid frame size (64x48). Expected 64x46 (width x height) as info.json's shape says." in str(
        report.violations[0]
    )
