"""What `lrs demo` generates and how it streams (`DemoConfig`), and the error of a failed check."""

from __future__ import annotations

from dataclasses import dataclass

from cache.arguments import check_int
from reshard.demo.sample_spec import SampleSpec
from reshard.errors import VerifyError
from reshard.execute import ReshardOptions
from reshard.video.write import VideoMode


class DemoCheckError(VerifyError):
    """A claim the demo checks does not hold (verify, exactly-once coverage, decoded frames, resume)."""


@dataclass(frozen=True)
class DemoConfig:
    """What the demo generates and how it streams.

    Attributes:
        episodes: episodes of the sample.
        cameras: video cameras of the sample.
        height, width: frame size in pixels.
        min_length, max_length: episode lengths are drawn in [min_length, max_length] frames.
        video: how `reshard` writes videos ("hevc" re-encodes to H.265).
        batch_size: DataLoader batch size.
        num_workers: DataLoader workers.
        episode_pool_size: episodes each consumer mixes frames from.
        seed: the seed of the sample and of the stream's order.
    """

    episodes: int = 12
    cameras: int = 2
    height: int = 96
    width: int = 128
    min_length: int = 30
    max_length: int = 90
    video: VideoMode = "hevc"
    batch_size: int = 8
    num_workers: int = 2
    episode_pool_size: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        lows = {"episodes": 2, "cameras": 1, "batch_size": 1, "num_workers": 0, "episode_pool_size": 1}
        for name, low in lows.items():
            check_int(name, getattr(self, name), low)
        ReshardOptions(video=self.video)  # validates the mode
        self.spec()  # validates the sample's size and lengths

    def spec(self) -> SampleSpec:
        """The sample's generator spec."""
        return SampleSpec(
            episodes=self.episodes,
            cameras=self.cameras,
            height=self.height,
            width=self.width,
            min_length=self.min_length,
            max_length=self.max_length,
            seed=self.seed,
        )
