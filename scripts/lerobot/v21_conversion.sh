#!/usr/bin/env bash
# Dev tool, not run by CI or the tests: writes a v2.1 dataset with lerobot 0.3.3 and converts it to v3.0
# with lerobot 0.4.4's converter, the one whose `meta/episodes` data pointers are stale once a dataset
# spans several data files (the tests make the same defect by hand: tests/reshard/defects.py,
# `stale_pointers`). Each lerobot lives in its own venv under /tmp (pip, Python 3.12 from pyenv; about
# 5 GB and a few minutes the first time); nothing is installed into the project's venv.
#
#   scripts/lerobot/v21_conversion.sh OUT_DIR [EPISODES] [FRAMES]
#
# Writes OUT_DIR/local/v21 (v3.0 after the conversion; the v2.1 original is kept as local/v21_old).
# Each episode's parquet is about 0.6 MB of incompressible floats and the converter's data file size is
# 1 MB, so every episode after the first starts a new data file: episodes 1.. name the file before theirs,
# as the issue reports. Then `lrs doctor OUT_DIR/local/v21` warns, and reshard and EpisodeStream read it.
# Last run (4 episodes of 300 frames): data/file_index [0, 0, 1, 2] for episodes held by files 0, 1, 2, 3,
# the pointers `stale_pointers` writes; EpisodeStream on it and on its reshard gave lerobot 0.4.4's
# LeRobotDataset values for all 1,200 frames (rows, frames and task strings equal).
set -euo pipefail
OUT=${1:?usage: $0 OUT_DIR [EPISODES] [FRAMES]}
EPISODES=${2:-4}
FRAMES=${3:-300}
log() { echo "[lerobot/v21_conversion.sh] $*" >&2; }

venv() {  # venv DIR VERSION [PIN...]: a venv with lerobot==VERSION and the pins, made once
  local dir=$1 version=$2
  shift 2
  if ! "$dir/bin/python" -c "import lerobot.datasets" >/dev/null 2>&1; then
    local py312
    py312=$(ls -d /root/.pyenv/versions/3.12*/bin/python 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$py312" ] || py312=$(command -v python3.12 || true)
    [ -n "$py312" ] || { log "no Python 3.12 found"; exit 1; }
    log "creating $dir with lerobot==$version"
    "$py312" -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip >&2
    "$dir/bin/pip" install -q "lerobot==$version" "$@" >&2
  fi
  echo "$dir/bin/python"
}

# lerobot 0.3.3 asks for av>=14.2 without a ceiling; av 15 and later give `base_rate` as a rational.
WRITER=$(venv /tmp/lerobot-0.3.3-venv 0.3.3 "av>=14.2,<15" --only-binary=av)
CONVERTER=$(venv /tmp/lerobot-0.4.4-venv 0.4.4)
mkdir -p "$OUT"
rm -rf "$OUT/local/v21" "$OUT/local/v21_old" "$OUT/local/v21_v30"

log "writing a v2.1 dataset ($EPISODES episodes of $FRAMES frames) with lerobot 0.3.3"
"$WRITER" - "$OUT/local/v21" "$EPISODES" "$FRAMES" <<'PY'
import sys

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

root, episodes, frames = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
features = {
    "observation.state": {"dtype": "float32", "shape": (500,), "names": None},
    "action": {"dtype": "float32", "shape": (6,), "names": None},
    "observation.images.cam": {"dtype": "video", "shape": (64, 96, 3), "names": ["height", "width", "channels"]},
}
ds = LeRobotDataset.create("local/v21", fps=10, features=features, root=root, use_videos=True)
rng = np.random.default_rng(0)
for episode in range(episodes):
    for frame in range(frames):
        image = np.full((64, 96, 3), (episode * 40 + frame) % 256, dtype=np.uint8)
        ds.add_frame(
            {
                "observation.state": rng.standard_normal(500).astype(np.float32),
                "action": rng.standard_normal(6).astype(np.float32),
                "observation.images.cam": image,
            },
            task=f"task {episode % 2}",
        )
    ds.save_episode()
print(ds.meta.info["codebase_version"], ds.meta.total_episodes, ds.meta.total_frames)
PY

log "converting it with lerobot 0.4.4's convert_dataset_v21_to_v30 (data files of 1 MB)"
"$CONVERTER" -m lerobot.datasets.v30.convert_dataset_v21_to_v30 --repo-id local/v21 --root "$OUT" \
  --push-to-hub false --data-file-size-in-mb 1 >&2

"$CONVERTER" - "$OUT/local/v21" <<'PY'
import sys
from pathlib import Path

import pyarrow.parquet as pq

root = Path(sys.argv[1])
episodes = pq.read_table(root / "meta/episodes").sort_by("episode_index")
for name in ("episode_index", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index"):
    print(f"{name:20s}", episodes.column(name).to_pylist())
for path in sorted((root / "data").rglob("*.parquet")):
    table = pq.read_table(path, columns=["episode_index"])
    print(path.relative_to(root), "holds episodes", sorted(set(table.column("episode_index").to_pylist())))
PY
echo "$OUT/local/v21"
