"""What the lerobot-environment checks share: lerobot-train's flags, running a trainer and reading its
log, and the datasets they train on. `train_check.py` and `train_compare.py` import it (Python puts this
folder first on `sys.path`: see scripts/README.md); it runs in lerobot's environment like them.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BATCH = 8
WORKERS = 2
# lerobot-train's flags every run here shares: batch, DataLoader workers, a log line per step.
TRAIN = ["--wandb.enable=false", f"--batch_size={BATCH}", f"--num_workers={WORKERS}", "--log_freq=1"]
# A small ACT so that a CPU step takes about a second: the data path is what is checked.
ACT = [
    "--policy.type=act",
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--policy.pretrained_backbone_weights=null",
    "--policy.chunk_size=10",
    "--policy.n_action_steps=10",
    "--policy.dim_model=64",
    "--policy.n_heads=2",
    "--policy.dim_feedforward=128",
    "--policy.n_encoder_layers=1",
    "--policy.n_decoder_layers=1",
    *TRAIN,
]
TIMEOUT_S = 1800  # a run that hangs (at exit, say) fails the check instead of blocking it
LOG = re.compile(r"step:(\d+)\S* .*?loss:([\d.]+).*?updt_s:([\d.]+) data_s:([\d.]+)")
EVAL_LOG = re.compile(r"step (\d+): eval_loss=([\d.]+)")


def tool(name: str) -> str:
    """A console script of this environment (`lrs`, `accelerate`, `lerobot-train`)."""
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        raise SystemExit(
            f"Error: no {name} beside {sys.executable}. Expected lerobot[training] and lrs installed."
        )
    return str(path)


def run(
    name: str, cmd: list[str], work: Path, record: Path | None = None, timeout_s: float = TIMEOUT_S
) -> dict[str, Any]:
    """Run `cmd`, its output in `work/<name>.log`; the steps lerobot logged (loss, updt_s, data_s), its wall
    seconds and the CPU seconds of its process tree (every process it started and waited for, DataLoader
    workers included)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("LRS_TRAIN_RECORD", None)
    if record is not None:
        record.mkdir(parents=True, exist_ok=True)
        env["LRS_TRAIN_RECORD"] = str(record)
    log = work / f"{name}.log"
    start, cpu = time.perf_counter(), _children_cpu_s()
    with open(log, "w") as out:
        # Its own process group: a launcher that times out is stopped with every rank it started.
        process = subprocess.Popen(
            cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise SystemExit(f"Error: {name} ran past {timeout_s} s (log {log}).") from None
    seconds, cpu = time.perf_counter() - start, _children_cpu_s() - cpu
    if returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"Error: {name} exited {returncode} (log {log}):\n{tail}")
    text = log.read_text()
    evals = [(int(m[1]), float(m[2])) for m in EVAL_LOG.finditer(text)]
    return {"seconds": round(seconds, 1), "cpu_s": round(cpu, 1), "steps": parse_steps(text), "evals": evals}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parse_steps(log: str) -> list[tuple[float, ...]]:
    """(step, loss, updt_s, data_s) of each line lerobot's trainer logged."""
    return [tuple(float(x) for x in m.groups()) for m in LOG.finditer(log)]


def resharded(work: Path, lrs: str, names: tuple[str, str], write: list[str]) -> tuple[Path, Path]:
    """A v3 dataset written at `work/<names[0]>` by the command `write` (the directory appended) and its
    lrs reshard at `work/<names[1]>`, both made again unless that reshard is there."""
    source, out = work / names[0], work / names[1]
    if not (out / "meta" / "lrs").is_dir():
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        for cmd in ([*write, str(source)], [lrs, "-q", "reshard", str(source), "--out", str(out)]):
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                raise SystemExit(f"Error: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return source, out


def make_dataset(work: Path, lrs: str) -> tuple[Path, Path]:
    """An `lrs sample` (6 episodes of 12-24 frames) and its reshard."""
    sample = [lrs, "-q", "sample", "--num-episodes", "6", "--min-length", "12", "--max-length", "24"]
    return resharded(work, lrs, ("v3", "lrs1"), sample)
