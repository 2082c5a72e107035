"""The in-place batch fill of `Consumer.batches` (`reader.runtime.pool`): lane threads copy each sample
straight into its row of the batch's buffers, and what each lane counted on the way."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from reader.batch.collate import collate, plain_cpu_tensor
from reader.decode.video import to_unit_float

# Elements above which torch runs a CPU copy or division as an OpenMP parallel region
# (`at::internal::GRAIN_SIZE`): every video frame, and no row of tabular values.
_GRAIN_SIZE = 32768
# What `Tensor.numpy()` gives a view of.
_NUMPY_DTYPES = frozenset(
    {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
     torch.float64, torch.bool}
)  # fmt: skip


def copy_row(row: torch.Tensor, value: torch.Tensor) -> None:
    """`row.copy_(value)` on the calling thread alone.

    A lane is a thread of its own, and torch's copy of a frame-sized tensor is an OpenMP parallel region:
    from a thread that is not torch's main thread, each such region gets an OpenMP team of that thread's
    own, whose threads spin for milliseconds after every region (measured: "OpenMP in the lanes" in
    docs/benchmarks.md). NumPy copies on the calling thread: the same bytes, no team.
    """
    if value.numel() < _GRAIN_SIZE or value.dtype not in _NUMPY_DTYPES or value.requires_grad:
        row.copy_(value)  # below the grain torch copies on the calling thread too
    else:
        np.copyto(row.numpy(), value.numpy())


def unit_float_row(row: torch.Tensor, frames: torch.Tensor) -> None:
    """`to_unit_float(frames, out=row)` on the calling thread alone (see `copy_row`): float32 division by
    255 of the uint8 codes, bit for bit what torch (and lerobot's `frames / 255.0`) computes."""
    if frames.numel() < _GRAIN_SIZE or frames.dtype != torch.uint8 or frames.requires_grad:
        to_unit_float(frames, out=row)
    else:
        np.divide(frames.numpy(), np.float32(255.0), out=row.numpy(), dtype=np.float32)


class ColumnRow(NamedTuple):
    """Row `frame` of a tabular column, not yet read: `BatchFill.put` writes it straight from the column's
    NumPy view into its row of the batch, with no tensor made per sample (the per-sample index, clone and
    copy were three torch calls per column, each handing the GIL over to the other lanes)."""

    column: torch.Tensor
    array: np.ndarray  # the column's NumPy view (the same memory)
    frame: int

    def tensor(self) -> torch.Tensor:
        """The row as the sample's own tensor (what `EpisodeRows.sample` gives)."""
        return self.column[self.frame].clone()


class BatchFill:
    """One batch being built by the lane threads: each stackable tensor of a sample is copied straight
    into its row of the key's buffer (allocated when the first sample with that key arrives); every
    other value (strings, Python lists, a tensor whose shape or dtype differs between samples) is kept
    per row and collated at the end by `reader.batch.collate.collate`, so the batch equals collate's.
    A `ColumnRow` is written through NumPy, without a tensor of its own."""

    def __init__(self, size: int, channels_last: frozenset[str] = frozenset()) -> None:
        self.size = size
        self.keys: list[str] | None = None
        self.buffers: dict[str, torch.Tensor] = {}
        self._arrays: dict[str, np.ndarray] = {}  # the NumPy view of each buffer `ColumnRow`s go into
        # key -> the shape and dtype its samples come with, and whether they are late (see `put`)
        self.kinds: dict[str, tuple[torch.Size, torch.dtype, bool]] = {}
        self.loose: dict[str, list[Any]] = {}
        self.channels_last = channels_last
        self._lock = threading.Lock()

    def put(self, row: int, item: dict[str, Any], late: frozenset[str] = frozenset()) -> None:
        """Copy `item` into row `row`; its keys in `late` are uint8 frames the batch holds as float32
        (`to_unit_float`, written straight into the row)."""
        if row == 0:
            self.keys = list(item)
        for key, value in item.items():
            if type(value) is ColumnRow:
                array = self._arrays.get(key)
                if array is None and key not in self.loose:
                    array = self._allocate_rows(key, value.column)
                column = value.column
                if array is not None and self.kinds[key] == (column.shape[1:], column.dtype, False):
                    array[row] = value.array[value.frame]
                    continue
                value = value.tensor()
            buffer = self.buffers.get(key)
            if buffer is None and key not in self.loose:
                buffer = self._allocate(key, value, key in late)
            if (
                buffer is not None
                and isinstance(value, torch.Tensor)
                and (value.shape, value.dtype, key in late) == self.kinds[key]
            ):
                if key in late:
                    unit_float_row(buffer[row], value)
                else:
                    copy_row(buffer[row], value)
            else:
                self._loosen(key, row, to_unit_float(value) if key in late else value)

    def batch(self) -> dict[str, Any]:
        assert self.keys is not None
        rows = [{key: values[row] for key, values in self.loose.items()} for row in range(self.size)]
        rest = collate(rows) if self.loose else {}
        return {key: rest[key] if key in rest else self.buffers[key] for key in self.keys}

    def _allocate(self, key: str, value: Any, late: bool) -> torch.Tensor | None:
        with self._lock:
            if key in self.buffers or key in self.loose:
                return self.buffers.get(key)
            if not plain_cpu_tensor(value):
                self.loose[key] = [None] * self.size
                return None
            dtype = torch.float32 if late else value.dtype
            if key in self.channels_last and value.dim() >= 3:
                # (..., C, H, W) kept as (..., H, W, C) in memory: a decoded frame is laid out so (torchcodec
                # permutes its HWC frames), and copying it in is then a plain copy, not a transposition.
                shape = (self.size, *value.shape[:-3], *value.shape[-2:], value.shape[-3])
                buffer = torch.empty(shape, dtype=dtype).movedim(-1, -3)
            else:
                buffer = torch.empty((self.size, *value.shape), dtype=dtype)
            self.buffers[key], self.kinds[key] = buffer, (value.shape, value.dtype, late)
            return buffer

    def _allocate_rows(self, key: str, column: torch.Tensor) -> np.ndarray | None:
        """The NumPy view of the buffer that rows of `column` go into (None: the key is kept per row)."""
        with self._lock:
            if key not in self.buffers and key not in self.loose:
                buffer = torch.empty((self.size, *column.shape[1:]), dtype=column.dtype)
                self.buffers[key], self.kinds[key] = buffer, (column.shape[1:], column.dtype, False)
                self._arrays[key] = buffer.numpy()
            return self._arrays.get(key)

    def _loosen(self, key: str, row: int, value: Any) -> None:
        """Keep `value` per row (and, the first time, every row already copied into the key's buffer)."""
        with self._lock:
            if key not in self.loose:
                self._arrays.pop(key, None)
                buffer = self.buffers.pop(key)
                self.loose[key] = [buffer[r] for r in range(self.size)]  # rows not yet filled are overwritten
            self.loose[key][row] = value


@dataclass
class LaneTotals:
    """What one lane counted while building its share of a batch."""

    local: int = 0
    decoded: int = 0
    seconds: float = 0.0

    def add(self, local: bool, decoded: int, seconds: float) -> None:
        self.local += 1 if local else 0
        self.decoded += decoded
        self.seconds += seconds


@dataclass(frozen=True)
class Lanes:
    """The lane threads of one `Consumer.batches` iteration: a single-thread executor per lane, the keys
    laid out channels-last, and the lock that keeps the user's transforms to one at a time."""

    executors: list[ThreadPoolExecutor]
    channels_last: frozenset[str]
    transform_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


@dataclass(frozen=True)
class BatchJob:
    """A batch submitted to the lanes: its last step, its buffers and one future per lane used."""

    last_step: int
    fill: BatchFill
    lanes: list[Future[LaneTotals]]
