"""A reshard edited by lerobot's own `lerobot-edit-dataset`, in lerobot's own environment: where lerobot
copied `meta/lrs/` along the index is stale (doctor exit 1 naming it, one reader warning), where it wrote
a new dataset the result is plain v3; either way `EpisodeStream` reads lerobot's values and the edited
dataset reshards and verifies.

`scripts/lerobot/edit_check.py` runs in the environment `scripts/lerobot/env.sh` builds, with the same
policy as tests/test_lerobot_train.py: a missing Python 3.12 or a failed install fails the test,
`LRS_LEROBOT_TRAIN=skip` skips it on a developer's machine (never on CI).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.test_lerobot_train import ROOT, clean_env

# Tier: needs lerobot's own environment (scripts/lerobot/env.sh builds it): `make test-all`, not `make test`.
pytestmark = pytest.mark.lerobot

# Where lerobot copies `meta/lrs/` along (stale), and where it writes a new dataset without it.
STALE = {"modify_tasks", "reencode_videos", "recompute_stats"}
DATASETS = [
    "modify_tasks",
    "delete_episodes",
    "reencode_videos",
    "recompute_stats",
    "split/train",
    "split/val",
    "remove_feature",
    "merge",
]


@pytest.fixture(scope="module")
def report(lerobot_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    work = tmp_path_factory.mktemp("edit")
    done = subprocess.run(
        [lerobot_python, str(ROOT / "scripts" / "lerobot" / "edit_check.py"), "--workdir", str(work)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=work,
        check=False,
        timeout=600,
    )
    assert done.returncode in (0, 1) and done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(3600)  # the environment built the first time, then seconds
def test_every_operation_ran(report: dict[str, Any]) -> None:
    assert report["lerobot"].startswith("0.6.")
    assert [row["dataset"] for row in report["rows"]] == DATASETS
    assert not [row for row in report["rows"] if row.get("error")]


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("dataset", DATASETS, ids=DATASETS)
def test_an_edited_reshard(report: dict[str, Any], dataset: str) -> None:
    row = next(r for r in report["rows"] if r["dataset"] == dataset)
    assert row["has_lrs_index"] == (dataset in STALE), row
    if row["has_lrs_index"]:
        assert row["doctor_exit"] == 1 and "stale lrs index" in row["doctor_defect"], row
        assert f"lrs reshard {Path(report['workdir']) / dataset} --out NEW" in row["doctor_defect"], row
        assert row["reader_warnings"] == 1 and row["reader_warning"], row
    else:
        assert row["doctor_exit"] == 0 and row["doctor_defect"] is None, row
        assert row["reader_warnings"] == 0, row
    assert row["stream_samples"] == row["frames"] > 0, row
    assert row["samples_equal"] == row["samples_compared"] == 5, row
    assert row["reshard_exit"] == 0 and row["verify_exit"] == 0, row
    assert row["ok"], row


@pytest.mark.timeout(3600)
def test_the_edits_show(report: dict[str, Any]) -> None:
    """What each operation changed is what lrs reads: a new task, an episode fewer, a split, a merge."""
    rows = {row["dataset"]: row for row in report["rows"]}
    assert "new task zero" in rows["modify_tasks"]["tasks"] and "new task zero" in rows["merge"]["tasks"]
    assert rows["delete_episodes"]["episodes"] == rows["modify_tasks"]["episodes"] - 1
    assert rows["split/train"]["episodes"] + rows["split/val"]["episodes"] == rows["modify_tasks"]["episodes"]
    assert rows["merge"]["frames"] == 2 * rows["recompute_stats"]["frames"]
    assert report["ok"]
