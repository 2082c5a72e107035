"""`lrs doctor SRC`: every defect of a LeRobot v3 dataset in one report, read-only.

Public datasets ship defects: orphan files no episode references, videos short of the frames their
episodes need, zero-byte videos, row counts that do not add up. `reshard` refuses such a source at its
first defect; `doctor` runs every check to the end and lists them all, each naming the file, the episode
and the field. The checks are the ones `reshard` and `verify` make (`reshard.source.checks`), collected instead
of raised, plus what only a whole-dataset view can see (orphans):

1. `metadata`: `meta/info.json`, `meta/episodes/` and the tasks load (a failure ends the report), and no
   feature name, camera key or task string holds a control character (`cache.printable`: every command
   prints such a name escaped, and `reshard` copies it as it is, as lerobot reads it; a tool that prints
   it raw would let it retitle a terminal or forge a line);
2. `episodes`: episode ranges tile `[0, total_frames)` in order, and video spans match lengths;
3. `files`: every file an episode points at exists;
4. `orphans`: no parquet or video file under `data/` or `videos/` that no episode references (where the
   store can list);
5. `rows`: each data file's rows are exactly its episodes' (index, episode_index, frame_index), with
   finite, increasing timestamps at `frame_index / fps` and valid task indices, and its row count adds up;
   it has a column for every feature `meta/info.json` declares (`reshard.source.checks.absent_feature`);
6. `videos`: each video file is non-empty and readable, its frames are the size its camera's `shape`
   declares, its header's duration holds every episode's time range, and its frames are all there: a file cut short (its index first, so its header still
   promises every frame) makes exactly the episodes whose frames are missing defective
   (`reshard.video.extent`; `--decode`: every frame decoded, up to the first damaged packet, and counted
   per episode instead of trusting the header).

An lrs/1 dataset (one with `meta/lrs/layout.json`) gets one more check, `index`: the index still describes
the dataset (`reader.format.fresh`: the metadata files' sha256, every local file's size; and here, since
`rows` reads every data file anyway, each data file's sha256). A tool that edits the dataset and copies
`meta/lrs/` along unchanged (`lerobot-edit-dataset`) leaves a "stale lrs index", a defect naming the command
that rebuilds it; the reader reads such a dataset as plain v3. A data or video file missing or of another size under a `meta/`
that is exactly what the index lists is damage, not an edit: a defect naming the file, which the reader
refuses.

When `meta/episodes` cannot be read, the header counts what `meta/info.json` declares.

What lerobot reads although it is off is a warning, not a defect: data pointers in `meta/episodes` that
name another file than the one holding the episode's rows (lerobot 0.4.x's converter; the rows are read
where they are, and `reshard` writes true pointers), and optional `meta/episodes` columns missing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from cache.errors import LrsError
from cache.printable import has_control, printable_lines
from cache.progress import progress_bar
from cache.redaction import redact
from cache.remote import Remote, resolve
from reader.errors import DatasetError, LayoutError, NotADataset
from reader.format.catalog import check_fresh
from reader.format.fresh import Stale
from reader.format.index import FILES_INDEX, LAYOUT_JSON
from reader.format.jsonfile import cat_json, parse_json
from reader.format.layout import read_files_index
from reader.format.parquet import parquet_limits
from reader.format.v3 import INFO_PATH, TASKS_PATH
from reshard.source.checks import frame_size_defects, iter_row_defects, iter_video_defects
from reshard.source.model import (
    V3Source,
    check_pointers,
    escaping_links,
    iter_missing_files,
    listed_files,
    open_source,
)
from reshard.video.extent import decoded_frame_times, frames_in_range


@dataclass(frozen=True)
class Defect:
    """One defect: the check that found it, where (file, episode, field), and what is wrong."""

    check: str
    problem: str
    file: str | None = None
    episode: int | None = None
    field: str | None = None

    @classmethod
    def of(cls, check: str, error: DatasetError) -> Defect:
        problem = getattr(error, "problem", None) or str(error)
        return cls(check, problem, error.file, error.episode, error.field)

    def describe(self) -> str:
        where = [w for w in (self.file, None if self.episode is None else f"episode {self.episode}") if w]
        if self.field:
            where.append(f"field {self.field!r}")
        return (
            f"[{self.check}] {', '.join(where)}: {self.problem}"
            if where
            else f"[{self.check}] {self.problem}"
        )


@dataclass
class Report:
    """What `doctor` found: the checks it ran (and skipped, with why), every defect, and what is off but
    read as lerobot reads it (warnings, which leave the dataset clean)."""

    url: str
    episodes: int = 0
    frames: int = 0
    checks: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    defects: list[Defect] = field(default_factory=list)
    decoded: bool = False
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.url = redact(self.url)  # printed and written as JSON: no token or password in it

    @property
    def clean(self) -> bool:
        return not self.defects

    @property
    def defective_episodes(self) -> list[int]:
        return sorted({d.episode for d in self.defects if d.episode is not None})

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clean"] = self.clean
        out["defective_episodes"] = self.defective_episodes
        return out

    def render(self) -> str:
        head = (
            f"doctor: {self.url}: {self.episodes} episodes, {self.frames} frames; checks: "
            f"{', '.join(self.checks)}{' (decoded)' if self.decoded else ''}"
        )
        lines = [head]
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        lines += [f"  warning: {warning}" for warning in self.warnings]
        lines += [f"  {d.describe()}" for d in self.defects]
        if self.clean:
            lines.append("no defect found.")
        else:
            episodes = self.defective_episodes
            lines.append(
                f"{len(self.defects)} defect{'s' if len(self.defects) != 1 else ''} found"
                + (f", in {len(episodes)} episode{'s' if len(episodes) != 1 else ''}" if episodes else "")
                + "."
            )
        return printable_lines(lines)  # a name from the dataset, quoted in a defect, stays on its line


def doctor(
    url: str,
    *,
    decode: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> Report:
    """Check every part of the dataset at `url` (any v3 source, local or remote); change nothing.

    Raises:
        NotADataset: there is no dataset at `url` (no `meta/info.json`): nothing to report on.
    """
    report = Report(url)
    try:
        source = open_source(url, storage_options=storage_options, check_files=False, check_links=False)
    except NotADataset:
        raise  # nothing to examine: bad input (exit 3), not a defect of a dataset (exit 1)
    except DatasetError as exc:
        report.checks.append("metadata")
        report.defects.append(Defect.of("metadata", exc))
        report.episodes, report.frames = declared_totals(url, storage_options)
        _check_index(report, url, storage_options)
        return report
    report.checks.append("metadata")
    report.defects += [Defect.of("metadata", e) for e in name_defects(source)]
    report = examine(source, report, decode=decode, progress=progress)
    _check_index(report, source.remote, storage_options)
    return report


def name_defects(source: V3Source) -> list[DatasetError]:
    """A defect for each feature name, camera key and task string of `source` that holds a control
    character (`cache.printable.has_control`), quoted as `repr` quotes it."""
    defects = []
    info = source.remote.display(INFO_PATH)
    for name, feature in source.info.features.items():
        if has_control(name):
            what = "camera key" if feature.get("dtype") in ("video", "image") else "feature name"
            defects.append(_control_defect(what, name, file=info, field=f"features/{name}"))
    tasks = source.remote.display(TASKS_PATH)
    for index, task in enumerate(source.tasks):
        if isinstance(task, str) and has_control(task):
            defects.append(_control_defect(f"task {index}", task, file=tasks, field="task"))
    return defects


def _control_defect(what: str, name: str, *, file: str, field: str) -> DatasetError:
    return DatasetError(
        f"Invalid {what} ({name!r:.200}): it holds a control character. Expected printable text (lrs prints "
        "it escaped; a tool that prints it raw lets it move the cursor, retitle the terminal or forge a line).",
        file=file,
        field=field,
    )


def _check_index(report: Report, url: str | Remote, storage_options: dict[str, Any] | None) -> None:
    """The `index` check, for an lrs/1 dataset (one with `meta/lrs/layout.json`)."""
    try:
        remote = url if isinstance(url, Remote) else resolve(url, storage_options=storage_options)
        if not remote.exists(LAYOUT_JSON):
            return
    except (LrsError, OSError, ValueError):
        return
    report.checks.append("index")
    report.defects += [Defect.of("index", e) for e in stale_index(remote)]


def declared_totals(url: str, storage_options: dict[str, Any] | None = None) -> tuple[int, int]:
    """(total_episodes, total_frames) as `meta/info.json` declares them, (0, 0) where it cannot say."""
    try:
        remote = resolve(url, storage_options=storage_options)
        raw = parse_json(cat_json(remote, INFO_PATH), file=remote.display(INFO_PATH))
    except (LrsError, OSError, ValueError):
        return 0, 0
    if not isinstance(raw, dict):
        return 0, 0
    episodes, frames = (raw.get(name) for name in ("total_episodes", "total_frames"))
    return _count(episodes), _count(frames)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def stale_index(remote: Remote) -> list[DatasetError]:
    """The stale lrs index defect of an lrs/1 dataset, if any: `reader.format.fresh`'s cheap comparison,
    then each data file's sha256 against `meta/lrs/files.parquet` (a same-size edit). A broken index
    (unreadable `files.parquet`) is `lrs verify`'s to report."""
    try:
        files = read_files_index(remote, remote.bounded(parquet_limits(FILES_INDEX)).cat)
    except (LayoutError, FileNotFoundError):
        return []
    stale = check_fresh(remote, files)
    for rel in [] if stale is not None else sorted(f for f in files if files[f].kind == "data"):
        try:
            digest = hashlib.sha256(remote.cat(rel)).hexdigest()
        except FileNotFoundError:
            stale = Stale(rel, "is missing, which meta/lrs/files.parquet lists")
            break
        if digest != files[rel].sha256:
            stale = Stale(rel, "has another sha256 than meta/lrs/files.parquet lists")
            break
    if stale is None:
        return []
    return [DatasetError(stale.describe(remote), file=remote.display(LAYOUT_JSON))]


