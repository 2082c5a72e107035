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
import torch
from torch.utils.data import DataLoader

from reader import EpisodeStream
from reshard.verify import verify
from tests.support.datasets import resharded, verified

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
    from reader.runtime import rows

    rows._NOTED.clear()
    with caplog.at_level(logging.WARNING, logger="reader.runtime.rows"):
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
    resharded(annotated, out)
    source = pa.concat_tables(pq.read_table(p) for p in sorted((annotated / "data").rglob("*.parquet")))
    copied = pa.concat_tables(pq.read_table(p) for p in sorted((out / "data").rglob("*.parquet")))
    assert (
        copied.sort_by("index")
        .column("language_events")
        .equals(source.sort_by("index").column("language_events"))
    )
    verified(out, annotated)
    # A source whose annotation differs in one frame: verify names the rows.
    other = tmp_path / "other"
    shutil.copytree(annotated, other)
    first = sorted((other / "data").rglob("*.parquet"))[0]
    table = pq.read_table(first)
    events = table.column("language_events").to_pylist()
    events[0] = [{"t": 9.0, "text": "changed"}]
    column = table.schema.get_field_index("language_events")
    pq.write_table(table.set_column(column, "language_events", pa.array(events, type=EVENTS)), first)
    report = verify(str(out), against=str(other))
    assert report.failed_check == "source-tables", report.describe()
    assert "Invalid rows. Expected every value equal to the source's" in report.describe()


def test_the_stream_of_the_reshard_reads_as_the_source(annotated: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    resharded(annotated, out)
    assert sum(1 for _ in EpisodeStream(out)) == sum(1 for _ in EpisodeStream(annotated))


# --- declared text and language features --------------------------------------------------------------

# lerobot 0.6.1's `language_events` row (its tool calls are JSON text).
LANGUAGE = pa.list_(
    pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("style", pa.string()),
            ("camera", pa.string()),
            ("tool_calls", pa.list_(pa.string())),
        ]
    )
)


def _with_language(source: Path, dest: Path) -> Path:
    """The sample with two declared features of variable length, as lerobot 0.6.1 declares them: a
    `language` column (a list of annotations per frame, 0 to 3 of them) and a `string` instruction."""
    import json

    shutil.copytree(source, dest)
    for path in sorted((dest / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        index = table.column("index").to_pylist()
        events = [
            [
                {
                    "role": "user",
                    "content": f"step {i} note {j}",
                    "style": "subtask",
                    "camera": None,
                    "tool_calls": None,
                }
                for j in range(i % 4)
            ]
            for i in index
        ]
        words = [" ".join(["pick"] * (1 + i % 5)) for i in index]
        table = table.append_column("language_events", pa.array(events, type=LANGUAGE))
        pq.write_table(table.append_column("instruction", pa.array(words, pa.string())), path)
    info_path = dest / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["features"]["language_events"] = {"dtype": "language", "shape": [1], "names": None}
    info["features"]["instruction"] = {"dtype": "string", "shape": [1], "names": None}
    info_path.write_text(json.dumps(info, indent=4))
    return dest


@pytest.fixture(scope="module")
def spoken(sample_ds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _with_language(sample_ds, tmp_path_factory.mktemp("spoken") / "v3")


def test_declared_text_and_language_come_as_python_values(spoken: Path, tmp_path: Path) -> None:
    rows = pa.concat_tables(pq.read_table(p) for p in sorted((spoken / "data").rglob("*.parquet")))
    want = {
        i: (e, w)
        for i, e, w in zip(
            *(rows.column(c).to_pylist() for c in ("index", "language_events", "instruction")), strict=True
        )
    }
    out = tmp_path / "lrs"
    verified(resharded(spoken, out), spoken)
    for root in (spoken, out):
        seen = 0
        for sample in EpisodeStream(root, seed=2):
            events, words = want[int(sample["index"])]
            assert sample["language_events"] == events and isinstance(sample["language_events"], list)
            assert sample["instruction"] == words and isinstance(sample["instruction"], str)
            seen += 1
        assert seen == len(want)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_collate_batches_language_as_a_list_and_default_collate_batches_text(
    spoken: Path, num_workers: int
) -> None:
    from reader import collate

    stream = EpisodeStream(spoken, batch_size=8, return_uint8=True)
    rows = pa.concat_tables(pq.read_table(p) for p in sorted((spoken / "data").rglob("*.parquet")))
    events = dict(
        zip(rows.column("index").to_pylist(), rows.column("language_events").to_pylist(), strict=True)
    )
    total = 0
    for batch in DataLoader(stream, batch_size=8, num_workers=num_workers, collate_fn=collate):
        indices = batch["index"].tolist()
        assert batch["language_events"] == [events[i] for i in indices]  # one list, the samples' values
        assert isinstance(batch["instruction"], list) and len(batch["instruction"]) == len(indices)
        total += len(indices)
    assert total == len(stream)
    # torch's default_collate batches the text as a list too (it cannot batch lists of different lengths:
    # lerobot uses its own lerobot_collate_fn for `language` features, and so does reader.collate).
    text = EpisodeStream(spoken, batch_size=8, return_uint8=True)
    batch = next(iter(DataLoader(_without(text, "language_events"), batch_size=8, num_workers=num_workers)))
    assert isinstance(batch["instruction"], list) and all(isinstance(w, str) for w in batch["instruction"])


class _without(torch.utils.data.IterableDataset):  # noqa: N801 - reads as a call
    def __init__(self, stream: EpisodeStream, key: str) -> None:
        super().__init__()
        self.stream, self.key = stream, key

    def __iter__(self):  # noqa: ANN204
        for sample in self.stream:
            sample.pop(self.key)
            yield sample
