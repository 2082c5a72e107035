"""EpisodeStream values: identical to the reference reader (lerobot's semantics) on v3 and lrs/1 copies,
local and over HTTP; admission costs; prefetch ahead; clear errors for bad input and broken files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from cache import CacheStats, sum_cache_stats
from cache.errors import IntegrityError
from reader import EpisodeStream
from reader.errors import DatasetError, DecodeError
from reader.format.catalog import Catalog
from tests.reader.reference import SMALL, ReferenceDataset, assert_items_equal, sample_pair
from tests.servers import Faults, RangeServer

FPS = 30
WINDOWS = {
    "action": [-2 / FPS, -1 / FPS, 0.0, 1 / FPS, 2 / FPS],
    "observation.images.cam0": [-1 / FPS, 0.0, 1 / FPS],
    "observation.state": [0.0],
}
CAM0, CAM1 = "observation.images.cam0", "observation.images.cam1"


@pytest.fixture(scope="session")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Row groups spanning several episodes (v2.1 conversions), H.264, three cameras."""
    spec = {**SMALL, "converted": True, "codec": "h264", "cameras": 3, "episodes_per_data_file": 4, "seed": 4}
    return sample_pair(tmp_path_factory.getbasetemp() / "reader-data", "converted", **spec)


def _check_all(stream: EpisodeStream, reference: ReferenceDataset) -> int:
    seen = 0
    for item in stream:
        episode, frame = int(item["episode_index"]), int(item["frame_index"])
        assert_items_equal(item, reference.get(episode, frame), context=f"episode {episode} frame {frame}")
        seen += 1
    return seen


@pytest.mark.parametrize("layout", ["v3", "lrs"])
@pytest.mark.parametrize("dataset", ["small", "converted"])
def test_every_sample_equals_the_reference(request: pytest.FixtureRequest, dataset: str, layout: str) -> None:
    root = request.getfixturevalue(dataset)[0 if layout == "v3" else 1]
    stream = EpisodeStream(root, delta_timestamps=WINDOWS, episode_pool_size=3, seed=7)
    assert stream.catalog.kind == ("v3" if layout == "v3" else "lrs/1")
    total = sum(e.length for e in stream.catalog.episodes)
    assert _check_all(stream, ReferenceDataset(root, delta_timestamps=WINDOWS)) == total


@pytest.mark.parametrize(("threads", "ahead"), [(0, 0), (1, 1), (3, 20)], ids=["inline", "1x1", "3x20"])
def test_samples_are_the_same_however_many_decode_threads(
    small: tuple[Path, Path], threads: int, ahead: int
) -> None:
    def items(**kwargs: int) -> list[dict]:
        return list(EpisodeStream(small[1], delta_timestamps=WINDOWS, episode_pool_size=3, seed=7, **kwargs))

    want = items()
    got = items(decode_threads=threads, decode_ahead=ahead)
    assert len(got) == len(want) == 69
    for g, w in zip(got, want, strict=True):
        assert_items_equal(g, w, context=f"episode {int(w['episode_index'])} frame {int(w['frame_index'])}")


def test_the_default_pool_follows_the_batch_size(small: tuple[Path, Path]) -> None:
    sizes = {b: EpisodeStream(small[1], batch_size=b).episode_pool_size for b in (None, 8, 32, 64)}
    assert sizes == {None: 16, 8: 16, 32: 40, 64: 80}
    assert EpisodeStream(small[1], batch_size=64, episode_pool_size=5).episode_pool_size == 5


