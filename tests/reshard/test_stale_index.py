"""`lrs doctor` and `lrs verify` of a dataset edited after its reshard (`lerobot-edit-dataset` copies
`meta/lrs/` along unchanged): doctor reports a "stale lrs index" defect naming the command that rebuilds
it, and verify says so in its first line; both exit 1. A stale lrs/1 dataset is a v3 dataset: `lrs
reshard` reads it as one, and the result passes `verify --against` it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from reshard.cli import cli
from tests.support import edits
from tests.support.datasets import resharded, verified

VIDEO = f"videos/{edits.CAM0}/chunk-000/file-001.mp4"

EDITS: dict[str, Callable[[Path], Any]] = {
    "modify-task": edits.modify_task,
    "reencode-video": lambda root: edits.reencode_video(root, VIDEO),
    "same-size-task": edits.same_size_task_edit,
    "same-size-value": edits.same_size_value_edit,
    "delete-episode": edits.delete_last_episode,
}


@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_doctor_and_verify_name_the_stale_index(
    edit: str, sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path]
) -> None:
    root = copy_ds(sample_resharded_ds, "edited")
    EDITS[edit](root)
    doctor = CliRunner().invoke(cli, ["doctor", str(root), "--json", "-q"])
    assert doctor.exit_code == 1, doctor.output
    report = json.loads(doctor.output)
    stale = [d for d in report["defects"] if d["check"] == "index"]
    assert len(stale) == 1 and "index" in report["checks"]
    assert stale[0]["problem"].startswith("stale lrs index: ")
    assert f"lrs reshard {root} --out NEW" in stale[0]["problem"]
    verify = CliRunner().invoke(cli, ["verify", str(root)])
    assert verify.exit_code == 1
    first = verify.output.splitlines()[0]
    assert first.startswith(f"verify {root}: stale lrs index: ") and "lrs reshard" in first, verify.output


def test_doctor_of_a_fresh_reshard_checks_its_index(sample_resharded_ds: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", str(sample_resharded_ds), "--json", "-q"])
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["clean"] and report["checks"][-1] == "index"


def test_a_stale_dataset_reshards_as_v3_and_verifies_against_it(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    root = copy_ds(sample_resharded_ds, "edited")
    edits.modify_task(root, 0, "new task zero")
    out = resharded(root, tmp_path / "rebuilt")
    verified(out, root)
    tasks = pq.read_table(out / "meta/tasks.parquet").column("task").to_pylist()
    assert "new task zero" in tasks
    result = CliRunner().invoke(cli, ["doctor", str(out), "-q"])
    assert result.exit_code == 0, result.output


def test_doctor_header_counts_what_info_json_declares_when_episodes_cannot_be_read(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path]
) -> None:
    root = copy_ds(sample_resharded_ds, "broken")
    (root / edits.EPISODES).write_bytes(b"not parquet")
    result = CliRunner().invoke(cli, ["doctor", str(root), "-q"])
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith(f"doctor: {root}: 8 episodes, 244 frames;"), result.output


def test_doctor_and_verify_name_a_damaged_video_under_unchanged_metadata(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path]
) -> None:
    """Another camera's video in place of one the index lists, `meta/` untouched: damage, not an edit."""
    root = copy_ds(sample_resharded_ds, "damaged")
    (root / VIDEO).write_bytes((root / VIDEO.replace(edits.CAM0, "observation.images.cam1")).read_bytes())
    doctor = CliRunner().invoke(cli, ["doctor", str(root), "--json", "-q"])
    assert doctor.exit_code == 1, doctor.output
    damaged = [d for d in json.loads(doctor.output)["defects"] if d["check"] == "index"]
    assert len(damaged) == 1 and damaged[0]["problem"].startswith(f"Invalid file ({root}/{VIDEO}): has ")
    assert "while meta/ is exactly what the index recorded" in damaged[0]["problem"]
    verify = CliRunner().invoke(cli, ["verify", str(root)])
    assert verify.exit_code == 1
    assert verify.output.startswith(f"verify {root}: Invalid file ({root}/{VIDEO}): has "), verify.output
