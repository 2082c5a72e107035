"""The reshard plan: which episodes go to which output file, a pure function of the source's metadata.

The plan is computed from `meta/info.json`, the episode records and the byte size of each source data
file, nothing else, so every process of a job (local workers, SLURM array tasks, the finalize step)
computes the same plan and can agree on who writes what without talking to each other.

- Data: episodes, in order, are packed into output files of at most `data_file_mb` (estimated from the
  source's bytes per row) and at most `episodes_per_file` episodes, at least one episode per file. The
  episode cap bounds the memory of whoever writes or parses a file's footer (pyarrow holds about 12 KB
  per row group while it writes one, 6 KB while it parses one): without it, a dataset of tiny episodes
  fits one file of as many row groups as episodes. Output file number n is `chunk n // chunks_size`,
  `file n % chunks_size` of the v3 `data_path` template.
- Videos: one output file per (episode, camera), file number = episode index. They are grouped into one
  task per source video file, so a remote source MP4 is fetched once for all the episodes it holds.

Tasks are sorted (data first, by output path; then videos by camera and source file) and split
`tasks[index::count]` into parts, datatrove style.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reader.format.v3 import EpisodeInfo, Info

DEFAULT_CHUNKS_SIZE = 1000
# Row groups (episodes) of an output data file: about 12 MB of footer while it is written.
DEFAULT_EPISODES_PER_FILE = 1000
_MB = 1024 * 1024


@dataclass(frozen=True)
class DataTask:
    """One output data file and the consecutive episodes it holds.

    Attributes:
        path: the output path (dataset-relative).
        chunk_index: its v3 chunk index.
        file_index: its v3 file index.
        episodes: the episode indices, consecutive and increasing.
        sources: the source data files to read, in episode order, each once.
        est_bytes: the estimated size, from the source's bytes per row.
    """

    path: str
    chunk_index: int
    file_index: int
    episodes: tuple[int, ...]
    sources: tuple[str, ...]
    est_bytes: int

    def __repr__(self) -> str:
        return f"DataTask({self.path}, episodes {self.episodes[0]}..{self.episodes[-1]})"

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.path,)

    @property
    def size(self) -> int:
        """Episodes of work, for progress."""
        return len(self.episodes)


@dataclass(frozen=True)
class VideoOutput:
    """One episode of one camera, cut out of a source video file into a file of its own.

    Attributes:
        episode: the episode index.
        key: the camera key.
        path: the output path (dataset-relative).
        chunk_index: its v3 chunk index.
        file_index: its v3 file index.
        from_timestamp: where the episode starts inside the source file, in seconds.
        length: the episode's number of frames.
    """

    episode: int
    key: str
    path: str
    chunk_index: int
    file_index: int
    from_timestamp: float
    length: int


@dataclass(frozen=True)
class VideoTask:
    """The episodes of one camera held by one source video file.

    Attributes:
        key: the camera key.
        source: the source video file (dataset-relative).
        videos: one output per episode, in episode order.
    """

    key: str
    source: str
    videos: tuple[VideoOutput, ...]

    def __repr__(self) -> str:
        return f"VideoTask({self.source}, episodes={len(self.videos)})"

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(v.path for v in self.videos)

    @property
    def size(self) -> int:
        """Episodes of work, for progress."""
        return len(self.videos)


Task = DataTask | VideoTask


@dataclass(frozen=True)
class ReshardPlan:
    """Every output file of a reshard and the tasks that write them.

    Attributes:
        data: the data tasks, by output path.
        videos: the video tasks, by camera then source file.
    """

    data: tuple[DataTask, ...]
    videos: tuple[VideoTask, ...]

    def __repr__(self) -> str:
        return f"ReshardPlan(data files={len(self.data)}, video tasks={len(self.videos)}, outputs={len(self.outputs())})"

    def tasks(self) -> list[Task]:
        """Every task, in the plan's fixed order."""
        return [*self.data, *self.videos]

    def part(self, index: int, count: int) -> list[Task]:
        """The tasks of part `index` of `count` (`tasks[index::count]`).

        Raises:
            ValueError: not `0 <= index < count`.
        """
        if not 0 <= index < count:
            raise ValueError(f"Invalid part ({index}/{count}). Expected 0 <= index < count.")
        return self.tasks()[index::count]

    def outputs(self) -> list[str]:
        """Every output data and video path, in task order."""
        return [path for task in self.tasks() for path in task.outputs]

    def data_task_of(self) -> dict[int, DataTask]:
        """The data task of each episode."""
        return {episode: task for task in self.data for episode in task.episodes}

    def video_outputs(self) -> dict[tuple[int, str], VideoOutput]:
        """The video output of each (episode, camera)."""
        return {(v.episode, v.key): v for task in self.videos for v in task.videos}