def test_each_piece_is_decoded_forward_in_runs(
    small: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import reader.decode.video

    requests: dict[str, list[int]] = {}

    class Recording(reader.decode.video.VideoDecoder):  # type: ignore[misc]
        def __init__(self, path: str, **kwargs: object) -> None:
            super().__init__(path, **kwargs)
            self._asked = requests.setdefault(path, [])

        def get_frames_at(self, indices: list[int]):  # type: ignore[no-untyped-def]
            self._asked.extend(indices)
            return super().get_frames_at(indices=indices)

    monkeypatch.setattr(reader.decode.video, "VideoDecoder", Recording)
    # A pool of 1: every piece but the last is emitted while the pool is refilled, so in runs (the last
    # rounds of a consumer emit what is left at random, see reader.schedule).
    stream = EpisodeStream(small[1], episode_pool_size=1, seed=7, decode_threads=2, return_uint8=True)
    order = [(int(i["episode_index"]), int(i["frame_index"])) for i in stream]
    lengths = [8, 22, 8, 21, 4, 5, 1]
    assert sum(len(asked) for asked in requests.values()) == 2 * sum(lengths)  # every frame decoded once
    last_episode = order[-1][0]
    for path, asked in requests.items():
        episode = next(
            ref.episode_index
            for ref in stream.catalog.episodes
            if any(path.endswith(v.path) for v in ref.videos)
        )
        emitted = [f for e, f in order if e == episode]
        if episode != last_episode:
            assert asked == emitted, path  # decoded exactly in emission order
        else:  # its random tail is decoded ahead, in file order (reader.decode.tail)
            assert sorted(asked) == sorted(emitted) and asked != emitted, path
        jumps = sum(1 for a, b in zip(asked, asked[1:], strict=False) if b != a + 1)
        # a seek only where a run of 8 starts (and where the tail starts, and wraps to its lowest frame)
        assert jumps <= len(asked) // 8 + 2 * (episode == last_episode), f"{path}: {asked}"


@pytest.mark.parametrize("seek_mode", ["approximate", "exact"])
def test_uint8_transforms_and_no_windows_equal_the_reference(
    small: tuple[Path, Path], seek_mode: str
) -> None:
    def flip(frames: torch.Tensor) -> torch.Tensor:
        return frames.flip(-1)

    options = {"return_uint8": True, "image_transforms": flip}
    stream = EpisodeStream(small[1], episode_pool_size=2, seed=1, seek_mode=seek_mode, **options)
    assert _check_all(stream, ReferenceDataset(small[1], **options)) == 69


def test_lrs_copy_reads_the_same_samples_as_its_source(small: tuple[Path, Path]) -> None:
    v3 = list(EpisodeStream(small[0], delta_timestamps=WINDOWS, episode_pool_size=4, seed=3))
    lrs = list(EpisodeStream(small[1], delta_timestamps=WINDOWS, episode_pool_size=4, seed=3))
    assert len(v3) == len(lrs) == 69
    for a, b in zip(v3, lrs, strict=True):
        assert_items_equal(a, b)


def test_episode_selection_reads_only_those_episodes(small: tuple[Path, Path]) -> None:
    stream = EpisodeStream(small[1], episodes=[5, 1, 6], shuffle=False)
    pairs = [(int(i["episode_index"]), int(i["frame_index"])) for i in stream]
    assert pairs == [(1, f) for f in range(22)] + [(5, f) for f in range(5)] + [(6, 0)]


@pytest.mark.parametrize("layout", ["v3", "lrs"])
def test_http_source_with_faults_gives_identical_samples(
    small: tuple[Path, Path], tmp_path: Path, layout: str
) -> None:
    root = small[0 if layout == "v3" else 1]
    local = [(int(i["episode_index"]), int(i["frame_index"]), i) for i in EpisodeStream(root, seed=5)]
    faults = Faults(seed=3, fail_rate=0.15, truncate_rate=0.15)
    with RangeServer(root, faults=faults) as server:
        stream = EpisodeStream(server.url, seed=5, cache_dir=tmp_path / "cache")
        remote = [(int(i["episode_index"]), int(i["frame_index"]), i) for i in stream]
        assert any(r.fault is not None for r in server.requests)
    assert [p[:2] for p in remote] == [p[:2] for p in local]
    for (_, _, a), (_, _, b) in zip(remote, local, strict=True):
        assert_items_equal(a, b)


def test_lrs_admission_is_one_ranged_read_per_episode_and_one_footer_per_file(
    small: tuple[Path, Path], tmp_path: Path
) -> None:
    catalog = Catalog.open(small[1])
    data_files = {e.data_path for e in catalog.episodes}
    with RangeServer(small[1]) as server:
        stream = EpisodeStream(server.url, cache_dir=tmp_path / "cache", episode_pool_size=3)
        assert sum(1 for _ in stream) == 69
        data_gets = [r for r in server.requests if r.path.startswith("data/")]
        video_gets = [r for r in server.requests if r.path.startswith("videos/") and r.method == "GET"]
    assert all(r.byte_range is not None for r in data_gets)
    assert len(data_gets) == len(data_files) + len(catalog.episodes)
    assert sorted(r.path for r in video_gets) == sorted(v.path for e in catalog.episodes for v in e.videos)
    stats = stream.stats()
    assert stats.row_reads == len(data_gets) and stats.cache.misses == len(video_gets)


def test_videos_are_fetched_ahead_of_emission(small: tuple[Path, Path], tmp_path: Path) -> None:
    pool, ahead = 2, 3
    with RangeServer(small[1]) as server:
        stream = EpisodeStream(
            server.url, cache_dir=tmp_path / "cache", episode_pool_size=pool, prefetch_episodes=ahead
        )
        pieces = stream.schedule(0).emission(0, 0, 0).pieces
        expected = {v.path for p in pieces[: pool + ahead] for v in stream.catalog.episodes[p.episode].videos}
        iterator = iter(stream)
        next(iterator)  # admits the first `pool` pieces, which prefetches `ahead` more
        server.wait_for(lambda s: expected <= {r.path for r in s.requests})
        requested = {r.path for r in server.requests if r.path.startswith("videos/")}
        iterator.close()
    assert requested == expected


def test_a_shared_cache_dir_downloads_each_video_once(small: tuple[Path, Path], tmp_path: Path) -> None:
    with RangeServer(small[1]) as server:
        for seed in (0, 1):
            assert sum(1 for _ in EpisodeStream(server.url, cache_dir=tmp_path / "cache", seed=seed)) == 69
        video_gets = [r.path for r in server.requests if r.path.startswith("videos/") and r.method == "GET"]
    assert len(video_gets) == len(set(video_gets)) == 14


def _broken_copy(root: Path, tmp_path: Path, rel: str, content: bytes | None) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    if content is None:
        (copy / rel).unlink()
    else:
        (copy / rel).write_bytes(content)
    return copy


@pytest.mark.parametrize(
    ("layout", "content", "problem"),
    [
        ("v3", None, "missing"),
        ("v3", b"\x00garbage" * 64, "cannot open"),
        # The size the index lists, other bytes: the sha256 checked when the video is first opened.
        ("lrs", "same-size", "corrupt"),
    ],
    ids=["v3-missing", "v3-corrupt", "lrs-same-size"],
)
def test_broken_video_is_a_decode_error_naming_episode_camera_file(
    small: tuple[Path, Path], tmp_path: Path, layout: str, content: bytes | str | None, problem: str
) -> None:
    root = small[0 if layout == "v3" else 1]
    episode = 2
    rel = str(ReferenceDataset(root).video_path(episode, CAM1).relative_to(root))
    if content == "same-size":
        content = b"\x00" * (root / rel).stat().st_size
    copy = _broken_copy(root, tmp_path, rel, content if isinstance(content, bytes) else None)
    stream = EpisodeStream(copy, episodes=[episode], shuffle=False)
    with pytest.raises(
        DecodeError, match=rf"Invalid video .*{rel} \(episode {episode}, camera '{CAM1}'\): {problem}"
    ):
        list(stream)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "is missing, which"), (b"\x00garbage" * 64, "has 512 bytes, not the \\d+")],
    ids=["missing", "other-size"],
)
def test_a_video_missing_or_of_another_size_under_the_index_is_refused_at_open(
    small: tuple[Path, Path], tmp_path: Path, content: bytes | None, problem: str
) -> None:
    """`meta/` as the index lists it: damage, not an edit (`reader.format.fresh`), refused in one line."""
    rel = str(ReferenceDataset(small[1]).video_path(2, CAM1).relative_to(small[1]))
    copy = _broken_copy(small[1], tmp_path, rel, content)
    with pytest.raises(IntegrityError, match=rf"^Invalid file \({copy}/{rel}\): {problem}"):
        EpisodeStream(copy, episodes=[2], shuffle=False)