def examine(
    source: V3Source, report: Report | None = None, *, decode: bool = False, progress: bool = False
) -> Report:
    """Run every check after `metadata` on an opened source, adding to `report` (a new one if None)."""
    report = report or Report(source.url, checks=["metadata"])
    report.episodes, report.frames = len(source.episodes), sum(e.length for e in source.episodes)
    report.warnings += source.warnings
    report.checks.append("episodes")
    try:
        check_pointers(source)
    except DatasetError as exc:
        report.defects.append(Defect.of("episodes", exc))
    listed = listed_files(source)
    report.checks.append("files")
    report.defects += [Defect.of("files", e) for e in escaping_links(source.remote)]
    report.defects += [Defect.of("files", e) for e in iter_missing_files(source, listed)]
    if listed is None:
        report.skipped["orphans"] = "the store cannot list directories"
    else:
        report.checks.append("orphans")
        report.defects += list(_orphans(source, listed))
    report.checks.append("rows")
    data_files = [f for f in source.data_files() if listed is None or f in listed]
    with progress_bar(total=len(data_files), unit="file", desc="doctor rows", disable=not progress) as bar:
        for rel in data_files:
            report.defects += [Defect.of("rows", e) for e in _rows(source, rel)]
            bar.update(1)
    report.checks.append("videos")
    sizes = {f: _size(source, f) for f in source.video_files() if listed is None or f in listed}
    report.defects += [Defect.of("videos", e) for e in _empty(source, sizes)]
    readable = [f for f, size in sizes.items() if size]
    if decode:
        report.decoded = True
        report.defects += [Defect.of("videos", e) for e in _decoded(source, readable, progress)]
    else:
        defects = iter_video_defects(source, readable, per_episode=True)
        report.defects += [Defect.of("videos", e) for e in defects]
    return report


