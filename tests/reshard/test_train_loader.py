"""What lerobot-train iterates under `lrs train` (`reshard.train.loader.TrainLoader`), without lerobot:
epochs that reach persistent workers, exact resume across an epoch's end, the per-rank record; and the
attributes lerobot-train reads on the dataset and its `meta`."""

from __future__ import annotations

import json
import threading
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from reader import EpisodeStream, ResumableLoader, collate
from reader.format.catalog import Catalog
from reshard.train.hooks import Session, first_tasks
from reshard.train.loader import RECORD_ENV, TrainLoader
from reshard.train.options import StreamOptions

BATCH = 8


def stream_of(url: Path, **kwargs: object) -> EpisodeStream:
    return EpisodeStream(url, batch_size=BATCH, seed=3, return_uint8=True, **kwargs)  # type: ignore[arg-type]


def train_loader(url: Path, state: dict | None = None, workers: int = 2) -> TrainLoader:
    stream = stream_of(url)
    if state is not None:
        stream.load_state_dict(state)
    return TrainLoader(stream, batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0)


def cycled(loader: TrainLoader, batches: int) -> list[list[int]]:
    """`batches` batches as lerobot's `cycle(dataloader)` draws them (a new `iter()` at each epoch's end)."""

    def forever():
        while True:
            yield from loader

    return [b["index"].tolist() for b in islice(forever(), batches)]


@pytest.mark.integration
def test_persistent_workers_stream_each_epoch_in_its_own_order(sample_resharded_ds: Path) -> None:
    loader = train_loader(sample_resharded_ds)
    per_epoch = len(loader)
    got = cycled(loader, 2 * per_epoch)
    frames = sum(stream_of(sample_resharded_ds).lengths)
    for epoch in range(2):
        flat = [i for batch in got[epoch * per_epoch : (epoch + 1) * per_epoch] for i in batch]
        assert sorted(flat) == list(range(frames))  # every frame once
        reference = stream_of(sample_resharded_ds)
        reference.set_epoch(epoch)
        plain = ResumableLoader(DataLoader(reference, batch_size=BATCH, num_workers=2))
        assert got[epoch * per_epoch : (epoch + 1) * per_epoch] == [b["index"].tolist() for b in plain]
    assert got[:per_epoch] != got[per_epoch:]


@pytest.mark.integration
@pytest.mark.parametrize("workers", [0, 2], ids=["batch-loader", "workers"])
@pytest.mark.parametrize("cut", [5, "end", "end+3"], ids=["mid-epoch", "epoch-end", "next-epoch"])
def test_a_saved_state_resumes_at_the_exact_next_batch(
    sample_resharded_ds: Path, cut: int | str, workers: int
) -> None:
    first = train_loader(sample_resharded_ds, workers=workers)
    per_epoch = len(first)
    at = {"end": per_epoch, "end+3": per_epoch + 3}.get(cut, cut)  # type: ignore[call-overload]
    total = per_epoch + 6
    whole = cycled(train_loader(sample_resharded_ds, workers=workers), total)
    before = cycled(first, at)
    state = json.loads(json.dumps(first.state_dict()))  # what lrs_stream.json holds
    after = cycled(train_loader(sample_resharded_ds, state, workers=workers), total - at)
    assert before + after == whole


def lane_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("lrs-lane")]


@pytest.mark.integration
def test_without_workers_batches_are_built_by_lane_threads_as_the_dataloader_would(
    sample_resharded_ds: Path,
) -> None:
    loader = train_loader(sample_resharded_ds, workers=0)
    assert loader.loader is None  # no DataLoader: EpisodeStream.batches, BatchLoader's path
    got = iter(loader)
    first = next(got)
    assert lane_threads()  # built by the lanes, not in this thread
    epochs = [[first, *got]]
    epochs.append(list(loader))
    for epoch, batches in enumerate(epochs):
        reference = stream_of(sample_resharded_ds)
        reference.set_epoch(epoch)
        plain = list(DataLoader(reference, batch_size=BATCH, num_workers=0, collate_fn=collate))
        assert len(batches) == len(plain) == len(loader)
        for ours, theirs in zip(batches, plain, strict=True):
            assert ours.keys() == theirs.keys()
            for key, value in theirs.items():
                if isinstance(value, torch.Tensor):
                    assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key
                else:
                    assert ours[key] == value, key


