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
7. `source-videos` (with a source) decoded frames identical (copied) or above a PSNR floor, with the
              source's colours (re-encoded).

Classes 6 and 7 are in `reshard.verify_source`.
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
import pyarrow.parquet as pq

from cache.remote import Remote, resolve
from cache.retry import redact
from reader.errors import DatasetError, LayoutError
from reader.format.index import FILES_INDEX, LAYOUT_JSON
from reader.format.layout import Layout
from reader.format.v3 import EPISODES_DIR, INFO_PATH
from reshard.checks import check_rows
from reshard.execute import list_files, local_copy
from reshard.fingerprint import SourceFingerprint, describe_change
from reshard.meta import file_sha256
from reshard.selection import DROPPED_JSON
from reshard.source import Source, check_files_exist, open_source
from reshard.tables import INDEX_COLUMNS, range_crc32, row_group_ranges
from reshard.verify_source import VideoQuality, as_resharded, check_source_tables, check_source_videos
from reshard.video.compare import DEFAULT_MIN_PSNR_DB, probe_video

CHECKS = ("layout", "files", "tables", "pointers", "videos", "source-tables", "source-videos")
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
                gains, offsets = [v.gain for v in reencoded], [v.offset for v in reencoded]
                lines.append(
                    f"        re-encoded colours: gain {min(gains):.3f} to {max(gains):.3f}, offset "
                    f"{min(offsets):+.4f} to {max(offsets):+.4f}"
                )
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
    changed = _source_change(layout, source) if source is not None else None
    if changed is not None:
        checks.append(("source-tables", lambda run: run.fail("source-tables", changed, LAYOUT_JSON)))
    elif source is not None:
        checks += [("source-tables", check_source_tables), ("source-videos", check_source_videos)]
        try:
            source = as_resharded(source, remote)
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


def _source_change(layout: Layout, source: Source) -> str | None:
    """Where the output records the fingerprint of the source it was made from and `source` has another,
    the violation saying so (its checks would only find the consequences: other lengths, other rows)."""
    recorded = SourceFingerprint.from_json(layout.layout.get("source", {}).get("fingerprint"))
    if recorded is None or source.fingerprint is None or recorded == source.fingerprint:
        return None
    return (
        f"{redact(layout.url)} was resharded from another version of {redact(source.url)}: "
        f"{describe_change(recorded, source.fingerprint)}. Expected the source it was resharded from, whose "
        "metadata fingerprint meta/lrs/layout.json records."
    )


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
