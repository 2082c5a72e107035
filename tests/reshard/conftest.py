"""Fixtures shared by the reshard tests."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def truncated(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with cam0's first video file cut inside episode 1 (`defects.make_truncated`); read-only."""
    return make_truncated(sample_ds, tmp_path_factory.mktemp("truncated") / "v3")
