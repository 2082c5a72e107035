"""A stale `meta/lrs/` index (the dataset edited after its reshard by a tool that copies the index along,
as `lerobot-edit-dataset` does) is never trusted: the stream warns once, naming the file that differs and
the command that rebuilds the index, and reads the dataset as plain v3, sample for sample what the same
folder without `meta/lrs/` gives. A same-size edit of a data file alone is caught by the row groups'
CRC-32, an error naming the fix. A data or video file of another size (or missing) under a `meta/` that is
exactly what the index lists is no edit but damage or tampering: refused in one line naming the file, in
place and over a URL alike."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reader import EpisodeStream
from reader.errors import DecodeError, IntegrityError, RowGroupMismatch
from reader.format.catalog import Catalog
from tests.reader.reference import assert_items_equal
from tests.support import edits

VIDEO = f"videos/{edits.CAM0}/chunk-000/file-001.mp4"


def _same_size_edits(root: Path) -> None:
    edits.same_size_task_edit(root)
    edits.same_size_value_edit(root)


EDITS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "modify-task": (edits.modify_task, edits.EPISODES),
    "reencode-video": (lambda root: edits.reencode_video(root, VIDEO), "meta/info.json"),
    "same-size-task-and-value": (_same_size_edits, edits.EPISODES),
    "delete-episode": (edits.delete_last_episode, edits.EPISODES),
}


def _stale_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "stale lrs index" in r.getMessage()]


@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_an_edited_dataset_reads_as_plain_v3_with_one_warning(
    edit: str,
    sample_resharded_ds: Path,
    copy_ds: Callable[[Path, str], Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    change, differs = EDITS[edit]
    root = copy_ds(sample_resharded_ds, "edited")
    change(root)
    plain = edits.without_index(root, tmp_path / "plain")
    with caplog.at_level(logging.WARNING):
        assert Catalog.open(str(root)).kind == "v3"
        got = list(EpisodeStream(root, shuffle=False))
    warnings = _stale_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert f"{root}/{differs}" in warnings[0] and f"lrs reshard {root} --out NEW" in warnings[0]
    want = list(EpisodeStream(plain, shuffle=False))
    assert len(got) == len(want) > 0
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert_items_equal(mine, theirs, context=f"{edit} sample {i}")


def test_the_edits_show_in_the_samples(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path]
) -> None:
    """The values read are the edited ones, not the index's: a new task, a value, an episode fewer."""
    tasked = copy_ds(sample_resharded_ds, "tasked")
    edits.modify_task(tasked, 0, "new task zero")
    assert {s["task"] for s in EpisodeStream(tasked, shuffle=False) if int(s["episode_index"]) == 0} == {
        "new task zero"
    }
    valued = copy_ds(sample_resharded_ds, "valued")
    edits.same_size_task_edit(valued)
    _, new = edits.same_size_value_edit(valued)
    samples = list(EpisodeStream(valued, shuffle=False))
    assert all("lift" in s["task"] for s in samples)
    assert any(new in s["observation.state"].tolist() for s in samples)
    deleted = copy_ds(sample_resharded_ds, "deleted")
    edits.delete_last_episode(deleted)
    assert {int(s["episode_index"]) for s in EpisodeStream(deleted, shuffle=False)} == set(range(7))


def test_a_fresh_index_is_read_as_lrs_without_a_warning(
    sample_resharded_ds: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert Catalog.open(str(sample_resharded_ds)).kind == "lrs/1"
    assert not _stale_warnings(caplog)


def test_an_unlisted_file_makes_the_index_stale(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    root = copy_ds(sample_resharded_ds, "added")
    (root / "meta/episodes/chunk-000/file-001.parquet").write_bytes((root / edits.EPISODES).read_bytes())
    with caplog.at_level(logging.WARNING):
        Catalog.open(str(root))
    assert "meta/episodes/chunk-000/file-001.parquet is not listed" in _stale_warnings(caplog)[0]


def test_a_same_size_edit_of_a_data_file_alone_is_an_error_naming_the_fix(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path]
) -> None:
    root = copy_ds(sample_resharded_ds, "value")
    edits.same_size_value_edit(root)
    assert Catalog.open(str(root)).kind == "lrs/1"  # nothing cheap to see: the metadata and sizes agree
    with pytest.raises(
        RowGroupMismatch, match=r"Invalid row group 0 .*stale lrs index: rebuild it with `lrs reshard"
    ):
        for _ in EpisodeStream(root, shuffle=False):
            pass


OTHER_CAMERA = VIDEO.replace(edits.CAM0, "observation.images.cam1")


def _swap_camera(root: Path) -> None:
    """Another camera's video (another size) in place of one the index lists; `meta/` untouched."""
    assert (root / OTHER_CAMERA).stat().st_size != (root / VIDEO).stat().st_size
    (root / VIDEO).write_bytes((root / OTHER_CAMERA).read_bytes())


def _remove_data_file(root: Path) -> None:
    (root / edits.DATA).unlink()


DAMAGES: dict[str, tuple[Callable[[Path], Any], str, str]] = {
    "other-camera-video": (_swap_camera, VIDEO, r"has \d+ bytes, not the \d+ meta/lrs/files\.parquet lists"),
    "data-file-removed": (_remove_data_file, edits.DATA, "is missing, which meta/lrs/files.parquet lists"),
}


@pytest.mark.parametrize("damage", list(DAMAGES), ids=list(DAMAGES))
def test_a_damaged_file_under_unchanged_metadata_is_refused_in_place(
    damage: str,
    sample_resharded_ds: Path,
    copy_ds: Callable[[Path, str], Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    change, rel, problem = DAMAGES[damage]
    root = copy_ds(sample_resharded_ds, "damaged")
    change(root)
    match = rf"^Invalid file \({root}/{rel}\): {problem}, while meta/ is exactly what the index recorded\. "
    with caplog.at_level(logging.WARNING), pytest.raises(IntegrityError, match=match) as refused:
        for _ in EpisodeStream(root, shuffle=False):
            pass
    assert "\n" not in str(refused.value) and not _stale_warnings(caplog)


def test_a_video_of_another_size_is_refused_over_a_url(
    sample_resharded_ds: Path, copy_ds: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    root = copy_ds(sample_resharded_ds, "damaged")
    _swap_camera(root)
    # The cache checks what it fetches: the size, then the sha256 the index lists.
    with pytest.raises(
        DecodeError, match=rf"Invalid video .*{VIDEO} .*size \d+( or more)? after 3 downloads"
    ):
        for _ in EpisodeStream(f"file://{root}", shuffle=False, cache_dir=str(tmp_path / "cache")):
            pass


def test_an_edit_of_the_metadata_with_the_file_keeps_the_warning(
    sample_resharded_ds: Path,
    copy_ds: Callable[[Path, str], Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same swap with `meta/info.json` rewritten as an editor rewrites it: an edit, read as v3."""
    root = copy_ds(sample_resharded_ds, "edited")
    _swap_camera(root)
    info = root / "meta/info.json"
    info.write_text(info.read_text() + "\n")
    with caplog.at_level(logging.WARNING):
        assert Catalog.open(str(root)).kind == "v3"
    warnings = _stale_warnings(caplog)
    assert len(warnings) == 1 and f"{root}/meta/info.json has another sha256" in warnings[0], warnings