def test_missing_video_over_http_is_a_decode_error(small: tuple[Path, Path], tmp_path: Path) -> None:
    rel = str(ReferenceDataset(small[1]).video_path(3, CAM0).relative_to(small[1]))
    copy = _broken_copy(small[1], tmp_path, rel, None)
    with RangeServer(copy) as server:
        stream = EpisodeStream(server.url, episodes=[3], cache_dir=tmp_path / "cache")
        with pytest.raises(
            DecodeError, match=rf"Invalid video http://.*/{rel} \(episode 3, camera '{CAM0}'\): missing"
        ):
            list(stream)


def test_corrupt_video_over_http_fails_its_integrity_check(small: tuple[Path, Path], tmp_path: Path) -> None:
    rel = str(ReferenceDataset(small[1]).video_path(4, CAM0).relative_to(small[1]))
    with RangeServer(small[1], faults=Faults(corrupt={rel: 100})) as server:
        stream = EpisodeStream(server.url, episodes=[4], cache_dir=tmp_path / "cache")
        with pytest.raises(
            DecodeError,
            match=rf"Invalid video http://.*/{rel} \(episode 4, camera '{CAM0}'\): corrupt .*sha256",
        ) as caught:
            list(stream)
    assert isinstance(caught.value.__cause__, IntegrityError)


