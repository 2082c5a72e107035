"""A reshard at the training resolution (`--resize`) read by lerobot 0.6.1's own `LeRobotDataset`, in
lerobot's own environment: the shapes info.json declares are the shapes of the frames it returns.

Same policy as tests/test_lerobot_train.py: a missing Python 3.12 or a failed install fails the test,
`LRS_LEROBOT_TRAIN=skip` skips it on a developer's machine (never on CI).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.datasets import resharded
from tests.test_lerobot_train import clean_env

# Tier: needs lerobot's own environment (scripts/lerobot/env.sh builds it): `make test-all`, not `make test`.
pytestmark = pytest.mark.lerobot

READ = """
import json, sys
import lerobot
from lerobot.datasets.lerobot_dataset import LeRobotDataset

ds = LeRobotDataset("local/resized", root=sys.argv[1])
keys = ds.meta.camera_keys
picked = (0, len(ds) // 2, len(ds) - 1)
print(json.dumps({
    "lerobot": lerobot.__version__,
    "frames": len(ds),
    "declared": {k: list(ds.meta.features[k]["shape"]) for k in keys},
    "returned": {k: sorted({tuple(ds[i][k].shape) for i in picked}) for k in keys},
}))
"""


@pytest.mark.timeout(3600)  # the environment built the first time, then seconds
def test_lerobot_reads_a_resized_reshard(lerobot_python: str, sample_ds: Path, tmp_path: Path) -> None:
    out = resharded(sample_ds, tmp_path / "out", video="hevc", resize="64x48")
    done = subprocess.run(
        [lerobot_python, "-c", READ, str(out)],
        capture_output=True,
        text=True,
        env={**clean_env(), "HF_HUB_OFFLINE": "1"},
        cwd=tmp_path,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["lerobot"].startswith("0.6.")
    assert report["frames"] == json.loads((out / "meta/info.json").read_text())["total_frames"]
    cameras = ["observation.images.cam0", "observation.images.cam1"]
    assert report["declared"] == {key: [48, 64, 3] for key in cameras}
    assert report["returned"] == {key: [[3, 48, 64]] for key in cameras}  # channels first, as lerobot returns
