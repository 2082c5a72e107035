"""A v3 dataset with one of each defect public datasets ship (for `lrs doctor`, `reshard --skip-defective`).

Made from the 8-episode sample (3 episodes per data file and per video file, 2 cameras):

- episodes 0, 1, 2: their cam1 video file is missing;
- episodes 3, 4, 5: their cam1 video file has zero bytes;
- episode 7: its cam0 video is short 5 frames, and its data file short its last row (so that file's
  row count no longer adds up either);
- an orphan parquet file and an orphan video that no episode references.

Episode 6 is the one without a defect.

Two other writers' quirks that are not defects, each made from a sample (`stale_pointers`,
`without_columns`): lerobot 0.4.x's converter's stale data pointers, and `meta/episodes` without its
optional columns.

`add_bomb` (an undeclared zstd column of zeros: a parquet decompression bomb) and `set_task` (a task
string of any size) mutate a copy in place, for the hostile-input tests and fault cases.

`make_truncated` is another copy: a video file cut short (its index first, so the file still opens and its
header still promises every frame), whose first episode is whole and the others are not.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from reader.format.parquet import replace_columns

CAM0, CAM1 = "observation.images.cam0", "observation.images.cam1"


def video(root: Path, cam: str, file: int) -> Path:
    return root / f"videos/{cam}/chunk-000/file-{file:03d}.mp4"


def rewrite_video(
    path: Path, *, drop: int = 0, size: tuple[int, int] | None = None, options: dict[str, str] | None = None
) -> None:
    """Rewrite a video as H.264 with the same timing: without its last `drop` frames, at another
    `size` (width, height), with encoder `options`."""
    width, height = size or (None, None)
    with av.open(str(path)) as src:
        stream = src.streams.video[0]
        frames = [f.to_ndarray(width=width, height=height, format="rgb24") for f in src.decode(stream)]
        rate = stream.average_rate
    out = path.with_suffix(".tmp.mp4")
    with av.open(str(out), "w") as dst:
        video = dst.add_stream("libx264", rate=rate, options=options or {})
        video.height, video.width = frames[0].shape[:2]
        video.pix_fmt = "yuv420p"
        for pixels in frames[: len(frames) - drop]:
            dst.mux(video.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        dst.mux(video.encode())
    out.replace(path)


def shorten(path: Path, drop: int) -> None:
    """Rewrite a video without its last `drop` frames (same timing, H.264)."""
    rewrite_video(path, drop=drop)


def resize(path: Path, width: int, height: int) -> None:
    """Rewrite a video with the same frames (count and timing) at another size (H.264)."""
    rewrite_video(path, size=(width, height))


def make_defective(sample_ds: Path, root: Path) -> Path:
    """A copy of the sample at `root` with the defects of the module docstring."""
    shutil.copytree(sample_ds, root)  # 8 episodes: 3 per data file and per video file, 2 cameras
    video(root, CAM1, 1).write_bytes(b"")  # episodes 3, 4, 5 of cam1: a zero-byte file
    shorten(video(root, CAM0, 2), drop=5)  # episode 7 of cam0 (the file's last) short 5 frames
    shutil.copy(root / "data/chunk-000/file-000.parquet", root / "data/chunk-000/file-009.parquet")
    shutil.copy(video(root, CAM0, 0), video(root, CAM0, 9))  # orphans
    data = root / "data/chunk-000/file-002.parquet"  # episodes 6, 7: drop episode 7's last row
    table = pq.read_table(data)
    pq.write_table(table.slice(0, table.num_rows - 1), data)
    video(root, CAM1, 0).unlink()  # episodes 0, 1, 2 of cam1: missing
    return root


def _rewrite_episodes(root: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    for path in sorted((root / "meta/episodes").rglob("*.parquet")):
        pq.write_table(change(pq.read_table(path)), path)


def stale_pointers(sample: Path, root: Path) -> Path:
    """A copy of `sample` at `root` with `make_stale` data pointers."""
    shutil.copytree(sample, root)
    make_stale(root)
    return root


def make_stale(root: Path) -> None:
    """Make the `meta/episodes` data pointers of the dataset at `root` stale as lerobot 0.4.x's v2.1 ->
    v3.0 converter writes them: the first episode of each data file after the first names the file
    before (`convert_data` records the file it was filling before the episode made it overflow)."""
    names = ("data/chunk_index", "data/file_index")
    tables = {p: pq.read_table(p) for p in sorted((root / "meta/episodes").rglob("*.parquet"))}
    every = pa.concat_tables(tables.values()).sort_by("episode_index")
    true = list(zip(*(every.column(n).to_pylist() for n in names), strict=True))
    stale = {0: true[0]}
    for episode in range(1, len(true)):
        stale[episode] = true[episode - 1] if true[episode] != true[episode - 1] else true[episode]
    for path, table in tables.items():
        episodes = table.column("episode_index").to_pylist()
        columns = {n: [stale[e][i] for e in episodes] for i, n in enumerate(names)}
        pq.write_table(replace_columns(table, columns), path)


def without_columns(sample: Path, root: Path, columns: Sequence[str]) -> Path:
    """A copy of `sample` whose `meta/episodes` lacks `columns`."""
    shutil.copytree(sample, root)
    _rewrite_episodes(root, lambda table: table.drop_columns(list(columns)))
    return root


def faststart(path: Path) -> None:
    """Remux a video with its index (`moov`) before the frames, as lrs's writer and `-movflags faststart` do."""
    out = path.with_suffix(".tmp.mp4")
    with av.open(str(path)) as src, av.open(str(out), "w", options={"movflags": "faststart"}) as dst:
        stream = dst.add_stream_from_template(src.streams.video[0], opaque=True)
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is not None:
                packet.stream = stream
                dst.mux(packet)
    out.replace(path)


