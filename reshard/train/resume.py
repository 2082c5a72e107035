"""Where `lrs train` resumes the data: the stream state kept beside lerobot's checkpoint, or its step.

lerobot's checkpoint holds its step (`training_state/training_step.json`), the world size and the batch
size. `lrs train` adds `training_state/lrs_stream.json`: the step it was saved at and the stream's state
after that step's batch, which resumes at the exact next sample on the same topology and through the
elastic path on another (world size, batch size or workers changed). A checkpoint without it (one
whose file was removed) resumes from the step alone: with every epoch the same number of batches on one
topology, step k is batch k mod B of epoch k div B. Pure: no I/O beyond the small JSON file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reshard.train.options import TrainConfigError

STATE_FILE = "lrs_stream.json"
# Where lerobot keeps a run's newest checkpoint, and the config that `--config_path` resumes it from.
LAST_CONFIG = Path("checkpoints/last/pretrained_model/train_config.json")


def interrupted_hint(output_dir: Path | None) -> str:
    """What resumes a `lrs train` run that was interrupted, writing into `output_dir` (None: stopped before
    lerobot chose it). lerobot refuses to rerun into an existing output directory without `--resume`."""
    if output_dir is None:
        return "nothing was trained yet: rerun the same command"
    config = output_dir / LAST_CONFIG
    if config.is_file():
        return f"resume from the last checkpoint with `lrs train --resume=true --config_path={config}` (and the same lrs options)"
    return f"no checkpoint was saved yet: remove {output_dir} (or give another --output_dir) and rerun"


@dataclass(frozen=True)
class TrainTopology:
    """What a run's batch count means: batch size and DataLoader workers per rank, and ranks."""

    batch_size: int
    num_workers: int
    world_size: int


@dataclass(frozen=True)
class SavedStream:
    """`lrs_stream.json`: the lerobot step a stream state was saved at, and that state."""

    step: int
    state: Mapping[str, Any]

    def to_json(self) -> str:
        return json.dumps({"step": self.step, "stream": dict(self.state)}, indent=1, sort_keys=True)

    @classmethod
    def parse(cls, text: str, *, file: str) -> SavedStream:
        """Raises:
        TrainConfigError: not JSON, or not `{"step": int >= 0, "stream": {...}}` (naming the file)."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrainConfigError(f"Invalid stream state in {file} ({exc}). Expected JSON.") from None
        step = raw.get("step") if isinstance(raw, dict) else None
        stream = raw.get("stream") if isinstance(raw, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or step < 0 or not isinstance(stream, dict):
            raise TrainConfigError(
                f"Invalid stream state in {file} ({str(raw)[:80]}). "
                'Expected {"step": <int >= 0>, "stream": {...}} as lrs train writes it.'
            )
        return cls(step=step, state=stream)


def state_at_step(step: int, batches_per_epoch: int, topology: TrainTopology) -> dict[str, Any]:
    """The trainer's state after `step` batches from the start of training, every epoch having
    `batches_per_epoch` batches on `topology` (`EpisodeStream.load_state_dict` takes it).

    Raises:
        ValueError: a negative step, or epochs of no batch.
    """
    if step < 0 or batches_per_epoch < 1:
        raise ValueError(
            f"Invalid step ({step}) or batches per epoch ({batches_per_epoch}). Expected >= 0 and >= 1."
        )
    epoch, batches = divmod(step, batches_per_epoch)
    return {
        "epoch": epoch,
        "batches_consumed": batches,
        "batch_size": topology.batch_size,
        "num_workers": topology.num_workers,
        "world_size": topology.world_size,
    }


def resume_state(
    step: int,
    saved: SavedStream | None,
    *,
    saved_topology: TrainTopology,
    topology: TrainTopology,
    batches_per_epoch: int,
    file: str,
) -> dict[str, Any] | None:
    """The stream state to load when lerobot resumes at `step` (None: step 0, start from the beginning).

    `saved` wins when present (it was written after that step's batch, and carries an elastic resume's
    history); else the step is mapped back on the checkpoint's topology, which must then be this run's.

    Raises:
        TrainConfigError: `saved` is for another step (a file copied from another checkpoint), or there is
            none and the topology changed (the step alone cannot say which samples were consumed then).
    """
    if saved is not None:
        if saved.step != step:
            raise TrainConfigError(
                f"Invalid stream state in {file} (step {saved.step}). Expected the checkpoint's step {step}."
            )
        return dict(saved.state)
    if step == 0:
        return None
    if saved_topology != topology:
        raise TrainConfigError(
            f"Invalid resume without {file} ({saved_topology} -> {topology}). Expected the checkpoint's "
            f"topology, or its {STATE_FILE}: a step alone resumes only where every epoch has as many batches."
        )
    return state_at_step(step, batches_per_epoch, topology)


def read_saved(training_state_dir: Path) -> SavedStream | None:
    """The `lrs_stream.json` of a checkpoint's `training_state/` directory, or None if it has none."""
    path = training_state_dir / STATE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return SavedStream.parse(text, file=str(path))


def write_saved(training_state_dir: Path, saved: SavedStream) -> Path:
    """Write `lrs_stream.json` atomically (a temp file beside it, then a rename)."""
    path = training_state_dir / STATE_FILE
    temp = path.with_name(f".{STATE_FILE}.tmp")
    temp.write_text(saved.to_json())
    temp.replace(path)
    return path
