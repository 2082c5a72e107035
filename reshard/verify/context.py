"""What the checks of one `verify` call share: the check classes (`CHECKS`), a broken invariant
(`Violation`), an episode video's comparison with its source (`VideoQuality`), and `VerifyRun`, the
dataset and source opened once and the violations found so far. Every check module takes a `VerifyRun`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from cache.remote import Remote
from reader.format.layout import Layout
from reshard.job.execute import local_copy
from reshard.source.model import V3Source
from reshard.video.compare import ColourFit

CHECKS = ("layout", "files", "tables", "pointers", "videos", "source-tables", "source-videos")


@dataclass(frozen=True)
class Violation:
    """One broken invariant.

    Attributes:
        check: the check class (one of `CHECKS`).
        message: what is wrong, with the expected value.
        file: the dataset-relative file it concerns, if any.
        episode: the episode it concerns, if any.
    """

    check: str
    message: str
    file: str | None = None
    episode: int | None = None

    def __str__(self) -> str:
        where = [w for w in (self.file, None if self.episode is None else f"episode {self.episode}") if w]
        return f"{', '.join(where)}: {self.message}" if where else self.message


@dataclass(frozen=True)
class VideoQuality:
    """How one episode video compares with its source (`gain`, `offset`: its `ColourFit`)."""

    episode: int
    key: str
    reencoded: bool
    identical: bool
    psnr_min_db: float
    psnr_mean_db: float
    gain: float = 1.0
    offset: float = 0.0


@dataclass
class VerifyRun:
    """The state shared by the checks of one `verify` call, once the dataset's metadata loaded.

    `keep_worst`: each camera's worst frames kept for `lrs verify --report` (0: none, nothing collected);
    `colours`: each camera's colour fit of its re-encoded frames, once `source-videos` judged it.
    """

    remote: Remote
    tmp: Path
    min_psnr: float
    layout: Layout
    dataset: V3Source
    source: V3Source | None
    violations: list[Violation] = field(default_factory=list)
    videos: list[VideoQuality] = field(default_factory=list)
    keep_worst: int = 0
    colours: dict[str, ColourFit] = field(default_factory=dict)

    def fail(self, check: str, message: str, file: str | None = None, episode: int | None = None) -> None:
        self.violations.append(Violation(check, message, file, episode))

    def local(self, remote: Remote, rel: str) -> contextlib.AbstractContextManager[str]:
        """A local path of a file of the dataset or the source (fetched into the temp dir if remote)."""
        return local_copy(remote, rel, self.tmp)
