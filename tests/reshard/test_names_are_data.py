"""Names are data: a feature name, a camera key or a task string from a dataset is printed with its control
characters escaped by every command and error (`cache.printable`), and such a name is a `lrs doctor`
defect; a feature `meta/info.json` declares that the data files lack is a doctor defect and a reshard
refusal (one line naming the data file and the feature, exit 3)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import click
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cache.printable import printable, printable_lines
from reader.errors import DatasetError
from reader.format.parquet import replace_columns
from reshard.cli import cli
from reshard.cli.base import handle_errors
from tests.reshard.test_hostile_input import assert_one_line, edit_info

DATA = "data/chunk-000/file-000.parquet"
TASKS = "meta/tasks.parquet"


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
    assert absent and all(
        d["problem"].startswith("Invalid data file (no 'observation.extra' column)") for d in absent
    )
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


HOSTILE = "obs\x1b]0;pwned\x07\nverify: OK - FORGED LINE"
ESCAPED = r"obs\x1b]0;pwned\x07\nverify: OK - FORGED LINE"


def _hostile_names(root: Path, *, feature: bool = True) -> None:
    """A feature named with an escape sequence and a newline (with `feature`; no data file holds it), and
    task 0 (in `meta/tasks.parquet` and `meta/episodes`) that clears the screen."""
    if feature:
        features = json.loads((root / "meta/info.json").read_text())["features"]
        edit_info(root, features={**features, HOSTILE: {"dtype": "float32", "shape": [1]}})
    tasks = pq.read_table(root / TASKS)
    texts = tasks.column("task").to_pylist()
    old, texts[0] = texts[0], f"pick\x1b[2J{texts[0]}"
    pq.write_table(replace_columns(tasks, {"task": texts}), root / TASKS)
    for path in sorted((root / "meta/episodes").rglob("*.parquet")):
        episodes = pq.read_table(path)
        column = [[texts[0] if t == old else t for t in ts] for ts in episodes.column("tasks").to_pylist()]
        pq.write_table(replace_columns(episodes, {"tasks": column}), path)


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if not c.isprintable() and c != "\n"]


@pytest.fixture
def hostile(sample_ds: Path, copy_ds: Callable[[Path], Path]) -> Path:
    root = copy_ds(sample_ds)
    _hostile_names(root)
    return root


def test_describe_escapes_a_hostile_feature_name(hostile: Path) -> None:
    result = CliRunner().invoke(cli, ["describe", str(hostile)])
    assert result.exit_code == 0, result.output
    assert not _raw_controls(result.output) and ESCAPED in result.output
    assert not any(line.startswith("verify: OK") for line in result.output.splitlines())
    as_json = CliRunner().invoke(cli, ["describe", str(hostile), "--json"])
    assert HOSTILE in json.loads(as_json.output)["features"]  # JSON carries the name, escaped by JSON


def test_doctor_names_a_hostile_feature_name_and_task_as_defects(hostile: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", str(hostile), "-q"])
    assert result.exit_code == 1, result.output
    assert not _raw_controls(result.output)
    assert not any(line.startswith("verify: OK") for line in result.output.splitlines())
    assert (
        f"[metadata] {hostile}/meta/info.json, field 'features/{ESCAPED}': Invalid feature name ('{ESCAPED}')"
        in result.output
    )
    assert (
        rf"[metadata] {hostile}/meta/tasks.parquet, field 'task': Invalid task 0 ('pick\x1b[2J"
        in result.output
    )
    report = json.loads(CliRunner().invoke(cli, ["doctor", str(hostile), "--json", "-q"]).output)
    named = {(d["check"], d["field"]) for d in report["defects"]}
    assert {("metadata", f"features/{HOSTILE}"), ("metadata", "task"), ("rows", HOSTILE)} <= named


def test_inspect_and_show_escape_hostile_names(
    hostile: Path, sample_ds: Path, copy_ds: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(hostile)])
    assert result.exit_code == 0 and not _raw_controls(result.output), result.output
    tasked = copy_ds(sample_ds, "tasked")
    _hostile_names(tasked, feature=False)
    show = CliRunner().invoke(cli, ["show", str(tasked), "--episode", "0", "--out", str(tmp_path / "e.png")])
    assert show.exit_code == 0 and not _raw_controls(show.output), show.output
    # The hostile feature has no column: one escaped line naming it, not a KeyError.
    show = CliRunner().invoke(cli, ["show", str(hostile), "--episode", "0", "--out", str(tmp_path / "f.png")])
    assert show.exit_code == 3 and not _raw_controls(show.output), show.output
    assert_one_line(show.output, re.escape(f"episode 0: Invalid sample (no '{ESCAPED}' value)"))


def test_an_error_quoting_a_hostile_name_is_one_escaped_line(hostile: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["reshard", str(hostile), "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 3
    assert_one_line(result.output, re.escape(f"Invalid data file (no '{ESCAPED}' column)"))
    assert not _raw_controls(result.output)


def test_the_cli_escapes_every_error_message() -> None:
    """However a message words a name (quoted or not), the one line the CLI prints is escaped."""

    @click.command()
    @handle_errors
    def fails() -> None:
        raise DatasetError(f"Invalid camera {HOSTILE}. Expected another.", file="meta/info.json")

    result = CliRunner().invoke(fails, [])
    assert result.exit_code == 3
    assert result.output == f"Error: meta/info.json: Invalid camera {ESCAPED}. Expected another.\n"


def test_printable_escapes_as_repr_does_and_keeps_other_scripts() -> None:
    assert printable(HOSTILE) == ESCAPED == repr(HOSTILE)[1:-1]
    assert printable("caméra 左 \\ 'q'\t\u202e") == "caméra 左 \\ 'q'\\t\\u202e"
    assert printable_lines(["a\nb", "c"]) == "a\\nb\nc"
