"""Hostile metadata: bounded work, then one line and exit 3 (or a `lrs doctor` defect), never a traceback.

Datasets come from the public Hub. Each case below mutates a copy of a generated dataset the way a
hostile one could: a format width in a path template (gigabytes and a minute per path before), a
template field lrs does not fill (`KeyError`), 200,000 nested brackets in a JSON file (`RecursionError`),
a `..` path in the lrs/1 index (a bare `ValueError`, exit 2), a video whose frames are not the size its
camera declares (read as if nothing were wrong). The cases that cost memory or time on old code run in
their own process, under a data limit and a timeout.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import reshard.cli.prewarm_command  # noqa: F401 - registers `lrs prewarm`
from reader.errors import DatasetError, LayoutError
from reader.format.layout import Layout
from reader.format.v3 import check_episode_tasks, frame_size
from reshard.cli import cli
from reshard.job.meta import VideoRecord, check_video_sizes, info_json
from reshard.source.model import open_source
from reshard.video.write import EpisodeVideo
from tests.reshard.defects import CAM0, CAM1, add_bomb, resize, set_task, video

ROOT = Path(__file__).parents[2]
# What one `lrs` process may allocate (torch's import included, about 600 MB), and how long it may take.
DATA_LIMIT_BYTES = 1536 << 20
TIME_LIMIT_S = 60.0
NESTED = 200_000


def edit_info(root: Path, **changes: object) -> None:
    path = root / "meta/info.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def nest_in_info(root: Path) -> None:
    """info.json with 200,000 nested lists in an extra field (its own fields untouched)."""
    text = json.dumps({**json.loads((root / "meta/info.json").read_text()), "extra": "HERE"})
    (root / "meta/info.json").write_text(text.replace('"HERE"', "[" * NESTED + "]" * NESTED))


def nest_in(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).write_text("[" * NESTED + "]" * NESTED)


def lrs(*args: str) -> subprocess.CompletedProcess[str]:
    """`lrs ARGS` in its own process, limited to `DATA_LIMIT_BYTES` of data and `TIME_LIMIT_S`."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT_BYTES, DATA_LIMIT_BYTES))

    return subprocess.run(
        [sys.executable, "-c", "from reshard.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=limit,
        timeout=TIME_LIMIT_S,
    )


def assert_one_line(output: str, pattern: str) -> None:
    """`output` is one short `Error: ` line that matches `pattern`."""
    assert output.startswith("Error: "), output[-2000:]
    assert len(output.strip().splitlines()) == 1 and len(output) < 2000, output[-2000:]
    assert re.search(pattern, output), output


# name -> (mutation of a v3 source, pattern `lrs describe`'s one line must match)
HOSTILE_SOURCES: dict[str, tuple[Callable[[Path], None], str]] = {
    "format-width": (
        lambda r: edit_info(r, data_path="data/chunk-{chunk_index:>400000000}/file-{file_index:03d}.parquet"),
        r"meta/info\.json, field 'data_path': Invalid path template \('data/chunk-\{chunk_index:>400000000\}/"
        r".*field \{chunk_index:>400000000\}\. Expected fields among \{chunk_index\}, \{file_index\}",
    ),
    "video-format-width": (
        lambda r: edit_info(r, video_path="videos/{video_key:>400000000}/{chunk_index}/{file_index}.mp4"),
        r"meta/info\.json, field 'video_path': Invalid path template .*field \{video_key:>400000000\}",
    ),
    "nested-info": (
        nest_in_info,
        rf"meta/info\.json: Invalid JSON nesting \({NESTED + 1} levels\)\. Expected at most 64\.",
    ),
    "nested-stats": (
        nest_in("meta/stats.json"),
        rf"meta/stats\.json: Invalid JSON nesting \({NESTED} levels\)\. Expected at most 64\.",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE_SOURCES), ids=list(HOSTILE_SOURCES))
def test_hostile_metadata_is_one_line_in_bounded_work(
    name: str, sample_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    root = copy_ds(sample_ds, "src")
    mutate, pattern = HOSTILE_SOURCES[name]
    mutate(root)
    started = time.monotonic()
    done = lrs("describe", str(root))
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert_one_line(done.stderr, pattern)
    assert time.monotonic() - started < 30


def test_nested_layout_json_is_one_line_in_bounded_work(
    sample_resharded_ds: Path, copy_ds: Callable[[Path], Path], tmp_path: Path
) -> None:
    root = copy_ds(sample_resharded_ds, "out")
    nest_in("meta/lrs/layout.json")(root)
    done = lrs("prewarm", str(root), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert_one_line(
        done.stderr, rf"meta/lrs/layout\.json: Invalid JSON nesting \({NESTED} levels\)\. Expected at most 64"
    )


# name -> (the data_path template, pattern of the one line)
BAD_TEMPLATES = {
    "v2-field": (
        "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        r"field \{episode_chunk:03d\}\. Expected fields among \{chunk_index\}, \{file_index\}",
    ),
    "unknown-field": (
        "data/chunk-{episode_index}/file-{file_index:03d}.parquet",
        r"field \{episode_index\}\.",
    ),
    "13-digits": ("data/chunk-{chunk_index:013d}/file-{file_index}.parquet", r"field \{chunk_index:013d\}\."),
    "conversion": ("data/{chunk_index!r}/{file_index}.parquet", r"field \{chunk_index!r\}\."),
    "attribute": ("data/{chunk_index.real}/{file_index}.parquet", r"field \{chunk_index\.real\}\."),
    "positional": ("data/{}/{file_index}.parquet", r"field \{\}\."),
    "nested-spec": ("data/{chunk_index:{file_index}}/x.parquet", r"field \{chunk_index:\{file_index\}\}\."),
    "unbalanced": (
        "data/{chunk_index/{file_index}.parquet",
        r"unexpected '\{' in field name\. Expected fields",
    ),
    "too-long": (
        "data/" + "d" * 4100 + "/{chunk_index}/{file_index}.parquet",
        r"its paths may be \d+ bytes long\. Expected at most 4096\.",
    ),
}


@pytest.mark.parametrize("name", list(BAD_TEMPLATES), ids=list(BAD_TEMPLATES))
def test_a_template_lrs_does_not_fill_is_one_line(
    name: str, sample_ds: Path, copy_ds: Callable[[Path], Path], tmp_path: Path
) -> None:
    root = copy_ds(sample_ds, "src")
    template, pattern = BAD_TEMPLATES[name]
    edit_info(root, data_path=template)
    for args in (["describe", str(root)], ["reshard", str(root), "--out", str(tmp_path / "out"), "-q"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 3, result.output
        assert_one_line(
            result.output, r"meta/info\.json, field 'data_path': Invalid path template .*" + pattern
        )
    assert not (tmp_path / "out").exists()


def test_lerobots_templates_are_accepted(sample_ds: Path, copy_ds: Callable[[Path], Path]) -> None:
    root = copy_ds(sample_ds, "src")
    for chunk, file in (("{chunk_index}", "{file_index}"), ("{chunk_index:012d}", "{file_index:01d}")):
        (root / f"data/chunk-{chunk.format(chunk_index=0)}").mkdir(exist_ok=True)
        for rel in sorted((root / "data/chunk-000").glob("*.parquet")):
            number = int(rel.stem.split("-")[1])
            target = (
                root
                / f"data/chunk-{chunk.format(chunk_index=0)}/file-{file.format(file_index=number)}.parquet"
            )
            if target != rel:
                target.write_bytes(rel.read_bytes())
        edit_info(root, data_path=f"data/chunk-{chunk}/file-{file}.parquet")
        assert len(open_source(str(root)).episodes) == 8


def test_a_camera_key_that_climbs_out_is_one_line(sample_ds: Path, copy_ds: Callable[[Path], Path]) -> None:
    root = copy_ds(sample_ds, "src")
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["../../escaped"] = info["features"].pop(CAM1)
    (root / "meta/info.json").write_text(json.dumps(info))
    result = CliRunner().invoke(cli, ["describe", str(root)])
    assert result.exit_code == 3, result.output
    assert_one_line(result.output, r"field 'video_path': Invalid template \('videos/\.\./\.\./escaped/")


def _point_index_at(root: Path, episode: int, path: str) -> None:
    """The lrs/1 index of `root` with cam0's video of `episode` at `path`, listed there with its size."""
    index = root / "meta/lrs/episodes.parquet"
    table = pq.read_table(index)
    column = f"videos/{CAM0}/path"
    paths = table.column(column).to_pylist()
    paths[episode] = path
    pq.write_table(table.set_column(table.schema.get_field_index(column), column, pa.array(paths)), index)
    files = pq.read_table(root / "meta/lrs/files.parquet")
    size = table.column(f"videos/{CAM0}/bytes")[episode].as_py()
    rows = [*files.to_pylist(), {"path": path, "bytes": size, "sha256": "0" * 64, "kind": "video"}]
    pq.write_table(
        pa.Table.from_pylist(sorted(rows, key=lambda r: r["path"]), schema=files.schema),
        root / "meta/lrs/files.parquet",
    )


@pytest.mark.parametrize("path", ["../x.mp4", "videos/../../x.mp4", "/etc/passwd", "videos\\x.mp4"])
def test_a_path_out_of_the_index_is_a_layout_error(
    path: str, sample_resharded_ds: Path, copy_ds: Callable[[Path], Path], tmp_path: Path
) -> None:
    root = copy_ds(sample_resharded_ds, "out")
    _point_index_at(root, 2, path)
    pattern = (
        rf"meta/lrs/episodes\.parquet, episode 2, field 'videos/{re.escape(CAM0)}/path': Invalid dataset path "
        rf"\({re.escape(repr(path))}\)\. Expected a relative POSIX path"
    )
    with pytest.raises(LayoutError, match=pattern):
        Layout.load(str(root))
    result = CliRunner().invoke(cli, ["prewarm", str(root), "--cache-dir", str(tmp_path / "cache"), "-q"])
    assert result.exit_code == 3, result.output
    assert_one_line(result.output, pattern)


def test_a_path_out_of_the_files_index_is_a_layout_error(
    sample_resharded_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    root = copy_ds(sample_resharded_ds, "out")
    files = pq.read_table(root / "meta/lrs/files.parquet")
    rows = [*files.to_pylist(), {"path": "../../x", "bytes": 1, "sha256": "0" * 64, "kind": "meta"}]
    pq.write_table(pa.Table.from_pylist(rows, schema=files.schema), root / "meta/lrs/files.parquet")
    with pytest.raises(
        LayoutError, match=r"meta/lrs/files\.parquet, field 'path': Invalid dataset path \('\.\./\.\./x'\)"
    ):
        Layout.load(str(root))


@pytest.fixture(scope="module")
def resized(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with cam1's file-001 (episodes 3, 4, 5) at 128x96, where its camera declares 96x64."""
    import shutil

    root = Path(shutil.copytree(sample_ds, tmp_path_factory.mktemp("resized") / "v3"))
    resize(video(root, CAM1, 1), 128, 96)
    return root


SIZE_DEFECT = r"Invalid frame size \(128x96\)\. Expected 96x64 \(width x height\), the shape \[64, 96, 3\]"


@pytest.mark.parametrize("decode", [False, True], ids=["headers", "decode"])
def test_doctor_names_a_video_of_another_size(resized: Path, decode: bool) -> None:
    result = CliRunner().invoke(
        cli, ["doctor", str(resized), "--json", "-q", *(["--decode"] if decode else [])]
    )
    assert result.exit_code == 1, result.output
    defects = json.loads(result.output)["defects"]
    assert [(d["check"], Path(d["file"]).name, d["episode"], d["field"]) for d in defects] == [
        ("videos", "file-001.mp4", e, f"videos/{CAM1}") for e in (3, 4, 5)
    ]
    assert all(re.match(SIZE_DEFECT, d["problem"]) for d in defects), defects


def test_reshard_refuses_a_video_of_another_size_unless_skipping(resized: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["reshard", str(resized), "--out", str(out), "-q"])
    assert result.exit_code == 3, result.output
    assert_one_line(
        result.output, rf"file-001\.mp4, episode 3, field 'videos/{re.escape(CAM1)}': {SIZE_DEFECT}"
    )
    assert "3 defects in all, in episodes 3-5" in result.output and not out.exists()
    result = CliRunner().invoke(cli, ["reshard", str(resized), "--out", str(out), "-q", "--skip-defective"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "meta/info.json").read_text())
    assert info["total_episodes"] == 5
    for key in (CAM0, CAM1):
        feature = info["features"][key]
        assert (feature["info"]["video.height"], feature["info"]["video.width"]) == tuple(
            feature["shape"][:2]
        )


def _record(width: int, height: int) -> VideoRecord:
    written = EpisodeVideo(
        path="",
        bytes=1,
        frames=1,
        codec="h264",
        pix_fmt="yuv420p",
        width=width,
        height=height,
        gop=2,
        crf=None,
        reencoded=False,
    )
    return VideoRecord.of(written, path=f"videos/{CAM0}/x.mp4", sha256="0" * 64, episode=0, key=CAM0)


def test_an_info_json_whose_shape_and_video_size_disagree_is_not_written(sample_ds: Path) -> None:
    source = open_source(str(sample_ds))
    params = {"data_file_mb": 100, "video": "copy"}
    written = json.loads(info_json(source, params, [_record(96, 64)]))
    assert written["features"][CAM0]["info"]["video.width"] == 96
    with pytest.raises(
        DatasetError, match=rf"field 'features/{re.escape(CAM0)}': Invalid video size \(128x96\)"
    ):
        info_json(source, params, [_record(128, 96)])
    # (channels, height, width), as some ported datasets declare it: 64 high, 96 wide.
    feature = {"shape": [3, 64, 96], "names": ["channels", "height", "width"]}
    with pytest.raises(DatasetError, match=r"Invalid video size \(64x96\) .*Expected 96x64"):
        check_video_sizes(
            {CAM0: {**feature, "info": {"video.height": 96, "video.width": 64}}}, [CAM0], file="i"
        )
    check_video_sizes({CAM0: {**feature, "info": {"video.height": 64, "video.width": 96}}}, [CAM0], file="i")


@pytest.mark.parametrize(
    ("shape", "names"),
    [
        ([64, 96, 3], ["height", "width", "channels"]),  # what lerobot writes
        ([3, 64, 96], ["channels", "height", "width"]),
        ([64, 96, 3], ["h", "w", "channel"]),  # lerobot: last name "channel(s)": (h, w, c)
        ([3, 64, 96], ["c", "h", "w"]),  # lerobot: any other: (c, h, w)
        ([64, 96, 3], None),
        ([3, 64, 96], None),
    ],
    ids=["lerobot", "chw-named", "hwc-channel", "chw-other", "hwc-unnamed", "chw-unnamed"],
)
def test_the_declared_frame_size_follows_lerobots_names(shape: list[int], names: list[str] | None) -> None:
    assert frame_size({"shape": shape, "names": names}) == (64, 96)
    assert frame_size({"shape": shape[:2], "names": names}) is None


BOMB = r"Invalid row group \d+ \(\d+ bytes uncompressed for \d+ rows\)\. Expected at most \d+ bytes"


@pytest.fixture(scope="module")
def bombed(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    root = Path(shutil.copytree(sample_ds, tmp_path_factory.mktemp("bombed") / "v3"))
    add_bomb(root, 1 << 20)
    return root


def test_doctor_names_a_parquet_decompression_bomb(bombed: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", str(bombed), "--json", "-q"])
    assert result.exit_code == 1, result.output
    defects = json.loads(result.output)["defects"]
    assert defects and all(re.match(BOMB, d["problem"]) for d in defects), defects
    assert {Path(d["file"]).name for d in defects} == {
        "file-000.parquet",
        "file-001.parquet",
        "file-002.parquet",
    }


def test_reshard_and_the_stream_refuse_a_parquet_decompression_bomb(bombed: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["reshard", str(bombed), "--out", str(out), "-q"])
    assert result.exit_code == 3, result.output
    assert_one_line(result.output, rf"data/chunk-000/file-00\d\.parquet, episode \d+: {BOMB}")
    from reader import EpisodeStream

    with pytest.raises(DatasetError, match=rf"file-00\d\.parquet: {BOMB}"):
        next(iter(EpisodeStream(str(bombed), cache_dir=str(tmp_path / "cache"))))


def test_an_undeclared_column_within_the_bound_is_read_as_before(sample_ds: Path, tmp_path: Path) -> None:
    import shutil

    root = Path(shutil.copytree(sample_ds, tmp_path / "v3"))
    add_bomb(root, 1 << 10)
    result = CliRunner().invoke(cli, ["doctor", str(root), "--json", "-q"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("size", "pattern"),
    [
        (
            1 << 20,
            r"meta/tasks\.parquet, field 'task': Invalid task string of task_index 0 \(1048576 bytes\)\. "
            r"Expected a string of at most 65536 bytes\.",
        ),
        (64 << 20, r"meta/tasks\.parquet: Invalid row group 0 \(\d+ bytes uncompressed for \d rows\)"),
    ],
    ids=["1MiB", "64MiB"],
)
def test_a_huge_task_string_is_one_line_in_bounded_work(
    sample_ds: Path, copy_ds: Callable[[Path], Path], size: int, pattern: str
) -> None:
    root = copy_ds(sample_ds, "src")
    set_task(root, 0, "x" * size)
    done = lrs("describe", str(root))
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert_one_line(done.stderr, pattern)


def test_a_huge_task_string_in_meta_episodes_alone_names_its_episode(sample_ds: Path) -> None:
    table = pa.table({"episode_index": [0, 1], "tasks": [["a"], ["x" * (65 << 10)]]})
    with pytest.raises(
        DatasetError, match=r"^e\.parquet, episode 1, field 'tasks': Invalid task string \(66560 bytes\)\."
    ):
        check_episode_tasks(table, file="e.parquet")
    check_episode_tasks(table.slice(0, 1), file="e.parquet")


def test_a_feature_name_longer_than_256_bytes_is_one_line(
    sample_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    root = copy_ds(sample_ds, "src")
    info = json.loads((root / "meta/info.json").read_text())
    edit_info(root, features={**info["features"], "n" * 300: {"dtype": "float32", "shape": [1]}})
    result = CliRunner().invoke(cli, ["describe", str(root)])
    assert result.exit_code == 3, result.output
    assert_one_line(
        result.output,
        r"field 'features': Invalid feature name \('n+'\.\.\., 300 bytes\)\. Expected at most 256",
    )
