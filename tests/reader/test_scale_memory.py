"""What a reader process holds does not grow with the dataset: the columnar index gives the
records the row-by-row parse gave, a row group is read with its own cut of the footer, other footers are
kept within a byte bound, and a pickled stream stays small."""

from __future__ import annotations

import io
import json
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reader import EpisodeStream
from reader.errors import DatasetError
from reader.format.catalog import Catalog
from reader.format.footer import cut_footer
from reader.format.index import (
    EPISODES_INDEX,
    FILES_INDEX,
    EpisodeEntry,
    FileEntry,
    VideoFile,
    episodes_from_table,
    episodes_to_table,
    file_index,
    files_to_table,
)
from reader.format.parquet import row_group_span
from reader.runtime.rows import RowGroupReader

KEYS = ["observation.images.a", "observation.images.b"]


def _entries(count: int, *, keys: list[str] = KEYS, seed: int = 0, crc: bool = True) -> list[EpisodeEntry]:
    rng = random.Random(seed)
    entries, start = [], 0
    for e in range(count):
        length = rng.randint(1, 40)
        videos = tuple(
            VideoFile(k, f"videos/{k}/chunk-000/file-{e:06d}.mp4", rng.randint(100, 9999), 0.0, length / 30)
            for k in keys
        )
        entries.append(
            EpisodeEntry(
                e,
                length,
                start,
                f"data/chunk-000/file-{e // 7:03d}.parquet",
                e % 7,
                4 + e,
                100 + e,
                videos,
                rng.randint(0, 2**32 - 1) if crc else None,
            )  # fmt: skip
        )
        start += length
    return entries


def _row_by_row(table: pa.Table) -> list[EpisodeEntry]:
    """The parse the reader had before the columnar index: one record per row."""
    cols = table.to_pydict()
    crcs = cols.get("row_group_crc32", [None] * table.num_rows)
    out = []
    for row in range(table.num_rows):
        videos = tuple(
            VideoFile(
                k,
                *(cols[f"videos/{k}/{n}"][row] for n in ("path", "bytes", "from_timestamp", "to_timestamp")),
            )
            for k in KEYS
        )
        out.append(
            EpisodeEntry(
                *(
                    cols[n][row]
                    for n in ("episode_index", "length", "dataset_from_index", "data_path", "row_group")
                ),
                cols["row_group_offset"][row],
                cols["row_group_bytes"][row],
                videos,
                row_group_crc32=crcs[row],
            )  # fmt: skip
        )
    return sorted(out, key=lambda e: e.episode_index)


@pytest.mark.parametrize("crc", [True, False], ids=["crc", "no-crc-column"])
def test_the_columnar_index_gives_the_records_of_the_row_by_row_parse(crc: bool) -> None:
    entries = _entries(300)
    table = episodes_to_table(entries, KEYS)
    if not crc:
        table = table.drop_columns(["row_group_crc32"])
    shuffled = table.take(np.random.default_rng(1).permutation(table.num_rows))
    index = episodes_from_table(shuffled, KEYS)
    assert list(index) == _row_by_row(shuffled)
    assert index[-1] == index[len(index) - 1] and index[5:8] == list(index)[5:8]
    assert pickle.loads(pickle.dumps(index))[17] == index[17]
    assert np.array_equal(index.column("length"), [e.length for e in _row_by_row(shuffled)])


def test_the_columnar_files_index_finds_what_a_dict_finds() -> None:
    rng = random.Random(3)
    files = [
        FileEntry(f"videos/k/file-{rng.randint(0, 10**6):07d}.mp4", i, f"{i:064x}", "video")
        for i in range(500)
    ]
    files = list({f.path: f for f in files}.values())
    index = file_index(files_to_table(files).take(np.random.default_rng(2).permutation(len(files))))
    by_path = {f.path: f for f in files}
    assert len(index) == len(by_path) and list(index) == sorted(by_path)
    for path, entry in by_path.items():
        assert path in index and index[path] == entry
    assert "videos/k/none.mp4" not in index and index.get("videos/k/none.mp4") is None
    wanted = pa.array([files[3].path, "missing", files[9].path])
    assert index.positions(wanted).tolist()[1] == -1


# --- footers ------------------------------------------------------------------------------------------


