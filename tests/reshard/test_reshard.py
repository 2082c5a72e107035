"""`lrs reshard`: the lrs/1 invariants of its output, equality with the source, and every way to run it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from cache.remote import Remote
from reader import EpisodeStream
from reader.errors import LayoutError
from reader.format.index import EPISODES_INDEX, FILES_INDEX, LAYOUT_JSON
from reader.format.layout import Layout, is_lrs
from reshard.cli import cli
from reshard.errors import ReshardError
from reshard.job import meta as reshard_meta
from reshard.job.execute import ReshardOptions
from reshard.job.run import default_work_dir, reshard, slurm_part
from reshard.job.tables import row_group_ranges
from reshard.source.model import open_source
from reshard.verify import verify
from reshard.video.write import DEFAULT_CRF
from tests.reader.reference import ReferenceDataset, assert_items_equal
from tests.servers import RangeServer
from tests.support.datasets import resharded, verified
from tests.support.opens import count_av_opens


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def lrs(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


# --- the output's invariants ----------------------------------------------------------------------------


def test_one_row_group_per_episode_in_index_order(sample_resharded_ds: Path, sample_ds: Path) -> None:
    layout = Layout.load(str(sample_resharded_ds))
    source_schema = pq.read_schema(next((sample_ds / "data").rglob("*.parquet")))
    for rel in layout.data_files():
        file = pq.ParquetFile(sample_resharded_ds / rel)
        entries = [e for e in layout.episodes if e.data_path == rel]
        assert file.metadata.num_row_groups == len(entries)
        assert (
            file.schema_arrow.equals(source_schema) and file.schema_arrow.metadata == source_schema.metadata
        )
        assert b"huggingface" in file.schema_arrow.metadata
        for entry in entries:
            group = file.metadata.row_group(entry.row_group)
            columns = [group.column(c) for c in range(group.num_columns)]
            assert all(c.has_offset_index and c.has_column_index and c.is_stats_set for c in columns)
            rows = file.read_row_group(entry.row_group, columns=["index", "episode_index", "frame_index"])
            assert rows.column("index").to_pylist() == list(
                range(entry.dataset_from_index, entry.dataset_from_index + entry.length)
            )
            assert set(rows.column("episode_index").to_pylist()) == {entry.episode_index}
            assert rows.column("frame_index").to_pylist() == list(range(entry.length))


def test_one_ranged_read_fetches_a_row_group(sample_resharded_ds: Path) -> None:
    """Footer + the index's byte range, every other byte zeroed: the row group still reads back equal."""
    layout = Layout.load(str(sample_resharded_ds))
    for entry in layout.episodes:
        data = (sample_resharded_ds / entry.data_path).read_bytes()
        footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
        sparse = bytearray(len(data))
        sparse[footer_start:] = data[footer_start:]
        start, end = entry.row_group_offset, entry.row_group_offset + entry.row_group_bytes
        sparse[start:end] = data[start:end]
        got = pq.ParquetFile(pa.BufferReader(bytes(sparse))).read_row_group(entry.row_group)
        assert got.equals(pq.ParquetFile(pa.BufferReader(data)).read_row_group(entry.row_group))
        assert row_group_ranges(pq.read_metadata(sample_resharded_ds / entry.data_path))[entry.row_group] == (
            start,
            entry.row_group_bytes,
        )


