"""Names are data: a feature name, a camera key or a task string from a dataset is printed with its control
characters escaped by every command and error (`cache.printable`), and such a name is a `lrs doctor`
defect; a feature `meta/info.json` declares that the data files lack is a doctor defect and a reshard
refusal (one line naming the data file and the feature, exit 3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from reshard.cli import cli
from tests.reshard.test_hostile_input import assert_one_line, edit_info

DATA = "data/chunk-000/file-000.parquet"


def _declare_absent_feature(root: Path) -> None:
    """info.json declares `observation.extra`, which no data file holds."""
    features = json.loads((root / "meta/info.json").read_text())["features"]
    edit_info(root, features={**features, "observation.extra": {"dtype": "float32", "shape": [2]}})


def test_a_feature_absent_from_the_data_files_is_a_doctor_defect(
    sample_ds: Path, copy_ds: Callable[[Path], Path]
) -> None:
    root = copy_ds(sample_ds)
    _declare_absent_feature(root)
    result = CliRunner().invoke(cli, ["doctor", str(root), "--json", "-q"])
    assert result.exit_code == 1, result.output
    absent = [d for d in json.loads(result.output)["defects"] if d["field"] == "observation.extra"]
    assert absent and all(d["problem"].startswith("Invalid data file (no 'observation.extra' column)") for d in absent)
    assert {Path(d["file"]).name for d in absent} == {p.name for p in (root / "data/chunk-000").iterdir()}


def test_reshard_refuses_a_feature_absent_from_the_data_files(
    sample_ds: Path, copy_ds: Callable[[Path], Path], tmp_path: Path
) -> None:
    root, out = copy_ds(sample_ds), tmp_path / "out"
    _declare_absent_feature(root)
    result = CliRunner().invoke(cli, ["reshard", str(root), "--out", str(out), "-q"])
    assert result.exit_code == 3, result.output
    assert_one_line(
        result.output,
        rf"^Error: {root}/{DATA}, field 'observation.extra': Invalid data file \(no 'observation.extra' column\)",
    )
    assert not out.exists()


def test_doctor_of_the_sample_and_its_reshard_finds_no_absent_feature(
    sample_ds: Path, sample_resharded_ds: Path
) -> None:
    for root in (sample_ds, sample_resharded_ds):
        result = CliRunner().invoke(cli, ["doctor", str(root), "-q"])
        assert result.exit_code == 0, result.output
