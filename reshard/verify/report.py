"""The outcome of `verify` (`VerifyReport`): the check classes passed, the violations of the first one
that failed, the video comparisons; for humans (`describe`) and as JSON (`to_json`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from cache.printable import printable_lines
from cache.redaction import redact
from reshard.verify.context import VideoQuality, Violation
from reshard.verify.report_frames import ReportLook

_MAX_LISTED = 20


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify`.

    Attributes:
        url: the dataset verified.
        against: the source it was compared with, if any.
        passed: the check classes that passed, in order.
        violations: the violations of the first failing class (empty when everything passed).
        videos: per-episode video comparisons (with a source).
        stale: where `meta/lrs/` no longer describes the dataset's files (edited after its reshard), why,
            with the command that rebuilds it: the report's first line.
        look: with `verify(worst_frames=...)`, what `lrs verify --report`'s page shows besides (each
            camera's worst frames, bytes and decode cost); not in `to_json`.
    """

    url: str
    against: str | None
    passed: tuple[str, ...]
    violations: tuple[Violation, ...] = ()
    videos: tuple[VideoQuality, ...] = field(default=(), repr=False)
    stale: str | None = None
    look: ReportLook | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Printed and written as JSON: no token or password in them.
        object.__setattr__(self, "url", redact(self.url))
        object.__setattr__(self, "against", None if self.against is None else redact(self.against))

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def failed_check(self) -> str | None:
        return self.violations[0].check if self.violations else None

    def describe(self) -> str:
        """A report for humans: the checks passed, then the first failing class with its violations."""
        head = f"verify {self.url}" + (f" against {self.against}" if self.against else "")
        lines = [f"{head}: {self.stale}" if self.stale else head]
        lines += [f"  ok    {name}" for name in self.passed]
        if self.videos:
            reencoded = [v for v in self.videos if v.reencoded]
            copied = len(self.videos) - len(reencoded)
            lines.append(
                f"        {copied} episode videos identical to the source, {len(reencoded)} re-encoded"
            )
            if reencoded:
                worst = min(v.psnr_min_db for v in reencoded)
                mean = float(np.mean([v.psnr_mean_db for v in reencoded]))
                lines.append(f"        re-encoded PSNR: worst frame {worst:.1f} dB, mean {mean:.1f} dB")
                gains, offsets = [v.gain for v in reencoded], [v.offset for v in reencoded]
                lines.append(
                    f"        re-encoded colours: gain {min(gains):.3f} to {max(gains):.3f}, offset "
                    f"{min(offsets):+.4f} to {max(offsets):+.4f}"
                )
        if self.violations:
            lines.append(f"  FAIL  {self.failed_check}: {len(self.violations)} violation(s)")
            lines += [f"        {v}" for v in self.violations[:_MAX_LISTED]]
            if len(self.violations) > _MAX_LISTED:
                lines.append(f"        ... and {len(self.violations) - _MAX_LISTED} more")
        return printable_lines(lines)  # a name from the dataset, quoted in a violation, stays on its line

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (infinite PSNR, for identical frames, as null)."""
        doc = asdict(dataclasses.replace(self, look=None))
        del doc["look"]
        for video in doc["videos"]:
            for name in ("psnr_min_db", "psnr_mean_db"):
                video[name] = None if math.isinf(video[name]) else video[name]
        doc["ok"] = self.ok
        return doc
