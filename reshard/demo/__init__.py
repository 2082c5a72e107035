"""The built-in sample and `lrs demo`.

`sample` writes a synthetic v3 dataset the way lerobot records one (`lrs sample`), described by
`sample_spec`, with `frame_marks` (frames that carry their own id), `schema` (the tables and metadata),
`lerobot_stats` (stats as lerobot computes them) and `sample_video` (the encoded files). `pipeline` runs
`lrs demo` on it (sample, reshard, verify, push, prewarm, train), with its settings in `config`, its
training loop in `training_loop` and its checks in `invariants`.

`__all__` is what the command line uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from reshard.demo.config import DEMO_SAMPLE, DemoCheckError, DemoConfig
    from reshard.demo.pipeline import claim_workdir, cleanup_workdir, render_table, run_demo
    from reshard.demo.sample import write_sample
    from reshard.demo.sample_spec import PIX_FMTS, SampleSpec

__all__ = [
    "DEMO_SAMPLE",
    "DemoCheckError",
    "DemoConfig",
    "PIX_FMTS",
    "SampleSpec",
    "claim_workdir",
    "cleanup_workdir",
    "render_table",
    "run_demo",
    "write_sample",
]

_LAZY = {
    "DEMO_SAMPLE": "reshard.demo.config",
    "DemoCheckError": "reshard.demo.config",
    "DemoConfig": "reshard.demo.config",
    "PIX_FMTS": "reshard.demo.sample_spec",
    "SampleSpec": "reshard.demo.sample_spec",
    "claim_workdir": "reshard.demo.pipeline",
    "cleanup_workdir": "reshard.demo.pipeline",
    "render_table": "reshard.demo.pipeline",
    "run_demo": "reshard.demo.pipeline",
    "write_sample": "reshard.demo.sample",
}

__getattr__, __dir__ = lazy_exports("reshard.demo", _LAZY, globals())
