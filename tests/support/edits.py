"""Edits of a resharded (lrs/1) dataset the way lerobot's own tools make them (`lerobot-edit-dataset`,
`delete_episodes`), which copy `meta/lrs/` along unchanged: made with pyarrow and PyAV, without lerobot.

Each takes the dataset root and edits it in place; `without_index` gives the plain v3 dataset the edited
one is once its stale index is gone (what lerobot reads).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tests.reshard.defects import rewrite_video

EPISODES = "meta/episodes/chunk-000/file-000.parquet"
TASKS = "meta/tasks.parquet"
DATA = "data/chunk-000/file-000.parquet"
CAM0 = "observation.images.cam0"


def without_index(root: Path, out: Path) -> Path:
    """A copy of `root` without `meta/lrs/`: the plain v3 dataset lerobot sees."""
    shutil.copytree(root, out)
    shutil.rmtree(out / "meta/lrs")
    return out


def modify_task(root: Path, episode: int = 0, task: str = "new task zero") -> None:
    """`modify_tasks` with `{episode: task}`: a new task appended to `meta/tasks.parquet`, the episode's
    rows given its index (the data file rewritten whole, as pandas writes it: one row group, another
    size) and its `tasks` in `meta/episodes`."""
    tasks = pq.read_table(root / TASKS)
    new_index = tasks.num_rows
    added = pa.table({"task_index": [new_index], "task": [task]}, schema=tasks.schema)
    pq.write_table(pa.concat_tables([tasks, added]), root / TASKS)
    data = pq.read_table(root / DATA)
    mine = pc.equal(data.column("episode_index"), episode)
    task_index = pc.if_else(mine, new_index, data.column("task_index"))
    data = data.set_column(data.schema.get_field_index("task_index"), "task_index", task_index)
    pq.write_table(data, root / DATA)
    episodes = pq.read_table(root / EPISODES)
    column = episodes.column("tasks").to_pylist()
    column[episode] = [task]
    position = episodes.schema.get_field_index("tasks")
    episodes = episodes.set_column(position, "tasks", pa.array(column, episodes.schema.field("tasks").type))
    pq.write_table(episodes, root / EPISODES)


def reencode_video(root: Path, rel: str) -> None:
    """`reencode_videos`: one video file re-encoded (H.264, same frames and timing), another size, and
    its camera's video info in `meta/info.json` refreshed (lerobot's `reencode_dataset` writes it)."""
    path = root / rel
    before = path.stat().st_size
    rewrite_video(path, options={"crf": "10"})
    assert path.stat().st_size != before
    info_path = root / "meta/info.json"
    info = json.loads(info_path.read_text())
    camera = info["features"][rel.split("/")[1]]
    video_info = camera.setdefault("info", {})
    assert video_info.get("video.codec") != "h264"
    video_info["video.codec"] = "h264"
    info_path.write_text(json.dumps(info, indent=4))


def same_size_task_edit(root: Path) -> None:
    """Every task string's "pick" made "lift", in `meta/tasks.parquet` and `meta/episodes`, in their
    bytes: no file changes size."""
    for rel in (TASKS, EPISODES):
        path = root / rel
        data = path.read_bytes()
        assert b"pick" in data
        path.write_bytes(data.replace(b"pick", b"lift"))
    assert all(
        t.startswith("task") and "lift" in t for t in pq.read_table(root / TASKS).column("task").to_pylist()
    )


def same_size_value_edit(
    root: Path, episode: int = 0, column: str = "observation.state"
) -> tuple[float, float]:
    """One `column` value of the episode changed in the data file's bytes (its lowest mantissa bit): the
    file keeps its size. The value is the first of the episode stored verbatim once (snappy leaves
    incompressible values as literals). Returns (old, new)."""
    path = root / DATA
    table = pq.read_table(path)
    data = path.read_bytes()
    rows = pc.indices_nonzero(pc.equal(table.column("episode_index"), episode)).to_pylist()
    for row in rows:
        for position, old in enumerate(table.column(column)[row].as_py()):
            packed = struct.pack("<f", old)
            if data.count(packed) != 1:
                continue
            changed = bytes([packed[0] ^ 1, *packed[1:]])
            path.write_bytes(data.replace(packed, changed))
            new = pq.read_table(path).column(column)[row].as_py()[position]
            assert new == struct.unpack("<f", changed)[0] != old
            return old, new
    raise AssertionError(f"no value of episode {episode} is stored verbatim once in {path}")


def delete_last_episode(root: Path) -> None:
    """`delete_episodes` of the last episode, as far as the metadata goes: its `meta/episodes` row gone,
    `info.json`'s totals and split counting it no more (its rows and video are left, unreferenced)."""
    episodes = pq.read_table(root / EPISODES)
    last = episodes.slice(episodes.num_rows - 1).to_pylist()[0]
    pq.write_table(episodes.slice(0, episodes.num_rows - 1), root / EPISODES)
    info = json.loads((root / "meta/info.json").read_text())
    info["total_episodes"] -= 1
    info["total_frames"] -= last["length"]
    info["splits"] = {"train": f"0:{info['total_episodes']}"}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