def test_index_lists_every_file_with_its_hash(sample_resharded_ds: Path) -> None:
    listed = pq.read_table(sample_resharded_ds / FILES_INDEX).to_pylist()
    on_disk = files_of(sample_resharded_ds)
    assert sorted(r["path"] for r in listed) == sorted(set(on_disk) - {FILES_INDEX})
    for row in listed:
        data = on_disk[row["path"]]
        assert (row["bytes"], row["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    kinds = {r["path"].split("/")[0]: r["kind"] for r in listed}
    assert kinds == {"data": "data", "videos": "video", "meta": "meta"}


def test_metadata_is_true_for_the_new_files(sample_resharded_ds: Path, sample_ds: Path) -> None:
    out = open_source(str(sample_resharded_ds))
    src = open_source(str(sample_ds))
    info = json.loads((sample_resharded_ds / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (8, src.total_frames, 3)
    assert info["data_files_size_in_mb"] == 100
    for key in out.video_keys:
        assert (
            info["features"][key]["info"] | {"video.codec": "av1", "video.g": 2, "video.crf": 30}
            == info["features"][key]["info"]
        )
    for episode in out.episodes:
        assert out.data_file(episode) == "data/chunk-000/file-000.parquet"
        for key in out.video_keys:
            segment = episode.video(key)
            assert (segment.chunk_index, segment.file_index) == (0, episode.episode_index)
            assert (segment.from_timestamp, segment.to_timestamp) == (0.0, episode.length / 30)
    assert [e.tasks for e in out.episodes] == [e.tasks for e in src.episodes]
    stats = [c for c in src.episodes_table.column_names if c.startswith("stats/")]
    assert stats and out.episodes_table.select(stats).equals(src.episodes_table.select(stats))
    layout = json.loads((sample_resharded_ds / LAYOUT_JSON).read_text())
    assert layout["layout"] == "lrs/1" and layout["params"]["video"] == "copy" and layout["reencoded"] == []
    assert not default_work_dir(sample_resharded_ds).exists()


def test_output_verifies_against_its_source(sample_resharded_ds: Path, sample_ds: Path) -> None:
    report = verify(str(sample_resharded_ds), against=str(sample_ds))
    assert report.ok, report.describe()
    assert report.passed[-1] == "source-videos"
    assert all(v.identical and not v.reencoded for v in report.videos) and len(report.videos) == 16


def test_converted_source_is_sliced_per_episode(sample_converted_ds: Path, tmp_path: Path) -> None:
    source_groups = sum(
        pq.read_metadata(p).num_row_groups for p in (sample_converted_ds / "data").rglob("*.parquet")
    )
    assert source_groups < 8  # precondition: row groups span episodes
    reshard(str(sample_converted_ds), tmp_path / "out", quiet=True)
    report = verify(str(tmp_path / "out"), against=str(sample_converted_ds))
    assert report.ok, report.describe()
    assert sum(pq.read_metadata(p).num_row_groups for p in (tmp_path / "out/data").rglob("*.parquet")) == 8


@pytest.mark.integration
def test_small_files_follow_the_templates_and_chunks(sample_chunked_ds: Path, tmp_path: Path) -> None:
    bound_mb = 0.004
    result = lrs(
        "reshard",
        str(sample_chunked_ds),
        "--out",
        str(tmp_path / "out"),
        "--data-file-mb",
        "0.004",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    layout = Layout.load(str(tmp_path / "out"))
    files = layout.data_files()
    assert len(files) > 2 and files[:3] == [
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-001.parquet",
        "data/chunk-001/file-000.parquet",
    ]
    for rel in files:
        size = (tmp_path / "out" / rel).stat().st_size
        assert size <= bound_mb * 1024 * 1024 * 1.5 or sum(e.data_path == rel for e in layout.episodes) == 1
    assert json.loads((tmp_path / "out/meta/info.json").read_text())["data_files_size_in_mb"] == 0.004
    assert verify(str(tmp_path / "out"), against=str(sample_chunked_ds)).ok


def test_copy_reencodes_and_lists_episodes_not_on_a_keyframe(
    sample_unaligned_ds: Path, tmp_path: Path
) -> None:
    result = lrs("reshard", str(sample_unaligned_ds), "--out", str(tmp_path / "out"), "--quiet")
    assert result.exit_code == 0, result.output
    assert "did not start on a keyframe and were re-encoded" in result.output
    reencoded = json.loads((tmp_path / "out" / LAYOUT_JSON).read_text())["reencoded"]
    assert reencoded and all("keyframe" in r["reason"] for r in reencoded)
    report = verify(str(tmp_path / "out"), against=str(sample_unaligned_ds), min_psnr=20)
    assert report.ok, report.describe()
    listed = {(r["episode"], r["camera"]) for r in reencoded}
    assert {(v.episode, v.key) for v in report.videos if not v.identical} == listed
    assert all(v.reencoded for v in report.videos if (v.episode, v.key) in listed)


@pytest.mark.integration
def test_hevc_reencode_is_described_in_info(sample_ds: Path, tmp_path: Path) -> None:
    reshard(str(sample_ds), tmp_path / "out", options=ReshardOptions(video="hevc", gop=3), quiet=True)
    info = json.loads((tmp_path / "out/meta/info.json").read_text())
    cam = info["features"]["observation.images.cam0"]["info"]
    assert (cam["video.codec"], cam["video.pix_fmt"], cam["video.g"], cam["video.crf"]) == (
        "hevc",
        "yuv420p",
        3,
        DEFAULT_CRF["hevc"],
    )
    assert cam["video.preset"] == "fast"  # x265's, not the source's SVT-AV1 preset
    from reshard.source.inspect import inspect_dataset, render

    assert "video=hevc, gop=3, crf=21, preset=fast" in render(inspect_dataset(str(tmp_path / "out")))
    report = verify(str(tmp_path / "out"), against=str(sample_ds), min_psnr=30)
    assert report.ok, report.describe()
    assert all(v.reencoded and v.psnr_min_db >= 30 for v in report.videos)
    assert json.loads((tmp_path / "out" / LAYOUT_JSON).read_text())["reencoded"] == []


@pytest.mark.integration
def test_fastdecode_reencode_is_recorded_verified_and_resumed_only_with_it(
    sample_ds: Path, tmp_path: Path
) -> None:
    out, partial = tmp_path / "out", tmp_path / "partial"
    tuned = ("--video", "h264", "--tune", "fastdecode", "--quiet")
    assert lrs("reshard", str(sample_ds), "--out", str(out), *tuned).exit_code == 0
    assert json.loads((out / LAYOUT_JSON).read_text())["params"]["tune"] == "fastdecode"
    cam = json.loads((out / "meta/info.json").read_text())["features"]["observation.images.cam0"]["info"]
    assert (cam["video.codec"], cam["video.tune"], cam["video.g"]) == ("h264", "fastdecode", 2)
    video = next((out / "videos").rglob("*.mp4")).read_bytes()
    assert b" cabac=0 " in video and b" deblock=0:" in video  # x264's own record: CAVLC, no deblocking
    report = verify(str(out), against=str(sample_ds))  # the PSNR floor and colour fit of every re-encode
    assert report.ok, report.describe()
    assert all(v.reencoded and v.psnr_min_db >= 30 for v in report.videos)
    # Another tune (or none) is another job, finished or not.
    message = "Invalid options (tune: 'fastdecode' -> None)"
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--video", "h264")
    assert result.exit_code == 3 and message in result.output, result.output
    assert lrs("reshard", str(sample_ds), "--out", str(partial), *tuned, "--part", "0/2").exit_code == 0
    result = lrs("reshard", str(sample_ds), "--out", str(partial), "--video", "h264", "--part", "1/2")
    assert result.exit_code == 3 and message in result.output, result.output


@pytest.mark.integration
def test_resize_reencodes_at_the_training_resolution(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ("--video", "h264", "--resize", "48x32", "--resize-filter", "bicubic", "--quiet")
    assert lrs("reshard", str(sample_ds), "--out", str(out), *args).exit_code == 0
    layout = json.loads((out / LAYOUT_JSON).read_text())
    assert (layout["params"]["resize"], layout["params"]["resize_filter"]) == ("48x32", "bicubic")
    info = json.loads((out / "meta/info.json").read_text())
    for key in ("observation.images.cam0", "observation.images.cam1"):
        feature = info["features"][key]
        assert feature["shape"] == [32, 48, 3] and feature["names"] == ["height", "width", "channels"]
        assert (feature["info"]["video.width"], feature["info"]["video.height"]) == (48, 32)
    for path in (out / "videos").rglob("*.mp4"):
        with av.open(str(path)) as container:
            assert {(f.width, f.height) for f in container.decode(video=0)} == {(48, 32)}
    report = verify(str(out), against=str(sample_ds))
    assert report.ok, report.describe()
    assert all(v.reencoded and v.psnr_min_db >= 30 for v in report.videos)
    # Another size or filter is another job.
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--video", "h264", "--resize", "48x32")
    assert result.exit_code == 3
    assert "Invalid options (resize_filter: 'bicubic' -> 'area')" in result.output, result.output


# --- ways to run it: parts, workers, reruns, remote sources ---------------------------------------------


@pytest.mark.parametrize("count", [2, 3], ids=["2-parts", "3-parts"])
def test_parts_then_finalize_equal_one_run(
    count: int, sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    for index in range(count):
        result = lrs("reshard", str(sample_ds), "--out", str(out), "--part", f"{index}/{count}", "--quiet")
        assert result.exit_code == 0, result.output
        assert f"part {index}/{count} done" in result.output
        assert not out.exists() or not any(out.iterdir())  # nothing published before finalize
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--finalize", "--quiet")
    assert result.exit_code == 0, result.output
    assert files_of(out) == files_of(sample_resharded_ds)
    assert not default_work_dir(out).exists()


def test_finalize_before_every_part_ran_is_refused(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert lrs("reshard", str(sample_ds), "--out", str(out), "--part", "0/2", "--quiet").exit_code == 0
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--finalize", "--quiet")
    assert result.exit_code == 3
    assert "(part 1 of 2 not done; " in result.output and "outputs not done" in result.output
    assert "rerun the missing parts" in result.output
    assert not out.exists()


def test_slurm_array_environment_selects_the_part(sample_ds: Path, tmp_path: Path) -> None:
    assert slurm_part(
        {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "3"}
    ) == (1, 3)
    assert slurm_part({}) is None
    env = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"}
    result = lrs("reshard", str(sample_ds), "--out", str(tmp_path / "out"), "--quiet", env=env)
    assert result.exit_code == 0, result.output
    assert "part 1/4 done" in result.output


@pytest.mark.integration
def test_two_workers_equal_one_run(sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path) -> None:
    reshard(str(sample_ds), tmp_path / "out", workers=2, quiet=True)
    assert files_of(tmp_path / "out") == files_of(sample_resharded_ds)


def test_rerun_of_a_finished_output_does_nothing(sample_ds: Path, sample_resharded_ds: Path, copy_ds) -> None:
    out = copy_ds(sample_resharded_ds)
    before = {p: p.stat().st_ino for p in out.rglob("*")}
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--quiet")
    assert result.exit_code == 0 and "already a complete reshard" in result.output
    assert {p: p.stat().st_ino for p in out.rglob("*")} == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--video", "hevc"], r"Invalid options \(video: 'copy' -> 'hevc'\)"),
        (["--data-file-mb", "5"], r"Invalid options \(data_file_mb: 100.0 -> 5.0\)"),
        (["--episodes-per-data-file", "2"], r"Invalid options \(episodes_per_data_file: 1000 -> 2\)"),
    ],
    ids=["video", "data-file-mb", "episodes-per-data-file"],
)
def test_rerun_with_other_options_is_refused(
    args: list[str], message: str, sample_ds: Path, sample_resharded_ds: Path, copy_ds, tmp_path: Path
) -> None:
    # A finished output...
    out = copy_ds(sample_resharded_ds)
    result = lrs("reshard", str(sample_ds), "--out", str(out), *args)
    assert result.exit_code == 3
    assert re.search(message, result.output), result.output
    # ...and an unfinished one.
    partial = tmp_path / "partial"
    assert lrs("reshard", str(sample_ds), "--out", str(partial), "--part", "0/2", "--quiet").exit_code == 0
    result = lrs("reshard", str(sample_ds), "--out", str(partial), "--part", "1/2", *args)
    assert result.exit_code == 3
    assert re.search(message, result.output), result.output


def test_episode_cap_bounds_data_files_that_verify_and_the_reader_read(
    sample_ds: Path, tmp_path: Path
) -> None:
    out = resharded(sample_ds, tmp_path / "out", episodes_per_data_file=2)
    episodes = len(open_source(str(sample_ds)).episodes)
    layout = Layout.load(str(out))
    assert [pq.read_metadata(out / rel).num_row_groups for rel in layout.data_files()] == [2] * (
        episodes // 2
    ) + [1] * (episodes % 2)
    assert json.loads((out / LAYOUT_JSON).read_text())["params"]["episodes_per_data_file"] == 2
    verified(out, sample_ds)
    stream = EpisodeStream(out, episode_pool_size=2, seed=3)
    reference = ReferenceDataset(out)
    items = list(stream)
    for item in items:
        episode, frame = int(item["episode_index"]), int(item["frame_index"])
        assert_items_equal(item, reference.get(episode, frame), context=f"episode {episode} frame {frame}")
    assert len(items) == sum(e.length for e in layout.episodes)


def test_meta_episodes_rewritten_by_batches_equal_the_whole_rewrite(
    sample_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reshard_meta, "EPISODES_BATCH", 2)
    batched = resharded(sample_ds, tmp_path / "batched")
    monkeypatch.setattr(reshard_meta, "_streamed_episodes_files", lambda source, pointers: None)
    whole = resharded(sample_ds, tmp_path / "whole")
    rels = sorted(str(p.relative_to(whole)) for p in (whole / "meta/episodes").rglob("*.parquet"))
    assert rels == sorted(str(p.relative_to(batched)) for p in (batched / "meta/episodes").rglob("*.parquet"))
    for rel in rels:
        table = pq.read_table(whole / rel)
        assert pq.read_table(batched / rel).equals(table)
        assert pq.read_metadata(batched / rel).num_row_groups == -(-table.num_rows // 2)
    verified(batched, sample_ds)


def _as_before_the_cap(path: Path) -> None:
    """Rewrite a job record (options.json or layout.json) as an lrs before the episode cap wrote it."""
    doc = json.loads(path.read_text())
    del doc["params"]["episodes_per_data_file"]
    path.write_text(json.dumps(doc))


def test_a_job_begun_before_the_cap_resumes_only_with_its_plan(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert lrs("reshard", str(sample_ds), "--out", str(out), "--part", "0/2", "--quiet").exit_code == 0
    _as_before_the_cap(default_work_dir(out) / "options.json")
    episodes = len(open_source(str(sample_ds)).episodes)  # one data file without the cap
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--episodes-per-data-file", "2")
    assert result.exit_code == 3
    assert (
        f"Invalid options (episodes_per_data_file: none -> 2) for {out}: the unfinished reshard in "
        f"{default_work_dir(out)} was planned by an lrs without that cap and has a data file of {episodes} "
        f"episodes. Expected its plan: rerun with --episodes-per-data-file {episodes}, or remove"
    ) in " ".join(result.output.split())
    # The default cap plans the same files: the job goes on and ends as an uninterrupted run does.
    assert lrs("reshard", str(sample_ds), "--out", str(out), "--quiet").exit_code == 0
    assert files_of(out) == files_of(sample_resharded_ds)


def test_an_output_finished_before_the_cap_is_complete_only_for_its_plan(
    sample_ds: Path, sample_resharded_ds: Path, copy_ds
) -> None:
    out = copy_ds(sample_resharded_ds)
    _as_before_the_cap(out / LAYOUT_JSON)
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--quiet")
    assert result.exit_code == 0 and "already a complete reshard" in result.output
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--episodes-per-data-file", "2")
    assert result.exit_code == 3
    assert "Invalid options (episodes_per_data_file: none -> 2)" in result.output
    assert "the finished reshard there was planned by an lrs without that cap" in " ".join(
        result.output.split()
    )


def test_non_empty_foreign_output_is_refused(sample_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = lrs("reshard", str(sample_ds), "--out", str(out))
    assert result.exit_code == 3
    assert f"Invalid output directory ({out}): not empty" in result.output
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_part_and_finalize_are_exclusive(sample_ds: Path, tmp_path: Path) -> None:
    result = lrs("reshard", str(sample_ds), "--out", str(tmp_path / "o"), "--part", "0/2", "--finalize")
    assert result.exit_code == 2 and "exclusive" in result.output
    result = lrs("reshard", str(sample_ds), "--out", str(tmp_path / "o"), "--part", "2/2")
    assert result.exit_code == 2 and "Invalid part (2/2)" in result.output


def test_http_source_gives_the_same_dataset(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched: list[str] = []
    real_get = Remote.get

    def counting_get(self: Remote, rel: str, local: str, **kwargs: object) -> None:
        fetched.append(rel)
        real_get(self, rel, local, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Remote, "get", counting_get)
    with RangeServer(sample_ds) as server:
        reshard(server.url, tmp_path / "out", quiet=True)
    got, expected = files_of(tmp_path / "out"), files_of(sample_resharded_ds)
    # Only the recorded source URL (and so the hashes listing layout.json) differ.
    differ = {rel for rel in expected if got.get(rel) != expected[rel]}
    assert differ == {LAYOUT_JSON, FILES_INDEX}
    assert json.loads(got[LAYOUT_JSON])["source"]["url"] == server.url
    assert got[EPISODES_INDEX] == expected[EPISODES_INDEX]
    # Each packed source file is downloaded once, for all of its episodes.
    source = open_source(str(sample_ds))
    assert sorted(fetched) == sorted(source.data_files() + source.video_files())


def test_push_bucket_uploads_the_finished_output(sample_ds: Path, tmp_path: Path) -> None:
    out, bucket = tmp_path / "out", tmp_path / "bucket"
    result = lrs(
        "reshard", str(sample_ds), "--out", str(out), "--quiet", "--push-bucket", str(bucket), "--push-create"
    )
    assert result.exit_code == 0, result.output
    assert "Uploaded 24 files" in result.output
    assert files_of(bucket) == files_of(out)
    result = lrs("reshard", str(sample_ds), "--out", str(out), "--part", "0/2", "--push-bucket", str(bucket))
    assert result.exit_code == 2 and "--push-bucket needs a finished output" in result.output


def test_layout_loads_the_index(sample_resharded_ds: Path, sample_ds: Path) -> None:
    layout = Layout.load(str(sample_resharded_ds))
    assert len(layout.episodes) == 8 and layout.total_frames == open_source(str(sample_ds)).total_frames
    assert layout.params == ReshardOptions().to_json() and layout.fps == 30
    entry = layout.episode(3)
    assert entry.data_path == "data/chunk-000/file-000.parquet" and entry.row_group == 3
    assert [v.path for v in entry.videos] == [f"videos/{k}/chunk-000/file-003.mp4" for k in layout.video_keys]
    assert all(v.from_timestamp == 0.0 and v.to_timestamp == entry.length / 30 for v in entry.videos)
    assert layout.files[entry.videos[0].path].bytes == entry.videos[0].bytes
    assert is_lrs(str(sample_resharded_ds)) and not is_lrs(str(sample_ds))
    with pytest.raises(IndexError, match=r"Invalid episode_index \(8\)\. Expected 0 <= episode_index < 8"):
        layout.episode(8)
    with pytest.raises(LayoutError, match=r"layout\.json: missing: not an lrs/1 dataset"):
        Layout.load(str(sample_ds))


def test_library_errors_for_invalid_options() -> None:
    with pytest.raises(ValueError, match=r"Invalid video mode \('av1'\)"):
        ReshardOptions(video="av1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Invalid data_file_mb \(0\)"):
        ReshardOptions(data_file_mb=0)


def test_finalize_without_any_part_is_refused(sample_ds: Path, tmp_path: Path) -> None:
    with pytest.raises(ReshardError, match=r"Invalid --finalize for .*: no unfinished reshard in"):
        reshard(str(sample_ds), tmp_path / "out", finalize_only=True, quiet=True)
    assert not default_work_dir(tmp_path / "out").exists()


def test_copy_opens_a_packed_source_video_once(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy reads a packed source MP4 for all its episodes through one open container (it opened the
    file again for each episode), and writes the same bytes."""
    opened = count_av_opens(monkeypatch)
    reshard(str(sample_ds), tmp_path / "out", quiet=True)
    sources = {str(p) for p in (sample_ds / "videos").rglob("*.mp4")}
    assert {p: opened[p] for p in sources} == dict.fromkeys(sources, 1)
    assert files_of(tmp_path / "out") == files_of(sample_resharded_ds)
