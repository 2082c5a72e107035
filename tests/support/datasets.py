"""Generated datasets for tests: a v3 sample (`reshard.demo.sample.write_sample`), its lrs/1 reshard
(`reshard.reshard`) and a proof of it (`reshard.verify.verify`), each one call of the library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reshard import ReshardOptions, reshard
from reshard.demo.sample import write_sample
from reshard.verify import VerifyReport, verify

__all__ = ["resharded", "v3_sample", "verified"]


def v3_sample(root: Path, **spec: Any) -> Path:
    """A sample v3 dataset at `root` (`SampleSpec` fields as keywords), as `lrs sample` writes it."""
    return write_sample(root, **spec)


def resharded(src: Path, out: Path, **options: Any) -> Path:
    """`src` resharded into lrs/1 at `out` (`ReshardOptions` fields as keywords, e.g. `video="h264"`)."""
    reshard(str(src), out, options=ReshardOptions(**options), quiet=True)
    return out


def verified(out: Path, against: Path) -> VerifyReport:
    """The report of `verify` of `out` against its source; fails the test unless every check passed."""
    report = verify(str(out), against=str(against))
    assert report.ok, report.describe()
    return report
