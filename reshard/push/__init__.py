"""Publishing a resharded dataset: `publish` (the order, the checks, progress), `target` (where: an
fsspec URL or a Hugging Face bucket), `hf` (the bucket calls) and `retry` (retries with backoff).

`__all__` is what the command line uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.push.publish import push

__all__ = ["push"]

_LAZY = {
    "push": "reshard.push.publish",
}

__getattr__, __dir__ = lazy_exports("reshard.push", _LAZY, globals())
