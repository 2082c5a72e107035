"""`collate`: `default_collate`'s batch, handed from a DataLoader worker to the trainer as one buffer.

`default_collate` allocates one shared-memory segment per key of every batch, and torch passes each to
the trainer process separately (with the default sharing strategy, one file descriptor handed over a
socket per tensor). For a reader item of a dozen keys that hand-over costs about as much CPU as the
collation itself. `collate` writes every tensor of a batch into one shared-memory buffer instead, so one
segment is made and mapped per batch; the trainer gets a plain dict whose tensors are views of that
buffer, equal in keys, order, dtypes, shapes and values to what `default_collate` returns. Use it as
`DataLoader(stream, ..., collate_fn=collate)`; it is optional. A tensor kept from a batch keeps the
whole batch's buffer alive. With `pin_memory=True` the DataLoader then copies each tensor into pinned
memory of its own, as it does after `default_collate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info

__all__ = ["collate"]

_ALIGN = 64  # every tensor starts on a cache line of the buffer


def collate(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Collate reader items into a batch, exactly as `default_collate` would.

    In a DataLoader worker the batch's tensors share one shared-memory buffer (cheaper to hand over);
    elsewhere (the main process, `num_workers=0`) this is `default_collate`. Keys whose values are not
    CPU tensors of one shape and dtype (strings, for example) are collated by `default_collate`, except
    Python lists (lerobot's `language` features: a list of annotations per frame, of any length), which
    `default_collate` cannot batch: they come as one list of the samples' values, as lerobot's
    `lerobot_collate_fn` gives them.

    Args:
        items: the samples of one batch (dicts with the same keys, as `EpisodeStream` yields; other
            mapping types are left to `default_collate`).

    Returns:
        key -> stacked tensor (or `default_collate`'s value), in the items' key order.
    """
    if not items or type(items[0]) is not dict:
        return default_collate(list(items))  # other mapping types: default_collate keeps their type
    kept = [key for key, value in items[0].items() if isinstance(value, list)]
    if kept:  # Python lists (language annotations, of any length): one list of the samples' values
        rest = collate([{k: v for k, v in item.items() if k not in kept} for item in items])
        return {key: [item[key] for item in items] if key in kept else rest[key] for key in items[0]}
    if get_worker_info() is None:
        return default_collate(list(items))
    first, count = items[0], len(items)
    layout: list[tuple[str, int, torch.Tensor]] = []
    total = 0
    for key, value in first.items():
        if _stackable(key, value, items):
            total = -(-total // _ALIGN) * _ALIGN
            layout.append((key, total, value))
            total += count * value.nbytes
    if not layout:
        return default_collate(list(items))
    buffer = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(max(total, 1)))
    out: dict[str, Any] = {}
    for key, offset, value in layout:
        view = buffer[offset : offset + count * value.nbytes].view(value.dtype).view(count, *value.shape)
        out[key] = torch.stack([item[key] for item in items], out=view)
    return {key: out[key] if key in out else default_collate([item[key] for item in items]) for key in first}


def plain_cpu_tensor(value: Any) -> bool:
    """Whether `value` is a dense CPU tensor, which a batch buffer can hold a row of."""
    return (
        isinstance(value, torch.Tensor)
        and value.device.type == "cpu"
        and value.layout == torch.strided
        and not value.is_nested
    )


def _stackable(key: str, value: Any, items: Sequence[Mapping[str, Any]]) -> bool:
    if not plain_cpu_tensor(value):
        return False
    return all(
        isinstance(item[key], torch.Tensor)
        and item[key].shape == value.shape
        and item[key].dtype == value.dtype
        for item in items
    )