def _rows(source: V3Source, rel: str) -> Iterator[DatasetError]:
    """`iter_row_defects`, with a file it cannot read as a defect of each of its episodes."""
    try:
        yield from iter_row_defects(source, rel)
        return
    except DatasetError as exc:
        problem = exc.problem
    except OSError as exc:
        problem = f"not a readable parquet file ({exc})"
    for episode in source.episodes_by_data_file().get(rel, []):
        yield DatasetError(problem, file=source.remote.display(rel), episode=episode.episode_index)


def _orphans(source: V3Source, listed: set[str]) -> Iterator[Defect]:
    referenced = set(source.data_files()) | set(source.video_files())
    for rel in sorted(listed - referenced):
        if rel.endswith((".parquet", ".mp4")):
            yield Defect(
                "orphans",
                "no episode references this file (meta/episodes points elsewhere)",
                file=source.remote.display(rel),
            )


def _size(source: V3Source, rel: str) -> int:
    try:
        return source.remote.size(rel)
    except (OSError, DatasetError):
        return 0


def _empty(source: V3Source, sizes: Mapping[str, int]) -> Iterator[DatasetError]:
    """Each episode of a video file of 0 bytes (`sizes`: the files present, by path)."""
    for key in source.video_keys:
        for rel, episodes in source.episodes_by_video_file(key).items():
            if sizes.get(rel, 1) == 0:
                for episode in episodes:
                    yield DatasetError(
                        "empty video file (0 bytes)",
                        file=source.remote.display(rel),
                        episode=episode.episode_index,
                        field=f"videos/{key}",
                    )


def _decoded(source: V3Source, videos: list[str], progress: bool) -> Iterator[DatasetError]:
    """Decode every frame of each video and count, per episode, the frames inside its time range (a file
    cut short keeps the frames decoded before the cut)."""
    import av

    fps = float(source.info.fps)
    with progress_bar(total=len(videos), unit="file", desc="doctor decode", disable=not progress) as bar:
        for key in source.video_keys:
            for rel, episodes in source.episodes_by_video_file(key).items():
                if rel not in videos:
                    continue
                where = source.remote.display(rel)
                try:
                    with source.remote.open(rel) as handle, av.open(handle) as container:
                        if not container.streams.video:
                            raise ValueError("no video stream")
                        context = container.streams.video[0].codec_context
                        size = (context.width or 0, context.height or 0)
                        times = decoded_frame_times(container)
                except (av.error.FFmpegError, OSError, ValueError) as exc:
                    for episode in episodes:
                        yield DatasetError(
                            f"not a decodable video ({exc})",
                            file=where,
                            episode=episode.episode_index,
                            field=f"videos/{key}",
                        )
                    bar.update(1)
                    continue
                yield from frame_size_defects(source, key, rel, episodes, *size)
                for episode in episodes:
                    seg = episode.video(key)
                    found = frames_in_range(times, seg.from_timestamp, seg.to_timestamp, fps)
                    if found < episode.length:
                        yield DatasetError(
                            f"Invalid video: {found} frames decoded in [{seg.from_timestamp:.3f}, "
                            f"{seg.to_timestamp:.3f}) s. Expected {episode.length}, the episode's length.",
                            file=where,
                            episode=episode.episode_index,
                            field=f"videos/{key}",
                        )
                bar.update(1)
