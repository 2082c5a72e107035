"""What `lrs demo` generates and how it streams (`DemoConfig`), and the error of a failed check."""

from __future__ import annotations

from dataclasses import dataclass

from cache.arguments import check_int
from reshard.demo.sample_spec import SampleSpec
from reshard.errors import VerifyError
from reshard.job.execute import ReshardOptions
from reshard.video.write import VideoMode


class DemoCheckError(VerifyError):
    """A claim the demo checks does not hold (verify, exactly-once coverage, decoded frames, resume)."""


# The demo's sample: larger frames and episodes than `SampleSpec`'s defaults (a test's), AV1 as lerobot
# records.
DEMO_SAMPLE = SampleSpec(episodes=12, cameras=2, height=96, width=128, min_length=30, max_length=90)


@dataclass(frozen=True)
class DemoConfig:
    """What the demo generates and how it streams.

    Attributes:
        sample: the sample the demo generates (its `seed` also seeds the stream's order).
        video: how `reshard` writes videos ("hevc" re-encodes to H.265).
        batch_size: DataLoader batch size.
        num_workers: DataLoader workers.
        episode_pool_size: episodes each consumer mixes frames from.
    """

    sample: SampleSpec = DEMO_SAMPLE
    video: VideoMode = "hevc"
    batch_size: int = 8
    num_workers: int = 2
    episode_pool_size: int = 4

    def __post_init__(self) -> None:
        check_int("episodes", self.sample.episodes, 2)
        check_int("cameras", self.sample.cameras, 1)
        check_int("batch_size", self.batch_size, 1)
        check_int("num_workers", self.num_workers, 0)
        check_int("episode_pool_size", self.episode_pool_size, 1)
        ReshardOptions(video=self.video)  # validates the mode
