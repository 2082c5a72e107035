"""Prove an lrs/1 dataset: every invariant of the layout, and with a source, equality with it.

Checks run in classes, in this order, and stop after the first class that finds violations (a broken
index makes every later check noise):

1. `layout`   meta/lrs/ is present, well-formed and agrees with meta/info.json; the dataset opens as v3.
2. `files`    every file of files.parquet exists with its size and sha256; no file is unlisted.
3. `tables`   one row group per episode, rows in index order, frame indices 0..length-1, page index and
              statistics written, the index's row-group byte range exact.
4. `pointers` every meta/episodes pointer is true: data file, rows, video file, timestamps 0..length/fps.
5. `videos`   each episode video has `length` frames at i / fps, starting on a keyframe, as info.json says.
6. `source-tables` (with a source) schema, metadata, tasks, stats and every row equal the source's.
7. `source-videos` (with a source) decoded frames identical (copied) or above a PSNR floor (re-encoded).
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cache.remote import Remote, redact, resolve
from reader.depth import is_depth
from reader.errors import DatasetError, LayoutError
from reader.format.index import FILES_INDEX
from reader.format.layout import Layout
from reader.format.v3 import EPISODES_DIR, INFO_PATH, STATS_PATH, TASKS_PATH
from reshard.execute import list_files, local_copy
from reshard.meta import file_sha256, stats_json
from reshard.selection import DROPPED_JSON, Selection, select
from reshard.source import Source, check_files_exist, check_rows, open_source
from reshard.tables import INDEX_COLUMNS, EpisodeRows, range_crc32, row_group_ranges
from reshard.video.compare import DEFAULT_MIN_PSNR_DB, compare_episode_video, probe_video

CHECKS = ("layout", "files", "tables", "pointers", "videos", "source-tables", "source-videos")
# The v3 pointer columns of meta/episodes: rewritten by reshard, compared with the source's otherwise.
_POINTER_PREFIXES = ("data/", "videos/", "dataset_from_index", "dataset_to_index", "meta/episodes/")
_MAX_LISTED = 20


@dataclass(frozen=True)
class Violation:
    """One broken invariant.

    Attributes:
        check: the check class (one of `CHECKS`).
        message: what is wrong, with the expected value.
        file: the dataset-relative file it concerns, if any.
        episode: the episode it concerns, if any.
    """

    check: str
    message: str
    file: str | None = None
    episode: int | None = None

    def __str__(self) -> str:
        where = [w for w in (self.file, None if self.episode is None else f"episode {self.episode}") if w]
        return f"{', '.join(where)}: {self.message}" if where else self.message


@dataclass(frozen=True)
class VideoQuality:
    """How one episode video compares with its source."""

    episode: int
    key: str
    reencoded: bool
    identical: bool
    psnr_min_db: float
    psnr_mean_db: float


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify`.

    Attributes:
        url: the dataset verified.
        against: the source it was compared with, if any.
        passed: the check classes that passed, in order.
        violations: the violations of the first failing class (empty when everything passed).
        videos: per-episode video comparisons (with a source).
    """

    url: str
    against: str | None
    passed: tuple[str, ...]
    violations: tuple[Violation, ...] = ()
    videos: tuple[VideoQuality, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        # Printed and written as JSON: no token or password in them.
        object.__setattr__(self, "url", redact(self.url))
        object.__setattr__(self, "against", None if self.against is None else redact(self.against))

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def failed_check(self) -> str | None:
        return self.violations[0].check if self.violations else None

    def describe(self) -> str:
        """A report for humans: the checks passed, then the first failing class with its violations."""
        lines = [f"verify {self.url}" + (f" against {self.against}" if self.against else "")]
        lines += [f"  ok    {name}" for name in self.passed]
        if self.videos:
            reencoded = [v for v in self.videos if v.reencoded]
            copied = len(self.videos) - len(reencoded)
            lines.append(
                f"        {copied} episode videos identical to the source, {len(reencoded)} re-encoded"
            )
            if reencoded:
                worst = min(v.psnr_min_db for v in reencoded)
                mean = float(np.mean([v.psnr_mean_db for v in reencoded]))
                lines.append(f"        re-encoded PSNR: worst frame {worst:.1f} dB, mean {mean:.1f} dB")
        if self.violations:
            lines.append(f"  FAIL  {self.failed_check}: {len(self.violations)} violation(s)")
            lines += [f"        {v}" for v in self.violations[:_MAX_LISTED]]
            if len(self.violations) > _MAX_LISTED:
                lines.append(f"        ... and {len(self.violations) - _MAX_LISTED} more")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (infinite PSNR, for identical frames, as null)."""
        doc = asdict(self)
        for video in doc["videos"]:
            for name in ("psnr_min_db", "psnr_mean_db"):
                video[name] = None if math.isinf(video[name]) else video[name]
        doc["ok"] = self.ok
        return doc


@dataclass
class _Run:
    """The state shared by the checks of one `verify` call, once the dataset's metadata loaded."""

    remote: Remote
    tmp: Path
    min_psnr: float
    layout: Layout
    dataset: Source
    source: Source | None
    violations: list[Violation] = field(default_factory=list)
    videos: list[VideoQuality] = field(default_factory=list)

    def fail(self, check: str, message: str, file: str | None = None, episode: int | None = None) -> None:
        self.violations.append(Violation(check, message, file, episode))

    def local(self, remote: Remote, rel: str) -> contextlib.AbstractContextManager[str]:
        """A local path of a file of the dataset or the source (fetched into the temp dir if remote)."""
        return local_copy(remote, rel, self.tmp)


def verify(
    url: str,
    *,
    against: str | None = None,
    min_psnr: float = DEFAULT_MIN_PSNR_DB,
    storage_options: dict[str, Any] | None = None,
) -> VerifyReport:
    """Check every lrs/1 invariant of the dataset at `url`, and with `against` its equality with the source.

    Args:
        url: the lrs/1 dataset (path or URL).
        against: the v3 source it was resharded from.
        min_psnr: the lowest per-frame PSNR (dB) accepted for a re-encoded episode video.
        storage_options: passed to the fsspec filesystems.

    Returns:
        The checks passed and the violations of the first failing class.

    Raises:
        DatasetError: `against` is not a readable v3 dataset, or `url` holds no dataset at all (no
            `meta/info.json`): nothing to check, which is an input error, not a failed check.
    """
    # The files are checked for the episodes the output kept (`_as_resharded`).
    source = open_source(against, storage_options=storage_options, check_files=False) if against else None
    remote = resolve(url, storage_options=storage_options)
    if not remote.exists(INFO_PATH):
        raise DatasetError("missing: not a LeRobot dataset root", file=remote.display(INFO_PATH))
    try:
        layout = Layout.load(remote)
        # Missing files are the next class's business, reported there with the rest.
        dataset = open_source(remote.url, storage_options=storage_options, check_files=False)
    except (LayoutError, DatasetError) as exc:
        violation = Violation("layout", str(exc))
        return VerifyReport(remote.url, source.url if source else None, (), (violation,))
    checks: list[tuple[str, Callable[[_Run], None]]] = [
        ("files", _check_files),
        ("tables", _check_tables),
        ("pointers", _check_pointers),
        ("videos", _check_videos),
    ]
    if source is not None:
        checks += [("source-tables", _check_source_tables), ("source-videos", _check_source_videos)]
        try:
            source = _as_resharded(source, remote)
        except (DatasetError, ValueError) as exc:
            violation = Violation("source-tables", str(exc), DROPPED_JSON)
            return VerifyReport(remote.url, source.url, ("layout",), (violation,))
        check_files_exist(source)
    passed = ["layout"]
    with tempfile.TemporaryDirectory(prefix="lrs-verify-") as tmp:
        run = _Run(remote, Path(tmp), min_psnr, layout, dataset, source)
        for name, check in checks:
            check(run)
            if run.violations:
                break
            passed.append(name)
    return VerifyReport(
        url=remote.url,
        against=source.url if source else None,
        passed=tuple(passed),
        violations=tuple(run.violations),
        videos=tuple(run.videos),
    )


def _as_resharded(source: Source, remote: Remote) -> Source:
    """The source as the output saw it: where the output left episodes out (`meta/lrs/dropped.json`),
    the kept ones, renumbered."""
    if remote.exists(DROPPED_JSON):
        selection = Selection.from_json(remote.cat(DROPPED_JSON), file=remote.display(DROPPED_JSON))
        source = select(source, selection)
    return source


# --- 2. files -----------------------------------------------------------------------------------------


def _check_files(run: _Run) -> None:
    # Stores that cannot list (plain HTTP) give {}: then only listed files are checked, by fetching them.
    present = list_files(run.remote)
    for rel, entry in sorted(run.layout.files.items()):
        if present and rel not in present:
            run.fail("files", "missing", file=rel)
            continue
        try:
            with run.local(run.remote, rel) as path:
                size = Path(path).stat().st_size
                if size != entry.bytes:
                    run.fail(
                        "files", f"Invalid size ({size}). Expected {entry.bytes} as files.parquet lists.", rel
                    )
                elif file_sha256(path) != entry.sha256:
                    run.fail("files", "Invalid sha256. Expected the one files.parquet lists.", rel)
        except FileNotFoundError:
            run.fail("files", "missing", file=rel)
    for rel in sorted(set(present) - set(run.layout.files) - {FILES_INDEX}):
        run.fail("files", "not listed in meta/lrs/files.parquet", file=rel)


# --- 3. tables ----------------------------------------------------------------------------------------


def _check_tables(run: _Run) -> None:
    by_file: dict[str, list[Any]] = {}
    for entry in run.layout.episodes:
        by_file.setdefault(entry.data_path, []).append(entry)
    for rel, entries in sorted(by_file.items()):
        with run.local(run.remote, rel) as path:
            _check_data_file(run, rel, path, entries)


def _check_data_file(run: _Run, rel: str, path: str, entries: list[Any]) -> None:
    meta = pq.read_metadata(path)
    if meta.num_row_groups != len(entries):
        run.fail(
            "tables",
            f"Invalid row groups ({meta.num_row_groups}). Expected {len(entries)}, one per episode.",
            rel,
        )
        return
    ranges = row_group_ranges(meta)
    file = pq.ParquetFile(path)
    for entry in entries:
        group = meta.row_group(entry.row_group)
        ep = entry.episode_index
        if group.num_rows != entry.length:
            run.fail(
                "tables", f"Invalid row group rows ({group.num_rows}). Expected {entry.length}.", rel, ep
            )
            continue
        if ranges[entry.row_group] != (entry.row_group_offset, entry.row_group_bytes):
            run.fail(
                "tables",
                f"Invalid row group byte range ({entry.row_group_offset}, {entry.row_group_bytes}). "
                f"Expected {ranges[entry.row_group]}, covering all its column chunks.",
                rel,
                ep,
            )
        if entry.row_group_crc32 is not None:
            with open(path, "rb") as handle:
                crc = range_crc32(handle, entry.row_group_offset, entry.row_group_bytes)
            if crc != entry.row_group_crc32:
                run.fail(
                    "tables",
                    f"Invalid row group CRC-32 ({crc}). Expected {entry.row_group_crc32}, as the index records.",
                    rel,
                    ep,
                )
        columns = [group.column(c) for c in range(group.num_columns)]
        # Encoded images get an offset index but no column index (pyarrow keeps no min/max of blobs).
        blobs = {f"{key}.bytes" for key in run.dataset.info.image_keys}
        if not all(c.has_offset_index and (c.has_column_index or c.path_in_schema in blobs) for c in columns):
            run.fail("tables", "Invalid page index (missing). Expected write_page_index=True.", rel, ep)
        if not all(c.is_stats_set for c in columns):
            run.fail(
                "tables", "Invalid column statistics (missing). Expected statistics on every column.", rel, ep
            )
        rows = file.read_row_group(entry.row_group, columns=INDEX_COLUMNS)
        _check_rows(run, rel, entry, rows)
    try:
        check_rows(run.dataset, rel, file.read(columns=INDEX_COLUMNS))
    except DatasetError as exc:
        run.fail("tables", str(exc), rel)


def _check_rows(run: _Run, rel: str, entry: Any, rows: pa.Table) -> None:
    ep = entry.episode_index
    index = rows.column("index").to_numpy()
    expected = np.arange(entry.dataset_from_index, entry.dataset_from_index + entry.length)
    if not np.array_equal(index, expected):
        run.fail("tables", f"Invalid index column. Expected {expected[0]}..{expected[-1]} in order.", rel, ep)
    if not (rows.column("episode_index").to_numpy() == ep).all():
        run.fail("tables", "Invalid episode_index column. Expected one episode per row group.", rel, ep)
    if not np.array_equal(rows.column("frame_index").to_numpy(), np.arange(entry.length)):
        run.fail("tables", f"Invalid frame_index column. Expected 0..{entry.length - 1} in order.", rel, ep)


# --- 4. pointers --------------------------------------------------------------------------------------


def _check_pointers(run: _Run) -> None:
    info, fps = run.dataset.info, run.dataset.info.fps
    where = EPISODES_DIR
    for episode, entry in zip(run.dataset.episodes, run.layout.episodes, strict=True):
        ep = episode.episode_index
        data_path = info.data_file(episode.data_chunk_index, episode.data_file_index)
        if data_path != entry.data_path:
            run.fail(
                "pointers", f"Invalid data file ({data_path!r}). Expected {entry.data_path!r}.", where, ep
            )
        if (episode.dataset_from_index, episode.length) != (entry.dataset_from_index, entry.length):
            run.fail(
                "pointers",
                f"Invalid rows ([{episode.dataset_from_index}, +{episode.length})). "
                f"Expected [{entry.dataset_from_index}, +{entry.length}).",
                where,
                ep,
            )
        for video in entry.videos:
            segment = episode.video(video.key)
            path = info.video_file(video.key, segment.chunk_index, segment.file_index)
            span = (segment.from_timestamp, segment.to_timestamp)
            if path != video.path:
                run.fail("pointers", f"Invalid video file ({path!r}). Expected {video.path!r}.", where, ep)
            if not (span[0] == 0.0 and math.isclose(span[1], episode.length / fps, abs_tol=1e-9)):
                run.fail(
                    "pointers",
                    f"Invalid video time range ({span[0]}, {span[1]}) for {video.key}. "
                    f"Expected (0.0, {episode.length / fps}).",
                    where,
                    ep,
                )


# --- 5. videos ----------------------------------------------------------------------------------------


def _check_videos(run: _Run) -> None:
    fps = run.layout.fps
    for entry in run.layout.episodes:
        for video in entry.videos:
            expected = run.layout.info.features[video.key].get("info", {})
            with run.local(run.remote, video.path) as path:
                probe = probe_video(path, episode=entry.episode_index, camera=video.key)
            problems = []
            if probe.frames != entry.length:
                problems.append(f"Invalid frame count ({probe.frames}). Expected {entry.length}.")
            times = np.asarray(probe.frame_times_s)
            if len(times) == entry.length and not np.allclose(
                times, np.arange(entry.length) / fps, atol=1e-4
            ):
                problems.append("Invalid frame timestamps. Expected frame i at i / fps.")
            if not probe.starts_on_keyframe or (len(times) and abs(times[0]) > 1e-6):
                problems.append("Invalid first frame. Expected a keyframe at 0 s.")
            for name, got in (("video.codec", probe.codec), ("video.pix_fmt", probe.pix_fmt)):
                if name in expected and expected[name] != got:
                    problems.append(
                        f"Invalid {name} ({got!r}). Expected {expected[name]!r} as info.json says."
                    )
            for message in problems:
                run.fail("videos", message, video.path, entry.episode_index)


# --- 6. source tables ---------------------------------------------------------------------------------


def _check_source_tables(run: _Run) -> None:
    src, out = run.source, run.dataset
    if src is None:
        return
    if [e.length for e in src.episodes] != [e.length for e in out.episodes]:
        run.fail("source-tables", "Invalid episode lengths. Expected the source's, episode for episode.")
        return
    if src.remote.cat(TASKS_PATH) != out.remote.cat(TASKS_PATH):
        run.fail("source-tables", "Invalid content. Expected the source's bytes.", TASKS_PATH)
    stats = stats_json(src)
    if stats is not None and (not out.remote.exists(STATS_PATH) or stats != out.remote.cat(STATS_PATH)):
        expected = "the source's bytes" if src.parent is None else "the kept episodes' stats"
        run.fail("source-tables", f"Invalid content. Expected {expected}.", STATS_PATH)
    _compare_episode_columns(run, src, out)
    with _SourceRows(run, src) as source_rows:
        for rel in run.layout.data_files():
            with run.local(run.remote, rel) as path:
                file = pq.ParquetFile(path)
                for entry in (e for e in run.layout.episodes if e.data_path == rel):
                    expected = source_rows.read(entry.episode_index)
                    _compare_rows(run, entry, file.read_row_group(entry.row_group), expected)


class _SourceRows:
    """The source rows of episodes visited in order: one source data file open at a time."""

    def __init__(self, run: _Run, source: Source) -> None:
        self.run, self.source = run, source
        self.stack = contextlib.ExitStack()
        self.current: tuple[str, EpisodeRows] | None = None
        self.schema: pa.Schema | None = None

    def __enter__(self) -> _SourceRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def read(self, ep: int) -> pa.Table:
        """The rows of output episode `ep` as the source has them (renumbered where episodes were left out)."""
        rel = self.source.data_file(self.source.episodes[ep])
        if self.current is None or self.current[0] != rel:
            self.stack.close()
            path = self.stack.enter_context(self.run.local(self.source.remote, rel))
            self.schema = self.schema or pq.read_schema(path)
            rows = EpisodeRows(self.source, rel, path, self.schema)
            self.stack.callback(rows.close)
            self.current = (rel, rows)
        table = self.current[1].episode(ep)
        return table.replace_schema_metadata(self.schema.metadata if self.schema else None)


def _compare_episode_columns(run: _Run, src: Source, out: Source) -> None:
    a, b = src.episodes_table, out.episodes_table
    for name in a.column_names:
        if name.startswith(_POINTER_PREFIXES):
            continue
        if name not in b.column_names or not a.column(name).equals(b.column(name)):
            run.fail("source-tables", f"Invalid column {name!r}. Expected the source's values.", EPISODES_DIR)


def _compare_rows(run: _Run, entry: Any, got: pa.Table, expected: pa.Table) -> None:
    ep, rel = entry.episode_index, entry.data_path
    if got.schema.metadata != expected.schema.metadata or not got.schema.equals(expected.schema):
        run.fail("source-tables", "Invalid schema or schema metadata. Expected the source's.", rel, ep)
    elif not tables_equal(got, expected):
        run.fail("source-tables", "Invalid rows. Expected every value equal to the source's.", rel, ep)


def tables_equal(a: pa.Table, b: pa.Table) -> bool:
    """Equal values, with NaN equal to NaN (a sensor that reported NaN is copied, not changed)."""
    if a.equals(b):
        return True
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    return all(
        a.column(n).equals(b.column(n)) or _nan_equal(a.column(n), b.column(n)) for n in a.column_names
    )


def _nan_equal(x: pa.ChunkedArray | pa.Array, y: pa.ChunkedArray | pa.Array) -> bool:
    x = x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x
    y = y.combine_chunks() if isinstance(y, pa.ChunkedArray) else y
    while pa.types.is_list(x.type) or pa.types.is_large_list(x.type) or pa.types.is_fixed_size_list(x.type):
        if not (x.is_null().equals(y.is_null()) and pc.list_value_length(x).equals(pc.list_value_length(y))):
            return False
        x, y = pc.list_flatten(x), pc.list_flatten(y)
    if not pa.types.is_floating(x.type) or not x.is_null().equals(y.is_null()):
        return False
    return bool(
        np.array_equal(x.to_numpy(zero_copy_only=False), y.to_numpy(zero_copy_only=False), equal_nan=True)
    )


# --- 7. source videos ---------------------------------------------------------------------------------


def _check_source_videos(run: _Run) -> None:
    src, layout = run.source, run.layout
    if src is None:
        return
    reencoded = {(r["episode"], r["camera"]) for r in layout.layout.get("reencoded", [])}
    copy_mode = layout.params.get("video", "copy") == "copy"
    for key in src.video_keys:
        # A depth map's 12-bit codes must come back bit for bit (copied, or re-encoded losslessly): equal
        # codes are equal depth; an 8-bit view's PSNR would hide a destroyed depth stream.
        depth = is_depth(src.info.features[key])
        for rel, episodes in src.episodes_by_video_file(key).items():
            with run.local(src.remote, rel) as src_path:
                for episode in episodes:
                    ep = episode.episode_index
                    video = layout.episode(ep).videos[src.video_keys.index(key)]
                    with run.local(run.remote, video.path) as out_path:
                        result = compare_episode_video(
                            src_path,
                            episode.video(key).from_timestamp,
                            out_path,
                            length=episode.length,
                            fps=src.info.fps,
                            episode=ep,
                            camera=key,
                        )
                    was_reencoded = (not copy_mode or (ep, key) in reencoded) and not depth
                    run.videos.append(
                        VideoQuality(
                            ep, key, was_reencoded, result.identical, result.psnr_min_db, result.psnr_mean_db
                        )
                    )
                    _judge(run, video.path, ep, result, was_reencoded, depth=depth)


def _judge(run: _Run, rel: str, ep: int, result: Any, reencoded: bool, *, depth: bool = False) -> None:
    for problem in result.problems:
        run.fail("source-videos", problem, rel, ep)
    if depth and not result.identical:
        run.fail(
            "source-videos",
            "Invalid depth frames (not the source's codes). Expected the source's 12-bit depth codes "
            "exactly: a depth map is copied or re-encoded losslessly, never to fewer bits.",
            rel,
            ep,
        )
    elif not reencoded and not result.identical:
        run.fail(
            "source-videos",
            f"Invalid frames (PSNR min {result.psnr_min_db:.1f} dB). Expected frames identical to the source's "
            "(copied, not re-encoded).",
            rel,
            ep,
        )
    elif reencoded and result.psnr_min_db < run.min_psnr:
        run.fail(
            "source-videos",
            f"Invalid quality (PSNR min {result.psnr_min_db:.1f} dB, mean {result.psnr_mean_db:.1f} dB). "
            f"Expected every frame >= {run.min_psnr:g} dB.",
            rel,
            ep,
        )
