"""Fixtures of the reshard tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reshard.defects import make_defective


@pytest.fixture(scope="session")
def defective(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with one of each defect (`tests.reshard.defects`); read-only."""
    return make_defective(sample_ds, tmp_path_factory.mktemp("defective") / "v3")
