"""Check lrs on datasets edited by lerobot's own `lerobot-edit-dataset` after their reshard.

Run with the Python of an environment holding lerobot 0.6.1 and lrs (`scripts/lerobot/env.sh` builds
one):

    python scripts/lerobot/edit_check.py [--workdir DIR]

An `lrs sample` (4 episodes of 8-12 frames, 64x48 AV1 cameras) resharded to lrs/1 is the base. Copies
of it are edited by `lerobot-edit-dataset` (its console script's entry point with the command line users
type, in a process of its own forked once lerobot is imported): modify_tasks (in place), delete_episodes, reencode_videos (H.264), recompute_stats, split (two datasets),
remove_feature (a camera), and merge (the base and the task-modified copy). Where lerobot copies
`meta/lrs/` along (modify_tasks in place, and the copy-then-edit of reencode_videos and recompute_stats)
the index is stale; where it writes a new dataset, `meta/lrs/` is gone and the result is plain v3.

On each edited dataset:

1. `lrs doctor`: exit 1 with a "stale lrs index" defect where `meta/lrs/` is there, exit 0 where not;
2. `EpisodeStream(edited, shuffle=False)` against lerobot's `LeRobotDataset(root=edited)`: as many
   samples, and at a few positions index, frame and episode index, timestamp, task, state and action
   equal, each camera's mean pixel within 1/255; one "stale lrs index" warning where `meta/lrs/` is
   there, none where not;
3. `lrs reshard EDITED --out NEW`, then `lrs verify NEW --against EDITED`: both exit 0.

Prints one JSON object, a row per edited dataset; exits 1 if a row fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

STALE = "stale lrs index"
NEW_TASK = "new task zero"
TIMEOUT_S = 300  # one edit or one lrs command on a 44-frame dataset takes seconds


def tool(name: str) -> str:
    """A console script of this environment (`lrs`, `lerobot-edit-dataset`)."""
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        raise SystemExit(f"Error: no {name} beside {sys.executable}. Expected lerobot and lrs installed.")
    return str(path)


def run(cmd: list[str], work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S)


def checked(cmd: list[str], work: Path) -> None:
    done = run(cmd, work)
    if done.returncode != 0:
        raise SystemExit(f"Error: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")


def make_base(work: Path, lrs: str) -> Path:
    """An `lrs sample` and its reshard, the lrs/1 dataset every edit starts from."""
    source, base = work / "v3", work / "base"
    for path in (source, base):
        shutil.rmtree(path, ignore_errors=True)
    sample = ["sample", str(source), "--num-episodes", "4", "--min-length", "8", "--max-length", "12"]
    checked([lrs, "-q", *sample, "--height", "48", "--width", "64"], work)
    checked([lrs, "-q", "reshard", str(source), "--out", str(base)], work)
    return base


def edits(work: Path, base: Path) -> list[tuple[str, list[str], list[Path]]]:
    """(operation, lerobot-edit-dataset arguments, the datasets it writes) of each edit; the last one,
    merge, reads the first one's output."""
    tasked = work / "modify_tasks"

    def new_root(name: str) -> list[str]:
        return ["--repo_id", "x/base", "--root", str(base), "--new_repo_id", f"x/{name}", "--new_root"]

    return [
        (
            "modify_tasks",
            ["--repo_id=x/edited", f"--root={tasked}", "--operation.type=modify_tasks"]
            + ["--operation.episode_tasks", json.dumps({"0": NEW_TASK})],
            [tasked],
        ),
        (
            "delete_episodes",
            [*new_root("deleted"), str(work / "delete_episodes"), "--operation.type=delete_episodes"]
            + ["--operation.episode_indices", "[1]"],
            [work / "delete_episodes"],
        ),
        (
            "reencode_videos",
            [*new_root("reencoded"), str(work / "reencode_videos"), "--operation.type=reencode_videos"]
            + ["--operation.rgb_encoder.vcodec=h264", "--operation.rgb_encoder.crf=23"],
            [work / "reencode_videos"],
        ),
        (
            "recompute_stats",
            [*new_root("stats"), str(work / "recompute_stats"), "--operation.type=recompute_stats"],
            [work / "recompute_stats"],
        ),
        (
            "split",
            ["--repo_id=x/base", f"--root={base}", f"--new_root={work / 'split'}", "--operation.type=split"]
            + ["--operation.splits", json.dumps({"train": [0, 1, 2], "val": [3]})],
            [work / "split" / "train", work / "split" / "val"],
        ),
        (
            "remove_feature",
            [*new_root("removed"), str(work / "remove_feature"), "--operation.type=remove_feature"]
            + ["--operation.feature_names", '["observation.images.cam1"]'],
            [work / "remove_feature"],
        ),
        (
            "merge",
            ["--new_repo_id=x/merged", f"--new_root={work / 'merge'}", "--operation.type=merge"]
            + ["--operation.repo_ids", '["x/base", "x/edited"]']
            + ["--operation.roots", json.dumps([str(base), str(tasked)])],
            [work / "merge"],
        ),
    ]


