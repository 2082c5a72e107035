"""Shared session fixtures: small generated v3 datasets, read-only (copy one before mutating it), built
through `tests.support.datasets` (the library's Python API, not the command line).

- `sample_ds`: lerobot-like, 8 episodes, 2 AV1 cameras, 3 episodes per data and video file.
- `sample_converted_ds`: the same episodes, data row groups spanning several episodes (v2.1 conversions).
- `sample_unaligned_ds`: video files encoded as one stream (GOP 4): some episodes start between keyframes.
- `sample_chunked_ds`: 7 camera-less episodes, one per data file, 2 files per chunk directory.
- `sample_depth_ds`: `DEPTH_SPEC`, 5 episodes, one RGB camera and one depth camera (12-bit lossless HEVC).
- `sample_resharded_ds`: `sample_ds` resharded into lrs/1 with the default options.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.datasets import resharded, v3_sample


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background of a non-interactive shell (`make test &`, a CI step run that
    way) inherits SIGINT ignored, and so would every `lrs` the tests start, which then keeps running
    through the Ctrl-C the signal tests send (`tests/reshard/test_exits.py`). Give SIGINT back its
    default here, so that what the children inherit does not depend on how the suite was started."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


DEPTH_SPEC = {"episodes": 5, "min_length": 6, "max_length": 14, "cameras": 1, "depth_cameras": 1, "seed": 3}


@pytest.fixture(scope="session")
def sample_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v3_sample(tmp_path_factory.mktemp("sample") / "ds")


@pytest.fixture(scope="session")
def sample_converted_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v3_sample(tmp_path_factory.mktemp("converted") / "ds", converted=True)


@pytest.fixture(scope="session")
def sample_unaligned_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v3_sample(tmp_path_factory.mktemp("unaligned") / "ds", keyframe_aligned=False, gop=4)


@pytest.fixture(scope="session")
def sample_chunked_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v3_sample(
        tmp_path_factory.mktemp("chunked") / "ds",
        episodes=7,
        cameras=0,
        episodes_per_data_file=1,
        chunks_size=2,
    )


@pytest.fixture(scope="session")
def sample_depth_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return v3_sample(tmp_path_factory.mktemp("depth") / "v3", **DEPTH_SPEC)


@pytest.fixture(scope="session")
def sample_resharded_ds(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resharded(sample_ds, tmp_path_factory.mktemp("resharded") / "out")


@pytest.fixture(scope="session")
def lerobot_python() -> str:
    """lerobot 0.6.1's own Python (`scripts/lerobot/env.sh` builds it the first time, about 5 GB, cached
    under ~/.cache/lrs), with lrs installed there as users install it. Tests that take it are marked
    `lerobot`. `LRS_LEROBOT_TRAIN=skip` skips them on a developer's machine, never when `CI` is set."""
    if os.environ.get("LRS_LEROBOT_TRAIN") == "skip":
        if os.environ.get("CI"):
            pytest.fail("LRS_LEROBOT_TRAIN=skip on CI: the lerobot checks must run there.")
        pytest.skip("LRS_LEROBOT_TRAIN=skip")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        ["bash", str(root / "scripts" / "lerobot" / "env.sh")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def copy_ds(tmp_path: Path) -> Callable[[Path], Path]:
    """Copy a session dataset into this test's tmp_path, to mutate it."""

    def copy(src: Path, name: str = "copy") -> Path:
        return Path(shutil.copytree(src, tmp_path / name))

    return copy
