"""`reader.batch.fill`: a lane writes frame-sized rows on its own thread (NumPy), never through torch's
OpenMP-parallel copy or division, and the batch holds exactly the values `collate` would give."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from reader.batch.collate import collate
from reader.batch.fill import BatchFill, copy_row, unit_float_row

HEIGHT, WIDTH = 240, 320  # 230,400 elements: above torch's grain, so torch's copy would be parallel


def _frame(seed: int) -> torch.Tensor:
    """A frame as torchcodec returns it: (3, H, W) over HWC memory."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (HEIGHT, WIDTH, 3), dtype=torch.uint8, generator=generator).permute(2, 0, 1)


def _items() -> list[dict[str, Any]]:
    return [
        {
            "cam": _frame(row),
            "action": torch.tensor([row, 0.5]),
            "task": f"t{row}",
            "index": torch.tensor(row),
        }
        for row in range(3)
    ]


@pytest.fixture
def no_parallel_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail on torch's copy or division of a frame-sized tensor (what would start an OpenMP team)."""
    copy, div = torch.Tensor.copy_, torch.div

    def guarded_copy(self: torch.Tensor, src: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        assert src.numel() < 32768, "a frame went through torch's parallel copy"
        return copy(self, src, *args, **kwargs)

    def guarded_div(value: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        assert "out" not in kwargs or value.numel() < 32768, "a frame went through torch's parallel division"
        return div(value, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", guarded_copy)
    monkeypatch.setattr(torch, "div", guarded_div)


@pytest.mark.parametrize("channels_last", [False, True], ids=["chw", "channels-last"])
@pytest.mark.parametrize("late", [False, True], ids=["uint8", "float32"])
def test_a_batch_of_frames_equals_collate_without_torchs_parallel_copy(
    no_parallel_torch: None, channels_last: bool, late: bool
) -> None:
    items = _items()
    fill = BatchFill(len(items), frozenset({"cam"}) if channels_last else frozenset())
    for row in (2, 0, 1):  # lanes finish rows in any order
        fill.put(row, items[row], frozenset({"cam"}) if late else frozenset())
    batch = fill.batch()
    want = collate([{**i, "cam": i["cam"] / 255.0} if late else i for i in items])
    assert list(batch) == list(want)
    for key in ("cam", "action", "index"):
        assert batch[key].dtype == want[key].dtype
        assert torch.equal(batch[key], want[key]), key
    assert batch["task"] == want["task"]
    assert batch["cam"].is_contiguous(memory_format=torch.channels_last) is channels_last


def test_row_helpers_match_torch_on_every_code_and_fall_back_where_numpy_cannot() -> None:
    every = torch.arange(256, dtype=torch.uint8).repeat(3 * 160).reshape(3, 128, 320)  # above the grain
    floats = torch.empty(every.shape)
    unit_float_row(floats, every)
    assert torch.equal(floats, every / 255.0)  # lerobot's `frames / 255.0`, bit for bit
    copied = torch.empty_like(every)
    copy_row(copied, every)
    assert torch.equal(copied, every)
    wide = torch.rand(3, 128, 320, dtype=torch.bfloat16)  # no NumPy dtype: torch copies it
    row = torch.empty_like(wide)
    copy_row(row, wide)
    assert torch.equal(row, wide)


def test_column_rows_are_written_as_their_tensors_would_be_and_loosen_like_them() -> None:
    from reader.batch.fill import ColumnRow

    action = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    index = torch.arange(4)
    done = torch.tensor([False, True, False, True])
    rows = [
        {"action": ColumnRow(c, c.numpy(), f), "index": ColumnRow(index, index.numpy(), f), "done": ColumnRow(done, done.numpy(), f)}
        for f in (3, 0, 2)
        for c in [action]
    ]  # fmt: skip
    fill = BatchFill(3)
    for row in (1, 2, 0):
        fill.put(row, rows[row])
    batch = fill.batch()
    want = collate([{k: v.tensor() for k, v in r.items()} for r in rows])
    for key in want:
        assert batch[key].dtype == want[key].dtype and torch.equal(batch[key], want[key]), key
    # a row whose column has another dtype (a mixture's source): kept per row, collated as collate does
    other = torch.arange(12).reshape(4, 3)
    fill = BatchFill(2)
    fill.put(0, {"action": ColumnRow(action, action.numpy(), 1)})
    fill.put(1, {"action": ColumnRow(other, other.numpy(), 2)})
    mixed, want_mixed = (
        fill.batch()["action"],
        collate([{"action": action[1]}, {"action": other[2]}])["action"],
    )
    assert mixed.dtype == want_mixed.dtype and torch.equal(mixed, want_mixed)