def cut_inside(path: Path, time_s: float) -> None:
    """Cut a video file (index first) in the middle of the packet of the frame at `time_s`."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        base = stream.time_base
        assert base is not None
        timed = [(p, p.pts) for p in container.demux(stream) if p.pts is not None and p.pos is not None]
        times = np.array([float(pts * base) for _, pts in timed])
        packet = timed[int(np.argmin(np.abs(times - time_s)))][0]
        assert packet.pos is not None
        cut = packet.pos + packet.size // 2
    with path.open("r+b") as handle:
        handle.truncate(cut)


def cut_inside_episode(root: Path, episode: int, cam: str = CAM0) -> None:
    """Rewrite `cam`'s video file of `episode` with its index first, then cut it inside that episode's
    frames: its earlier episodes stay whole, it and the later ones of the file lose frames."""
    table = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    row = table.filter(pc.equal(table.column("episode_index"), episode)).to_pylist()[0]
    path = (
        root
        / f"videos/{cam}/chunk-{row[f'videos/{cam}/chunk_index']:03d}/file-{row[f'videos/{cam}/file_index']:03d}.mp4"
    )
    faststart(path)
    cut_inside(path, (row[f"videos/{cam}/from_timestamp"] + row[f"videos/{cam}/to_timestamp"]) / 2)


def make_truncated(sample_ds: Path, root: Path) -> Path:
    """A copy of the sample whose cam0 file-000 (episodes 0, 1, 2) is cut in the middle of episode 1."""
    shutil.copytree(sample_ds, root)
    cut_inside_episode(root, 1)
    return root


def add_bomb(root: Path, row_bytes: int) -> None:
    """Every data file of `root` with an extra, undeclared zstd column of `row_bytes` zeros per row (a few
    KiB on disk), its row groups kept."""
    for path in sorted((root / "data").rglob("*.parquet")):
        source = pq.ParquetFile(path)
        groups = [source.read_row_group(g) for g in range(source.metadata.num_row_groups)]
        source.close()
        schema = groups[0].schema.append(pa.field("bomb", pa.binary()))
        with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=["index"]) as writer:
            for group in groups:
                bomb = pa.array([bytes(row_bytes)] * group.num_rows, pa.binary())
                writer.write_table(group.append_column("bomb", bomb))


def set_task(root: Path, task_index: int, text: str) -> None:
    """`meta/tasks.parquet` and every `meta/episodes` row of that task with `text` as the task string."""
    path = root / "meta/tasks.parquet"
    tasks = pq.read_table(path)
    old = tasks.column("task")[task_index].as_py()
    values = tasks.column("task").to_pylist()
    values[task_index] = text
    pq.write_table(tasks.set_column(1, tasks.schema.field(1), pa.array(values, pa.string())), path)
    for episodes_path in sorted((root / "meta/episodes").rglob("*.parquet")):
        table = pq.read_table(episodes_path)
        lists = [[text if t == old else t for t in row] for row in table.column("tasks").to_pylist()]
        position = table.schema.get_field_index("tasks")
        table = table.set_column(
            position, table.schema.field(position), pa.array(lists, pa.list_(pa.string()))
        )
        pq.write_table(table, episodes_path)
