"""The fixtures the reader's test files share: the small sample, built once a session, in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reader.reference import SMALL, sample_pair


@pytest.fixture(scope="session")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The small sample as (v3, its lrs/1 reshard)."""
    return sample_pair(tmp_path_factory.getbasetemp() / "reader-data", "small", **SMALL)


@pytest.fixture(scope="session")
def small_lrs(small: tuple[Path, Path]) -> Path:
    """The small sample's lrs/1 reshard."""
    return small[1]