def edit(log: Path, args: list[str]) -> str | None:
    """`lerobot-edit-dataset ARGS` in this (forked) process, its output in `log`: None, or its error."""
    from lerobot.scripts.lerobot_edit_dataset import main as edit_dataset

    with open(log, "w") as out:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.argv = ["lerobot-edit-dataset", *args]
        try:
            edit_dataset()
        except SystemExit as e:
            if e.code:
                return f"exit {e.code}: {log.read_text()[-1500:]}"
        except Exception as e:  # noqa: BLE001 - lerobot's error is what the row reports
            return f"{type(e).__name__}: {e}"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    return None


def apply_edits(work: Path, base: Path) -> list[tuple[str, Path, str | None]]:
    """Every edit, two at a time, merge last: (operation, edited dataset, error or None).

    Each is the `lerobot-edit-dataset` console script's entry point with its command line, in a process
    forked from this one once lerobot is imported: the import is most of the seven seconds an edit
    takes alone.
    """
    import lerobot.scripts.lerobot_edit_dataset  # noqa: F401 - imported once, before the fork

    plan = edits(work, base)
    shutil.copytree(base, work / "modify_tasks")
    jobs = [(work / f"edit-{op}.log", args) for op, args, _ in plan]
    with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
        errors = pool.starmap(edit, jobs[:-1])
        errors += pool.starmap(edit, jobs[-1:])
    return [(op, out, error) for (op, _, outs), error in zip(plan, errors, strict=True) for out in outs]


def lrs_checks(lrs: str, work: Path, edited: Path) -> dict[str, Any]:
    """`lrs doctor` of the edited dataset (exit, first defect line), then its reshard and verify."""
    doctor = run([lrs, "-q", "doctor", str(edited)], work)
    defects = [line.strip() for line in doctor.stdout.splitlines() if line.startswith("  [")]
    new = work / f"{edited.name}-lrs"
    shutil.rmtree(new, ignore_errors=True)
    reshard = run([lrs, "-q", "reshard", str(edited), "--out", str(new)], work)
    verify = (
        run([lrs, "-q", "verify", str(new), "--against", str(edited)], work)
        if reshard.returncode == 0
        else None
    )
    return {
        "doctor_exit": doctor.returncode,
        "doctor_defect": defects[0] if defects else None,
        "reshard_exit": reshard.returncode,
        "verify_exit": None if verify is None else verify.returncode,
        "reshard_error": reshard.stderr.strip()[-500:] if reshard.returncode else None,
        "verify_error": (verify.stdout + verify.stderr).strip()[-500:]
        if verify and verify.returncode
        else None,
    }