def test_rows_that_disagree_with_meta_are_a_dataset_error(small: tuple[Path, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(small[0], copy)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = copy / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    shifted = table.set_column(table.column_names.index("index"), "index", pc.add(table.column("index"), 1))
    pq.write_table(shifted, path)
    with pytest.raises(
        DatasetError,
        match=r"data/chunk-000/file-000\.parquet, episode 0, field 'index': Invalid rows \(1\.\.8, 8 rows\)\. Expected index 0\.\.7",
    ):
        list(EpisodeStream(copy, episodes=[0]))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"delta_timestamps": {"action": [0.01]}},
            ValueError,
            r"Invalid delta_timestamps \(\{'action': \[0\.01\]\}\)",
        ),
        ({"delta_timestamps": {"nope": [0.0]}}, ValueError, r"Invalid delta_timestamps key \('nope'\)"),
        ({"episodes": [7]}, ValueError, r"Invalid episode index \(7\)\. Expected < 7"),
        (
            {"episodes": [1, 1]},
            ValueError,
            r"Invalid episodes \(\[1, 1\]\)\. Expected each episode index once\.",
        ),
        ({"episodes": []}, ValueError, r"Invalid episodes \(\[\]\)"),
        ({"rank": 2, "world_size": 2}, ValueError, r"Invalid rank \(2\)\. Expected < world_size \(2\)\."),
        (
            {"world_size": 100_000},
            ValueError,
            r"Invalid world_size \(100000\)\. Expected at most the \d+ frames of an epoch",
        ),
        (
            {"episode_pool_size": 0},
            ValueError,
            r"Invalid episode_pool_size \(0\)\. Expected an integer >= 1\.",
        ),
        ({"prefetch_episodes": -1}, ValueError, r"Invalid prefetch_episodes \(-1\)"),
        ({"seed": -1}, ValueError, r"Invalid seed \(-1\)"),
        ({"image_transforms": 3}, ValueError, r"Invalid image_transforms \(3\)"),
        ({"decode_device": "tpu"}, ValueError, r"Invalid decode_device \('tpu'\)"),
        ({"batch_size": 0}, ValueError, r"Invalid batch_size \(0\)\. Expected an integer >= 1\."),
        ({"decode_threads": -1}, ValueError, r"Invalid decode_threads \(-1\)\. Expected an integer >= 0\."),
        ({"decode_ahead": -1}, ValueError, r"Invalid decode_ahead \(-1\)\. Expected an integer >= 0\."),
        (
            {"decoder_cache_size": 5, "episode_pool_size": 3},
            ValueError,
            r"Invalid decoder_cache_size \(5\)\. Expected at least episode_pool_size x cameras \(3 x 2 = 6\)",
        ),
    ],
    ids=[
        "off-grid",
        "unknown-key",
        "episode-range",
        "duplicate",
        "empty",
        "rank",
        "ranks-over-frames",
        "pool",
        "prefetch",
        "seed",
        "transforms",
        "device",
        "batch-size",
        "threads",
        "ahead",
        "decoders",
    ],
)
def test_bad_arguments_are_refused(small: tuple[Path, Path], kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        EpisodeStream(small[1], **kwargs)


def test_cuda_decode_fails_clearly_without_cuda(small: tuple[Path, Path]) -> None:
    if torch.cuda.is_available():
        assert EpisodeStream(small[1], decode_device="cuda") is not None
        return
    with pytest.raises(ValueError, match=r"Invalid decode_device \('cuda'\): CUDA is not available here"):
        EpisodeStream(small[1], decode_device="cuda")


def test_not_a_dataset_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"meta/info\.json: missing: not a LeRobot v3 dataset root"):
        EpisodeStream(tmp_path)


