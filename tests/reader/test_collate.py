"""`reader.collate` (reader/batch/collate.py): the same batches as `default_collate`, each handed over as one shared buffer."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate

from reader import EpisodeStream, collate

FPS = 30
WINDOWS = {"action": [-1 / FPS, 0.0, 1 / FPS], "observation.images.cam0": [-1 / FPS, 0.0]}


def _batches(stream: EpisodeStream, collate_fn, workers: int) -> list[dict]:  # type: ignore[no-untyped-def]
    return list(DataLoader(stream, batch_size=5, num_workers=workers, collate_fn=collate_fn))


def _assert_batches_equal(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert list(a) == list(b), f"batch {i}: keys or their order differ"
        for key in b:
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, f"batch {i} {key}"
                assert torch.equal(a[key], b[key]), f"batch {i} {key}: values differ"
            else:
                assert a[key] == b[key], f"batch {i} {key}"


@pytest.mark.parametrize("workers", [0, 2], ids=["main-process", "workers2"])
@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
def test_batches_equal_default_collate(small: tuple[Path, Path], workers: int, uint8: bool) -> None:
    def stream() -> EpisodeStream:
        return EpisodeStream(
            small[1], delta_timestamps=WINDOWS, episode_pool_size=3, seed=5, return_uint8=uint8
        )

    want = _batches(stream(), default_collate, workers)
    got = _batches(stream(), collate, workers)
    _assert_batches_equal(got, want)
    assert sum(len(b["index"]) for b in got) == 69  # a partial last batch per worker included


def test_a_worker_batch_arrives_as_one_shared_buffer(small: tuple[Path, Path]) -> None:
    stream = EpisodeStream(small[1], delta_timestamps=WINDOWS, episode_pool_size=3, return_uint8=True)
    batch = next(iter(DataLoader(stream, batch_size=4, num_workers=1, collate_fn=collate)))
    tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
    assert len(tensors) >= 10 and isinstance(batch["task"], list)
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    assert all(t.is_contiguous() for t in tensors)


class _Items(IterableDataset):
    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from self.items


def test_mismatched_shapes_fail_as_default_collate_does() -> None:
    items = [{"x": torch.zeros(3), "n": torch.tensor(1)}, {"x": torch.zeros(4), "n": torch.tensor(2)}]
    loader = DataLoader(_Items(items), batch_size=2, num_workers=1, collate_fn=collate)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        next(iter(loader))


def test_other_mapping_types_are_kept_as_default_collate_keeps_them() -> None:
    items = [OrderedDict(x=torch.ones(2), s="a") for _ in range(2)]
    got = next(iter(DataLoader(_Items(items), batch_size=2, num_workers=1, collate_fn=collate)))
    assert type(got) is OrderedDict
    _assert_batches_equal([got], [default_collate(items)])


def test_values_that_are_not_tensors_are_collated_by_default_collate() -> None:
    items = [{"s": "a", "i": 1, "f": 0.5, "t": torch.ones(2, dtype=torch.bool)} for _ in range(3)]
    got = next(iter(DataLoader(_Items(items), batch_size=3, num_workers=1, collate_fn=collate)))
    want = default_collate(items)
    _assert_batches_equal([got], [want])