def chunk_file(number: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk_index, file_index) of the `number`-th file of a kind."""
    return number // chunks_size, number % chunks_size


def make_plan(
    info: Info,
    episodes: Sequence[EpisodeInfo],
    source_bytes: Mapping[str, int],
    *,
    data_file_mb: float,
    episodes_per_file: int | None = DEFAULT_EPISODES_PER_FILE,
) -> ReshardPlan:
    """Plan a reshard from metadata alone.

    Args:
        info: the source's `meta/info.json`.
        episodes: the source's episodes, by episode index.
        source_bytes: the byte size of every source data file.
        data_file_mb: the size bound of an output data file, in MiB.
        episodes_per_file: the most episodes (row groups) of an output data file; None: no cap (the
            plan of an lrs before the cap, for the jobs it began).

    Raises:
        ValueError: `data_file_mb` is not positive, `episodes_per_file` is below 1, or a source data file
            has no size.
    """
    if not data_file_mb > 0:
        raise ValueError(f"Invalid data_file_mb ({data_file_mb}). Expected > 0.")
    if episodes_per_file is not None and episodes_per_file < 1:
        raise ValueError(f"Invalid episodes_per_file ({episodes_per_file}). Expected >= 1.")
    chunks_size = int(info.raw.get("chunks_size") or DEFAULT_CHUNKS_SIZE)
    cap = episodes_per_file or len(episodes)
    return ReshardPlan(
        data=_plan_data(info, episodes, source_bytes, (int(data_file_mb * _MB), cap), chunks_size),
        videos=_plan_videos(info, episodes, chunks_size),
    )


def _episode_bytes(info: Info, episodes: Sequence[EpisodeInfo], source_bytes: Mapping[str, int]) -> list[int]:
    """Each episode's estimated share of its source file: file bytes x episode rows / file rows."""
    rows: dict[str, int] = {}
    for episode in episodes:
        path = info.data_file(episode.data_chunk_index, episode.data_file_index)
        rows[path] = rows.get(path, 0) + episode.length
    estimates = []
    for episode in episodes:
        path = info.data_file(episode.data_chunk_index, episode.data_file_index)
        if path not in source_bytes:
            raise ValueError(f"Invalid source sizes (no size for {path!r}). Expected every data file's size.")
        estimates.append(source_bytes[path] * episode.length // max(1, rows[path]))
    return estimates


def _plan_data(
    info: Info,
    episodes: Sequence[EpisodeInfo],
    source_bytes: Mapping[str, int],
    limits: tuple[int, int],
    chunks_size: int,
) -> tuple[DataTask, ...]:
    """The data tasks, files bounded by `limits`: (bytes, episodes)."""
    estimates = _episode_bytes(info, episodes, source_bytes)
    max_bytes, max_episodes = limits
    groups: list[list[int]] = []
    size = 0
    for episode, estimate in zip(episodes, estimates, strict=True):
        # A file is closed before it would outgrow a bound, but never left empty.
        if not groups or len(groups[-1]) >= max_episodes or size + estimate > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(episode.episode_index)
        size += estimate
    tasks = []
    for number, group in enumerate(groups):
        chunk, file = chunk_file(number, chunks_size)
        sources = [info.data_file(episodes[e].data_chunk_index, episodes[e].data_file_index) for e in group]
        tasks.append(
            DataTask(
                path=info.data_file(chunk, file),
                chunk_index=chunk,
                file_index=file,
                episodes=tuple(group),
                sources=tuple(dict.fromkeys(sources)),
                est_bytes=sum(estimates[e] for e in group),
            )
        )
    return tuple(tasks)


def _plan_videos(info: Info, episodes: Sequence[EpisodeInfo], chunks_size: int) -> tuple[VideoTask, ...]:
    tasks = []
    for key in info.video_keys:
        by_source: dict[str, list[VideoOutput]] = {}
        for episode in episodes:
            segment = episode.video(key)
            source = info.video_file(key, segment.chunk_index, segment.file_index)
            chunk, file = chunk_file(episode.episode_index, chunks_size)
            by_source.setdefault(source, []).append(
                VideoOutput(
                    episode=episode.episode_index,
                    key=key,
                    path=info.video_file(key, chunk, file),
                    chunk_index=chunk,
                    file_index=file,
                    from_timestamp=segment.from_timestamp,
                    length=episode.length,
                )
            )
        tasks += [VideoTask(key, source, tuple(videos)) for source, videos in sorted(by_source.items())]
    return tuple(tasks)
