"""Fixtures shared by the reshard tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from reshard.demo.sample import THIRD_PARTY, write_sample
from tests.reshard.defects import make_defective, make_truncated
from tests.reshard.push_fixtures import make_dataset


@pytest.fixture(scope="session")
def push_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The push tests' source: a tiny lrs/1-shaped directory (`push_fixtures.make_dataset`), never written to."""
    return make_dataset(tmp_path_factory.mktemp("push-src") / "ds")


@pytest.fixture(scope="session")
def defective(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with one of each defect (`tests.reshard.defects`); read-only."""
    return make_defective(sample_ds, tmp_path_factory.mktemp("defective") / "v3")


# The third-party writers' datasets at test size: 2 episodes of 4-6 frames in one file, one camera.
SMALL = {"episodes": 2, "min_length": 4, "max_length": 6, "cameras": 1, "episodes_per_video_file": 2}


@pytest.fixture(scope="session")
def third_party(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`third_party(name)`: the v3 dataset `THIRD_PARTY[name]` at size `SMALL`, written once; read-only."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            made[name] = write_sample(tmp_path_factory.mktemp(name) / "v3", **THIRD_PARTY[name], **SMALL)
        return made[name]

    return make


@pytest.fixture(scope="session")
def truncated(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with cam0's first video file cut inside episode 1 (`defects.make_truncated`); read-only."""
    return make_truncated(sample_ds, tmp_path_factory.mktemp("truncated") / "v3")
