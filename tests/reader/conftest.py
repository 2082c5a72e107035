"""The fixtures the reader's test files share: the small sample, built once a session, in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reader.decode.frames import Frames
from reader.decode.tail import TailBuffer
from tests.reader.reference import SMALL, sample_pair


@pytest.fixture(scope="session")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The small sample as (v3, its lrs/1 reshard)."""
    return sample_pair(tmp_path_factory.getbasetemp() / "reader-data", "small", **SMALL)


@pytest.fixture(scope="session")
def small_lrs(small: tuple[Path, Path]) -> Path:
    """The small sample's lrs/1 reshard."""
    return small[1]


@pytest.fixture
def held_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """After each request a tail buffer serves: the bytes all live buffers hold together (-1: a request
    it was not expecting, which no epoch should have)."""
    buffers: list[TailBuffer] = []
    totals: list[int] = []
    init, serve = TailBuffer.__init__, TailBuffer.serve

    def tracked_init(self: TailBuffer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        buffers.append(self)

    def tracked_serve(self: TailBuffer, *args: Any, **kwargs: Any) -> Frames | None:
        served = serve(self, *args, **kwargs)
        totals.append(-1 if served is None else sum(b.held for b in buffers))
        return served

    monkeypatch.setattr(TailBuffer, "__init__", tracked_init)
    monkeypatch.setattr(TailBuffer, "serve", tracked_serve)
    return totals