class _Files:
    """Byte ranges of in-memory files (what RowGroupReader needs of a cache)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files, self.reads = files, 0

    def read_range(self, rel: str, start: int, end: int) -> bytes:
        self.reads += 1
        return self.files[rel][start:end]


def _parquet(groups: int, *, seed: int) -> bytes:
    """A data file as reshard writes it: one row group per episode, page index and statistics."""
    rng = np.random.default_rng(seed)
    sink = io.BytesIO()
    schema = pa.schema([("index", pa.int64()), ("state", pa.list_(pa.float32())), ("task", pa.string())])
    with pq.ParquetWriter(sink, schema, write_page_index=True) as writer:
        start = 0
        for _ in range(groups):
            n = int(rng.integers(1, 9))
            writer.write_table(
                pa.table(
                    {
                        "index": np.arange(start, start + n),
                        "state": [rng.random(3, dtype=np.float32).tolist() for _ in range(n)],
                        "task": [f"task {rng.integers(3)}"] * n,
                    },
                    schema=schema,
                )
            )
            start += n
    return sink.getvalue()


def _ranges(data: bytes) -> np.ndarray:
    metadata = pq.read_metadata(pa.BufferReader(data))
    spans = [row_group_span(metadata, g) for g in range(metadata.num_row_groups)]
    return np.array([(a, b - a) for a, b in spans], dtype=np.int64)


def test_a_row_group_read_with_its_cut_of_the_footer_equals_the_whole_footer_read() -> None:
    data = _parquet(300, seed=0)
    files = _Files({"data/a.parquet": data})
    ranges = _ranges(data)
    size = lambda rel: len(files.files[rel])  # noqa: E731
    cut = RowGroupReader(files, size, str, row_groups=lambda rel: ranges)
    unkept = RowGroupReader(files, size, str, row_groups=lambda rel: ranges, footer_bytes=1)
    whole = RowGroupReader(files, size, str)
    for g in [0, 1, 150, 299]:
        span = (int(ranges[g][0]), int(ranges[g].sum()))
        table = whole.read("data/a.parquet", g, span)
        assert cut.read("data/a.parquet", g, span).equals(table)
        assert unkept.read("data/a.parquet", g, span).equals(table)
    serialized = pq.read_metadata(pa.BufferReader(data)).serialized_size
    assert cut.footers_kept == (1, serialized), "the serialized footer is kept, not the parsed one"
    assert cut.range_reads == 2 + 4, "the footer (two reads: it exceeds 64 KiB), then one read per row group"
    assert unkept.footers_kept == (0, 0) and unkept.range_reads > 4 * 2, "each row group's part read"
    assert whole.footers_kept[0] == 1


def test_a_footer_not_laid_out_as_the_index_says_is_read_whole() -> None:
    data = _parquet(20, seed=1)
    ranges = _ranges(data)
    tail = data[-65536:]
    read = lambda a, b: data[a:b]  # noqa: E731
    assert cut_footer(read, len(data), ranges, tail=tail) is not None
    wrong = ranges.copy()
    wrong[7, 1] += 1
    assert cut_footer(read, len(data), wrong, tail=tail) is None
    assert cut_footer(read, len(data), ranges[:-1], tail=tail) is None
    files = _Files({"f": data})
    reader = RowGroupReader(files, lambda rel: len(data), str, row_groups=lambda rel: wrong)
    span = (int(ranges[9][0]), int(ranges[9].sum()))
    assert reader.read("f", 9, span).equals(pq.ParquetFile(pa.BufferReader(data)).read_row_group(9))


def test_the_footers_kept_are_bounded_by_bytes() -> None:
    files = _Files({f"data/{i}.parquet": _parquet(60, seed=i) for i in range(6)})
    one = pq.read_metadata(pa.BufferReader(files.files["data/0.parquet"])).serialized_size * 8
    reader = RowGroupReader(files, lambda rel: len(files.files[rel]), str, footer_bytes=int(2.5 * one))
    for _ in range(2):
        for rel in files.files:
            reader.read(rel, 3)
            kept, held = reader.footers_kept
            assert kept <= 3 and held <= 3 * one
    assert reader.footer_reads == 12, "evicted footers are read again"
    tiny = RowGroupReader(files, lambda rel: len(files.files[rel]), str, footer_bytes=1)
    tiny.read("data/0.parquet", 0)
    tiny.read("data/0.parquet", 1)
    assert tiny.footers_kept[0] == 1 and tiny.footer_reads == 1, "the footer in use is kept whatever its size"


# --- a pickled stream ---------------------------------------------------------------------------------


def _synthetic(root: Path, template: Path, count: int) -> Path:
    """An lrs/1 dataset's metadata with `count` episodes (no data or video file: enough to open a stream
    from a `file://` URL, where only the metadata decides whether the index is stale, not a listing)."""
    shutil.copytree(template / "meta", root / "meta", ignore=shutil.ignore_patterns("episodes"))
    info = json.loads((root / "meta/info.json").read_text())
    keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    entries = _entries(count, keys=keys, seed=count)
    info.update(total_episodes=count, total_frames=sum(e.length for e in entries))
    (root / "meta/info.json").write_text(json.dumps(info))
    pq.write_table(episodes_to_table(entries, keys), root / EPISODES_INDEX)
    files = [FileEntry(v.path, v.bytes, "0" * 64, "video") for e in entries for v in e.videos]
    files += [FileEntry(p, 1000, "1" * 64, "data") for p in sorted({e.data_path for e in entries})]
    pq.write_table(files_to_table(files), root / FILES_INDEX)
    return root


def test_a_pickled_stream_does_not_grow_with_the_episodes(sample_resharded_ds: Path, tmp_path: Path) -> None:
    sizes = {}
    for count in (50, 2000):
        root = _synthetic(tmp_path / f"ds{count}", sample_resharded_ds, count)
        stream = EpisodeStream(f"file://{root}", cache_dir=str(tmp_path / "cache"), batch_size=8)
        pickled = pickle.dumps(stream)
        sizes[count] = len(pickled)
        again = pickle.loads(pickled)
        assert again.catalog.fingerprint == stream.catalog.fingerprint
        assert (
            len(again.catalog.episodes) == count
            and again.catalog.episodes[count - 1] == stream.catalog.episodes[-1]
        )
    assert sizes[2000] - sizes[50] < 64, sizes
    assert sizes[2000] < 8192, sizes


def test_a_pickled_catalog_refuses_a_changed_dataset(sample_resharded_ds: Path, tmp_path: Path) -> None:
    root = _synthetic(tmp_path / "ds", sample_resharded_ds, 30)
    pickled = pickle.dumps(Catalog.open(f"file://{root}"))
    table = pq.read_table(root / FILES_INDEX)
    pq.write_table(table.set_column(2, "sha256", pa.array(["2" * 64] * table.num_rows)), root / FILES_INDEX)
    with pytest.raises(DatasetError, match="changed since this stream opened it"):
        pickle.loads(pickled)
