"""What lerobot 0.6.1 writes besides the pixels: the data rows' columns and types, the Hugging Face
`datasets` schema in each data file, the `features` of `meta/info.json` and `meta/tasks.parquet`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from reader.decode.depth import Quantizer

if TYPE_CHECKING:
    from reshard.demo.sample_spec import SampleSpec

STATE_DIM = 6


def episode_table(episode: int, length: int, first_index: int, task_index: int, fps: int) -> pa.Table:
    """The data rows of one episode, with lerobot's column types."""
    t = np.arange(length, dtype=np.float64)
    base = np.arange(STATE_DIM, dtype=np.float64)
    state = np.sin(t[:, None] / 7.0 + base[None, :] + episode).astype(np.float32)
    action = np.cos(t[:, None] / 5.0 + base[None, :] * 0.5 + episode * 0.1).astype(np.float32)

    def vec(x: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1), pa.float32()), STATE_DIM)

    return pa.table(
        {
            "observation.state": vec(state),
            "action": vec(action),
            "timestamp": pa.array((t / fps).astype(np.float32), pa.float32()),
            "frame_index": pa.array(np.arange(length), pa.int64()),
            "episode_index": pa.array(np.full(length, episode), pa.int64()),
            "index": pa.array(np.arange(first_index, first_index + length), pa.int64()),
            "task_index": pa.array(np.full(length, task_index), pa.int64()),
        }
    )


def hf_metadata(image_keys: list[str] | None = None) -> dict[bytes, bytes]:
    """The `huggingface` schema metadata of a data file (with `image_keys` as image columns)."""
    vec = {"feature": {"dtype": "float32", "_type": "Value"}, "length": STATE_DIM, "_type": "List"}
    features = {
        "observation.state": vec,
        "action": vec,
        **{key: {"_type": "Image"} for key in image_keys or []},
        "timestamp": {"dtype": "float32", "_type": "Value"},
        **{
            k: {"dtype": "int64", "_type": "Value"}
            for k in ("frame_index", "episode_index", "index", "task_index")
        },
    }
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def info_features(spec: SampleSpec) -> dict[str, Any]:
    """The `features` of `meta/info.json` for the sample `spec`."""
    names = [f"joint{i}" for i in range(STATE_DIM)]
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [STATE_DIM], "names": names},
        "action": {"dtype": "float32", "shape": [STATE_DIM], "names": names},
    }
    for key in spec.camera_keys:
        features[key] = {
            "dtype": "video",
            "shape": [spec.height, spec.width, 3],
            "names": ["height", "width", "channels"],
            "info": video_info(
                spec.codec,
                spec.height,
                spec.width,
                spec.fps,
                gop=spec.gop,
                crf=spec.crf,
                pix_fmt=spec.pix_fmt,
                audio=spec.audio,
            ),
        }
    for key in spec.depth_keys:
        info = video_info(
            "hevc", spec.height, spec.width, spec.fps, gop=spec.gop, crf=spec.crf, pix_fmt="gray12le"
        )
        info.update(
            {
                "video.channels": 1,
                "video.extra_options": {"x265-params": "lossless=1"},
                **Quantizer().info(),
                "is_depth_map": True,
                "depth_unit": "mm",  # the unit of the stats
            }
        )
        features[key] = {
            "dtype": "video",
            "shape": [spec.height, spec.width, 1],
            "names": ["height", "width", "channels"],
            "info": info,
        }
    for key in spec.image_keys:
        features[key] = {
            "dtype": "image",
            "shape": [spec.height, spec.width, 3],
            "names": ["height", "width", "channels"],
        }
    for key, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        features[key] = {"dtype": dtype, "shape": [1], "names": None}
    return features


def video_info(
    codec: str,
    height: int,
    width: int,
    fps: float,
    *,
    gop: int | None,
    crf: int | None,
    pix_fmt: str = "yuv420p",
    audio: bool = False,
) -> dict[str, Any]:
    """The `info` block lerobot writes under a video feature."""
    info: dict[str, Any] = {
        "video.height": height,
        "video.width": width,
        "video.codec": codec,
        "video.pix_fmt": pix_fmt,
        "video.fps": fps,
        "video.channels": 3,
        "has_audio": audio,
        "is_depth_map": False,
    }
    if gop is not None:
        info["video.g"] = gop
    if crf is not None:
        info["video.crf"] = crf
    return info


def _pandas_tasks_metadata() -> bytes:
    return json.dumps(
        {
            "index_columns": ["task"],
            "column_indexes": [
                {
                    "name": None,
                    "field_name": None,
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": {"encoding": "UTF-8"},
                }
            ],
            "columns": [
                {
                    "name": "task_index",
                    "field_name": "task_index",
                    "pandas_type": "int64",
                    "numpy_type": "int64",
                    "metadata": None,
                },
                {
                    "name": "task",
                    "field_name": "task",
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": None,
                },
            ],
            "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": "2.3.3",
        }
    ).encode()


def tasks_table(tasks: list[str]) -> pa.Table:
    """`meta/tasks.parquet` as lerobot writes it (a pandas frame indexed by the task string)."""
    table = pa.table(
        {"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())}
    )
    return table.replace_schema_metadata({b"pandas": _pandas_tasks_metadata()})
