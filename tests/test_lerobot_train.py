"""`lrs train` in lerobot's own environment: trains, resumes exactly, two ranks split an epoch right.

lerobot 0.6.1 needs Python 3.12 and torch < 2.12, so it cannot live in this environment:
`scripts/lerobot/env.sh` builds its environment (cached under ~/.cache/lrs, lrs reinstalled from this
checkout) and `scripts/lerobot/train_check.py` runs there. Building it the first time takes minutes and
about 5 GB; it is part of `make test` (CI), and a missing Python 3.12 or a failed install fails the
test rather than skipping it. `LRS_LEROBOT_TRAIN=skip` skips it on a developer's machine (never on CI,
where the `CI` variable is set). The "With lerobot-train" commands (docs/lerobot-train.md; the README
shows the first of them) are run the same way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Tier: needs lerobot's own environment (scripts/lerobot/env.sh builds it): `make test-all`, not `make test`.
pytestmark = pytest.mark.lerobot

ROOT = Path(__file__).resolve().parent.parent


def clean_env() -> dict[str, str]:
    """No PYTHONPATH: lrs must come from lerobot's environment, installed as users install it."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.mark.timeout(3600)  # the environment built the first time, then four short trainings
def test_lrs_train_trains_resumes_and_splits_ranks(lerobot_python: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [lerobot_python, str(ROOT / "scripts" / "lerobot" / "train_check.py"), "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode in (0, 1) and done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["lerobot"].startswith("0.6.")
    single = report["single"]
    assert single["resume_exact"], single
    assert single["resumed_batches"] == single["steps"] - single["resumed_at_step"]
    # The same epoch on 2 CPU ranks under torchrun and under `accelerate launch --multi_gpu`.
    for key, launcher in (("two_ranks", "torchrun"), ("two_ranks_accelerate", "accelerate")):
        ranks = report[key]
        assert ranks["launcher"] == launcher and ranks["processes"] == 2, ranks
        assert ranks["every_frame_once"] and ranks["equal_ranks"], ranks
    held = report["eval_split"]  # --dataset.eval_split=0.25 --eval_steps=5 --steps=10
    assert [step for step, _ in held["eval_losses"]] == [5, 10], held
    assert held["train_batches"] == 10 and held["trained_on_held_out"] == 0, held
    assert held["eval_episodes"] and held["train_episodes"], held
    assert report["ok"]


def readme_train_commands() -> list[str]:
    """The `lrs train` lines of the first bash block of docs/lerobot-train.md, "With lerobot-train"
    (continuations joined): the README's own `lrs train` line at a small model's size."""
    text = (ROOT / "docs" / "lerobot-train.md").read_text()
    block = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [
        line.split(" # ")[0].strip() for line in joined.splitlines() if line.strip().startswith("lrs train")
    ]


@pytest.mark.timeout(3600)
def test_the_readme_lerobot_train_commands_run(lerobot_python: str, tmp_path: Path) -> None:
    """As written, on an `lrs sample` reshard, with the small ACT of the check script (a random backbone:
    no download) and a preemption between the two: `last` points at the halfway checkpoint."""
    sys.path.append(str(ROOT / "scripts" / "lerobot"))
    from train_runs import ACT

    lrs = str(Path(lerobot_python).with_name("lrs"))
    sample = tmp_path / "v3"
    subprocess.run(
        [lrs, "-q", "sample", str(sample), "--num-episodes", "4", "--max-length", "16"], check=True
    )
    subprocess.run([lrs, "-q", "reshard", str(sample), "--out", str(tmp_path / "aloha-lrs")], check=True)
    commands = readme_train_commands()
    assert len(commands) == 2, commands
    env = {**clean_env(), "LRS_TRAIN_RECORD": str(tmp_path / "record")}
    for n, line in enumerate(commands):
        line = line.replace("/data/aloha-lrs", str(tmp_path / "aloha-lrs"))
        line = line.replace("/local/lrs-cache", str(tmp_path / "cache"))
        args = line.split()[2:]
        if n == 0:
            args += [a for a in ACT if not a.startswith(("--policy.type", "--batch_size"))]
        done = subprocess.run(
            [lrs, "train", *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800
        )
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        if n == 0:
            last = tmp_path / "outputs" / "act" / "checkpoints" / "last"
            last.unlink()
            last.symlink_to("000010")
    received = [
        json.loads(x)["index"] for x in (tmp_path / "record" / "rank0.jsonl").read_text().splitlines()
    ]
    assert len(received) == 30 and received[20:] == received[10:20]  # the resume replayed steps 11-20