def test_topology_defaults_come_from_the_environment(
    small: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    stream = EpisodeStream(small[1])
    assert (stream.rank, stream.world_size) == (1, 3)
    assert len(stream) == 69 // 3 == sum(1 for _ in stream)


def test_camera_less_dataset_across_chunk_directories(sample_chunked_ds: Path) -> None:
    stream = EpisodeStream(
        sample_chunked_ds, delta_timestamps={"action": [-1 / FPS, 0.0]}, episode_pool_size=2
    )
    reference = ReferenceDataset(sample_chunked_ds, delta_timestamps={"action": [-1 / FPS, 0.0]})
    assert stream.catalog.info.video_keys == []
    assert _check_all(stream, reference) == sum(e.length for e in stream.catalog.episodes)


@pytest.mark.timeout(120)
def test_workers_sharing_packed_v3_videos_over_http_do_not_stall(
    small: tuple[Path, Path], tmp_path: Path
) -> None:
    # Several episodes share each packed MP4, so both workers fetch the same files at once, and one
    # worker's pieces use a file while the other waits to download it.
    from torch.utils.data import DataLoader

    with RangeServer(small[0], faults=Faults(latency_s=0.02)) as server:
        stream = EpisodeStream(
            server.url, cache_dir=tmp_path / "cache", episode_pool_size=4, return_uint8=True
        )
        loader = DataLoader(stream, batch_size=4, num_workers=2)
        seen = sorted(
            (int(e), int(f))
            for b in loader
            for e, f in zip(b["episode_index"], b["frame_index"], strict=True)
        )
    lengths = [8, 22, 8, 21, 4, 5, 1]
    assert seen == [(e, f) for e, n in enumerate(lengths) for f in range(n)]


def test_local_sources_are_read_in_place(small: tuple[Path, Path], tmp_path: Path) -> None:
    stream = EpisodeStream(small[1], cache_dir=tmp_path / "cache")
    assert sum(1 for _ in stream) == 69
    copied = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.suffix in (".mp4", ".parquet")]
    assert copied == []
    assert stream.stats().cache.misses == 0


def test_remote_source_without_cache_dir_uses_a_temporary_one(small: tuple[Path, Path]) -> None:
    import gc

    with RangeServer(small[1]) as server:
        stream = EpisodeStream(server.url, episodes=[0, 1])
        temporary = Path(stream.cache.cache_dir)
        assert temporary.name.startswith("lrs-cache-")
        assert sum(1 for _ in stream) == 30
        assert list(temporary.rglob("*.mp4"))
    del stream
    gc.collect()
    assert not temporary.exists()