def test_without_workers_the_state_is_the_plain_dataloaders(sample_resharded_ds: Path) -> None:
    """A checkpoint written with num_workers=0 before this loader (a DataLoader) resumes here, and back."""
    plain = ResumableLoader(
        DataLoader(stream_of(sample_resharded_ds), batch_size=BATCH, num_workers=0, collate_fn=collate)
    )
    before = [b["index"].tolist() for b in islice(plain, 4)]
    ours = train_loader(sample_resharded_ds, json.loads(json.dumps(plain.state_dict())), workers=0)
    middle = cycled(ours, 3)
    assert ours.state_dict() == {**plain.state_dict(), "batches_consumed": 7}
    back = ResumableLoader(
        DataLoader(stream_of(sample_resharded_ds), batch_size=BATCH, num_workers=0, collate_fn=collate)
    )
    back.load_state_dict(json.loads(json.dumps(ours.state_dict())))
    after = [b["index"].tolist() for b in back]
    whole = [
        b["index"].tolist()
        for b in DataLoader(stream_of(sample_resharded_ds), batch_size=BATCH, collate_fn=collate)
    ]
    assert before + middle + after == whole


def test_a_state_resumes_on_another_batch_size_and_worker_count(sample_resharded_ds: Path) -> None:
    first = train_loader(sample_resharded_ds)
    before = [i for batch in cycled(first, 5) for i in batch]
    stream = stream_of(sample_resharded_ds)
    stream.load_state_dict(json.loads(json.dumps(first.state_dict())))
    second = TrainLoader(stream, batch_size=3, num_workers=1, persistent_workers=True)
    rest = [i for batch in second for i in batch["index"].tolist()]  # the rest of epoch 0
    assert sorted(before + rest) == list(range(sum(stream.lengths)))  # every frame of the epoch once
    assert second.state_dict()["epoch"] == 0 and "before" in second.state_dict()


def test_the_record_is_what_the_trainer_received(
    sample_resharded_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    stream = stream_of(sample_resharded_ds)
    loader = TrainLoader.like(
        DataLoader(stream, batch_size=BATCH, num_workers=1, prefetch_factor=4, persistent_workers=True)
    )
    assert (loader.loader.prefetch_factor, loader.loader.persistent_workers) == (4, True)
    got = cycled(loader, 3)
    lines = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert [line["index"] for line in lines] == got
    assert {line["epoch"] for line in lines} == {0}


def test_the_eval_loader_is_neither_saved_nor_recorded(
    sample_resharded_ds: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Accelerator:  # accelerate's, for what lrs's subclass passes on
        def prepare_data_loader(self, data_loader: object) -> str:
            return "accelerate's"

    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    session = Session(StreamOptions())
    session.eval_stream = stream_of(sample_resharded_ds, episodes=[6, 7], shuffle=False)
    accelerator = session.accelerator_class(Accelerator)()
    train = accelerator.prepare_data_loader(DataLoader(stream_of(sample_resharded_ds), batch_size=BATCH))
    held_out = accelerator.prepare_data_loader(DataLoader(session.eval_stream, batch_size=BATCH))
    assert session.loader is train and held_out is not train  # checkpoints save the train loader's state
    assert train.record == tmp_path / "rank0.jsonl" and held_out.record is None
    episodes = session.eval_stream.meta.episodes
    assert episodes is not None
    frames = range(int(episodes["dataset_from_index"][6]), int(episodes["dataset_to_index"][7]))
    assert sorted(i for batch in held_out for i in batch["index"].tolist()) == list(frames)
    assert not (tmp_path / "rank0.jsonl").exists()  # the eval epoch recorded nothing
    assert accelerator.prepare_data_loader(DataLoader([1, 2])) == "accelerate's"


def test_first_tasks_are_lerobots(sample_ds: Path, sample_resharded_ds: Path) -> None:
    for url in (sample_ds, sample_resharded_ds):
        tasks = first_tasks(Catalog.open(str(url)))
        names = [f"task {t}: pick the cube number {t} and place it in the bin" for t in range(3)]
        assert tasks == [names[episode % 3] for episode in range(8)]  # `lrs sample`: episode e, task e % 3


def test_what_lerobot_train_reads_on_the_dataset(sample_ds: Path, sample_resharded_ds: Path) -> None:
    for url in (sample_ds, sample_resharded_ds):
        catalog = Catalog.open(str(url))
        stream = stream_of(url, episodes=[1, 4], delta_timestamps={"action": [0.0, 0.1]})
        assert stream.num_episodes == 2
        assert stream.num_frames == int(catalog.lengths[1] + catalog.lengths[4])
        assert stream.root == url and stream.repo_id == stream.meta.repo_id
        assert stream.delta_timestamps == {"action": [0.0, 0.1]}
        episodes = stream.meta.episodes
        assert episodes is not None
        lengths = np.asarray(catalog.lengths)
        assert episodes["episode_index"].tolist() == list(range(len(lengths)))
        assert episodes["length"].tolist() == lengths.tolist()
        assert (
            episodes["dataset_from_index"].tolist() == np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        )
        assert (episodes["dataset_to_index"] - episodes["dataset_from_index"]).tolist() == lengths.tolist()
        assert stream.meta.has_language_columns is False
    assert stream_of(f"file://{sample_resharded_ds}").root == sample_resharded_ds  # on this machine's disk
