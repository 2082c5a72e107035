"""A column that `meta/info.json` does not declare (an annotation newer lerobot writes, such as
`language_events`: a variable-length list of structs per frame) must not stop training: the reader
returns the declared features and lerobot's standard columns and names the rest once; reshard keeps the
column and verify compares it."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from torch.utils.data import DataLoader

from reader import EpisodeStream
from reshard.cli import cli

EVENTS = pa.list_(pa.struct([("t", pa.float32()), ("text", pa.string())]))


def _with_events(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    for path in sorted((dest / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        events = [
            [{"t": float(i % 3), "text": f"say {j}"} for j in range(i % 4)] for i in range(table.num_rows)
        ]
        pq.write_table(table.append_column("language_events", pa.array(events, type=EVENTS)), path)
    return dest


@pytest.fixture(scope="module")
def annotated(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _with_events(sample_ds, tmp_path_factory.mktemp("annotated") / "v3")


def test_the_reader_leaves_an_undeclared_column_out_and_names_it(
    annotated: Path, sample_ds: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from reader import rows

    rows._NOTED.clear()
    with caplog.at_level(logging.WARNING, logger="reader.rows"):
        got = {int(s["index"]): s for s in EpisodeStream(annotated, seed=1)}
    want = {int(s["index"]): s for s in EpisodeStream(sample_ds, seed=1)}
    assert got.keys() == want.keys()
    for index, sample in got.items():
        assert sample.keys() == want[index].keys() and "language_events" not in sample
    notes = [r.getMessage() for r in caplog.records if "language_events" in r.getMessage()]
    assert len(notes) == 1 and "not features of meta/info.json" in notes[0]


def test_batches_of_an_annotated_dataset_through_workers(annotated: Path) -> None:
    loader = DataLoader(EpisodeStream(annotated, batch_size=8), batch_size=8, num_workers=2)
    assert sum(len(b["index"]) for b in loader) == len(EpisodeStream(annotated))


def test_reshard_keeps_the_column_and_verify_compares_it(annotated: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["reshard", str(annotated), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    source = pa.concat_tables(pq.read_table(p) for p in sorted((annotated / "data").rglob("*.parquet")))
    copied = pa.concat_tables(pq.read_table(p) for p in sorted((out / "data").rglob("*.parquet")))
    assert (
        copied.sort_by("index")
        .column("language_events")
        .equals(source.sort_by("index").column("language_events"))
    )
    assert CliRunner().invoke(cli, ["verify", str(out), "--against", str(annotated)]).exit_code == 0
    # A source whose annotation differs in one frame: verify names the rows.
    other = tmp_path / "other"
    shutil.copytree(annotated, other)
    first = sorted((other / "data").rglob("*.parquet"))[0]
    table = pq.read_table(first)
    events = table.column("language_events").to_pylist()
    events[0] = [{"t": 9.0, "text": "changed"}]
    column = table.schema.get_field_index("language_events")
    pq.write_table(table.set_column(column, "language_events", pa.array(events, type=EVENTS)), first)
    result = CliRunner().invoke(cli, ["verify", str(out), "--against", str(other)])
    assert result.exit_code == 1 and "source-tables" in result.output, result.output
    assert "Invalid rows. Expected every value equal to the source's" in result.output


def test_the_stream_of_the_reshard_reads_as_the_source(annotated: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["reshard", str(annotated), "--out", str(out), "-q"]).exit_code == 0
    assert sum(1 for _ in EpisodeStream(out)) == sum(1 for _ in EpisodeStream(annotated))