@pytest.mark.integration
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_stats_of_all_processes_sum_the_workers(
    small: tuple[Path, Path], tmp_path: Path, method: str
) -> None:
    """In the trainer with num_workers > 0, `stats()` counts nothing (the workers read); with
    `all_processes=True` it sums every worker's counters, exited ones too, for this stream only."""
    from torch.utils.data import DataLoader

    with RangeServer(small[1]) as server:
        stream = EpisodeStream(server.url, cache_dir=tmp_path / "cache", batch_size=4)
        loader = DataLoader(stream, batch_size=4, num_workers=2, multiprocessing_context=method)
        samples = sum(len(batch["index"]) for batch in loader)
        total = stream.stats(all_processes=True)
        assert stream.stats().samples == 0 and samples == total.samples == 69
        assert total.episodes_admitted >= 7 and total.frames_decoded >= 69 * 2 and total.decode_seconds > 0
        assert total.admissions_waited + total.samples_local > 0 and total.row_reads > 0
        assert total.cache.misses == 7 * 2  # every video fetched once on the node (rows: ranged reads)
        # Another stream over the same cache starts from zero; its own iteration in this process counts.
        other = EpisodeStream(server.url, cache_dir=tmp_path / "cache")
        assert other.stats(all_processes=True).samples == 0
        assert other.stats(all_processes=True).cache == CacheStats()  # not the first stream's downloads
        assert sum(1 for _ in other) == 69 and other.stats(all_processes=True).samples == 69
        # Its cache counters are its own: every video already on the node (rows are ranged reads again).
        mine = other.stats(all_processes=True).cache
        assert mine.misses == 0 and mine.hits >= 7 * 2 and mine.range_reads >= 7
        assert sum_cache_stats(tmp_path / "cache").misses == 7 * 2  # the node's totals, apart


def test_published_stats_leave_out_a_damaged_file_and_say_so(tmp_path: Path) -> None:
    """The reader's published counters follow the cache's policy (`cache.counter_files`): a file that is
    not ours is left out with a warning naming it, never skipped silently, never an error."""
    from cache.counter_files import CountersWarning
    from reader.runtime.counters import ReaderStats, published_file, read_published

    file = published_file(str(tmp_path), "run", lambda: ReaderStats(samples=5, decode_seconds=0.5))
    file.changed()
    assert file.written and read_published(str(tmp_path), "run") == [
        ReaderStats(samples=5, decode_seconds=0.5)
    ]
    damaged = Path(file.path).with_name("1-damaged.json")
    damaged.write_text('{"pid": 1, "counters": {"samples": 3')  # cut short by a crash
    with pytest.warns(CountersWarning, match=r"Invalid counters file \(.+1-damaged\.json\): JSONDecodeError"):
        assert read_published(str(tmp_path), "run") == [ReaderStats(samples=5, decode_seconds=0.5)]


@pytest.mark.parametrize("layout", ["v3", "lrs"])
def test_a_frame_by_its_index_equals_the_reference(small: tuple[Path, Path], layout: str) -> None:
    """`stream[i]` is `LeRobotDataset(...)[i]`: the i-th frame of the selected episodes, ascending, with its
    windows; negative indices count from the end; a selection's frames only."""
    root = small[0 if layout == "v3" else 1]
    reference = ReferenceDataset(root, delta_timestamps=WINDOWS)
    stream = EpisodeStream(root, delta_timestamps=WINDOWS, episodes=[4, 1, 2])
    order = [(e, f) for e in (1, 2, 4) for f in range(stream.catalog.episodes[e].length)]
    assert stream.num_frames == len(order)
    for index in (0, 1, len(order) // 2, len(order) - 1, -1, -len(order)):
        episode, frame = order[index]
        assert_items_equal(stream[index], reference.get(episode, frame), context=f"stream[{index}]")


def test_a_frame_index_out_of_range_or_of_another_type_is_refused(small: tuple[Path, Path]) -> None:
    stream = EpisodeStream(small[1], episodes=[0])
    n = stream.num_frames
    with pytest.raises(IndexError, match=rf"Invalid index \({n}\)\. Expected -{n} <= index < {n}"):
        stream[n]
    with pytest.raises(TypeError, match=r"Invalid index \(slice"):
        stream[0:2]  # type: ignore[index]
    assert [int(item["index"]) for item in (stream[0], stream[n - 1])] == [
        int(next(iter(EpisodeStream(small[1], episodes=[0], shuffle=False)))["index"]),
        int(stream[-1]["index"]),
    ]
