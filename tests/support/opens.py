"""Counting the containers PyAV opens, for tests that a video is opened once."""

from __future__ import annotations

from collections import Counter

import av
import pytest


def count_av_opens(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every `av.open` from now on, by file (the test's monkeypatch undoes it)."""
    opened: Counter[str] = Counter()
    real_open = av.open

    def counting(file: object, *args: object, **kwargs: object) -> object:
        opened[str(file)] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(av, "open", counting)
    return opened