class StaleWarnings(logging.Handler):
    """The "stale lrs index" warnings lrs logged, by message."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if STALE in record.getMessage():
            self.messages.append(record.getMessage())


def compare(edited: Path, warnings: StaleWarnings) -> dict[str, Any]:
    """lrs's EpisodeStream against lerobot's LeRobotDataset on `edited`, at a few positions."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from reader import EpisodeStream

    before = len(warnings.messages)
    lerobot = LeRobotDataset(f"x/{edited.name}", root=edited)
    samples = list(EpisodeStream(str(edited), shuffle=False))
    seen = warnings.messages[before:]
    positions = sorted({0, len(lerobot) // 3, len(lerobot) // 2, 2 * len(lerobot) // 3, len(lerobot) - 1})
    differences = [
        f"position {k}: {problem}"
        for k in positions
        if k < len(samples)
        for problem in [sample_difference(lerobot[k], samples[k])]
        if problem
    ]
    return {
        "episodes": lerobot.meta.total_episodes,
        "frames": len(lerobot),
        "stream_samples": len(samples),
        "reader_warning": len(seen) == 1 and str(edited) in seen[0],
        "reader_warnings": len(seen),
        "tasks": sorted({s["task"] for s in samples}),
        "samples_compared": len(positions),
        "samples_equal": len(positions) - len(differences) if len(samples) == len(lerobot) else 0,
        "differences": differences[:3],
    }


def sample_difference(want: dict[str, Any], got: dict[str, Any]) -> str | None:
    """What differs between lerobot's sample and lrs's: the first key, or None."""
    import torch

    for key in ("index", "frame_index", "episode_index", "task_index", "timestamp", "task"):
        u, v = want[key], got[key]
        if (u != v) if isinstance(u, str) else not torch.equal(torch.as_tensor(u), torch.as_tensor(v)):
            return f"{key} {u!r} != {v!r}"
    for key in ("observation.state", "action"):
        if not torch.equal(want[key], got[key]):
            return f"{key} {want[key].tolist()} != {got[key].tolist()}"
    cameras = sorted(k for k in want if k.startswith("observation.images."))
    if cameras != sorted(k for k in got if k.startswith("observation.images.")):
        return f"cameras {cameras} != {sorted(k for k in got if k.startswith('observation.images.'))}"
    for key in cameras:
        u, v = want[key].float().mean().item(), got[key].float().mean().item()
        if abs(u - v) > 1 / 255:
            return f"{key} mean pixel {u:.5f} != {v:.5f}"
    return None


def row_ok(row: dict[str, Any]) -> bool:
    """Stale where lerobot kept meta/lrs/ (doctor exit 1 naming it, one reader warning), clean where it
    wrote a new dataset; lrs reads lerobot's values; the edited dataset reshards and verifies."""
    if row.get("error"):
        return False
    stale = row["doctor_exit"] == 1 and STALE in (row["doctor_defect"] or "") and row["reader_warning"]
    clean = row["doctor_exit"] == 0 and row["doctor_defect"] is None and row["reader_warnings"] == 0
    return (
        (stale if row["has_lrs_index"] else clean)
        and row["stream_samples"] == row["frames"] > 0
        and row["samples_equal"] == row["samples_compared"] > 0
        and row["reshard_exit"] == 0
        and row["verify_exit"] == 0
    )


def check(
    work: Path,
    operation: str,
    edited: Path,
    error: str | None,
    warnings: StaleWarnings,
    lrs_result: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """One row: what the edit left, what doctor, the reader and reshard+verify made of it."""
    row: dict[str, Any] = {"operation": operation, "dataset": edited.relative_to(work).as_posix()}
    if error is not None:
        return {**row, "error": f"lerobot-edit-dataset {operation}: {error}", "ok": False}
    row["has_lrs_index"] = (edited / "meta" / "lrs").is_dir()
    try:
        row.update(compare(edited, warnings))
    except Exception as e:  # noqa: BLE001 - a reader failure is the finding this row reports
        row["error"] = f"reader: {type(e).__name__}: {e}"
    row.update(lrs_result())
    row["ok"] = row_ok(row)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="Keep the files here (default: a temporary directory).")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="lrs-edit-check-"))
    work.mkdir(parents=True, exist_ok=True)
    # Offline, lerobot's home inside the work directory (nothing written to the user's): set before
    # lerobot is imported, which reads them once.
    os.environ.update({"HF_HUB_OFFLINE": "1", "HF_LEROBOT_HOME": str(work / "hf-home")})
    import lerobot

    lrs = tool("lrs")
    start = time.perf_counter()
    base = make_base(work, lrs)
    made = time.perf_counter()
    edited = apply_edits(work, base)
    edited_at = time.perf_counter()
    warnings = StaleWarnings()
    logging.getLogger("reader").addHandler(warnings)
    with ThreadPoolExecutor(2) as pool:  # lrs's commands beside the comparisons in this process
        futures = {
            path: pool.submit(lrs_checks, lrs, work, path) for _, path, error in edited if error is None
        }
        rows = [
            check(work, op, path, error, warnings, futures[path].result if error is None else dict)
            for op, path, error in edited
        ]
    seconds = {
        "sample_and_reshard": made - start,
        "edits": edited_at - made,
        "checks": time.perf_counter() - edited_at,
    }
    report = {
        "lerobot": lerobot.__version__,
        "workdir": str(work),
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "rows": rows,
    }
    report["ok"] = all(row["ok"] for row in rows)
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
