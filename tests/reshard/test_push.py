"""`lrs push` to local targets (a path, file://): plan, resume, publish order, checks, CLI, secrets."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import reshard.cli.push_command  # noqa: F401 - registers `lrs push`
from reader.format.index import FILES_INDEX, LAYOUT_JSON, FileEntry, files_to_table
from reshard.cli import cli
from reshard.errors import LayoutError, PushError
from reshard.push.publish import PushSummary, publish_phase, push
from reshard.push.target import PARTIAL_MARK, FsspecTarget
from tests.reshard.push_fixtures import TOKEN, all_files, copy_dataset, expected_files


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)


@pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
def test_push_uploads_every_indexed_file(push_dataset: Path, tmp_path: Path, as_url: bool) -> None:
    dest = tmp_path / "out"
    summary = push(push_dataset, f"file://{dest}" if as_url else str(dest), workers=3, quiet=True)
    expected = expected_files(push_dataset)
    assert all_files(dest) == expected
    assert sorted(summary.uploaded) == sorted(expected)
    assert summary.skipped == ()
    assert summary.uploaded_bytes == sum(len(v) for v in expected.values())
    assert not summary.dry_run
    assert summary.url == (f"file://{dest}" if as_url else str(dest))


def test_rerun_skips_everything(push_dataset: Path, tmp_path: Path) -> None:
    push(push_dataset, str(tmp_path / "out"), quiet=True)
    again = push(push_dataset, str(tmp_path / "out"), quiet=True)
    assert again.uploaded == ()
    assert sorted(again.skipped) == sorted(expected_files(push_dataset))
    assert again.skipped_bytes == sum(len(v) for v in expected_files(push_dataset).values())


def test_resume_uploads_only_missing_and_resized_files(push_dataset: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    expected = expected_files(push_dataset)
    landed = sorted(r for r in expected if r.startswith("videos/"))[:3]
    for rel in landed:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(expected[rel])
    truncated = "data/chunk-000/file-000.parquet"
    (dest / truncated).parent.mkdir(parents=True)
    (dest / truncated).write_bytes(expected[truncated][:100])
    leftover = dest / "data" / f"file-001.parquet{PARTIAL_MARK}dead"
    leftover.write_bytes(b"half")

    summary = push(push_dataset, str(dest), quiet=True)

    assert sorted(summary.skipped) == landed
    assert sorted(summary.uploaded) == sorted(set(expected) - set(landed))
    assert all_files(dest) == expected
    assert not leftover.exists()


def test_publish_order_data_then_meta_then_index_then_layout(
    push_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    upload = FsspecTarget.upload

    def recording(self: FsspecTarget, batch: list) -> None:
        with lock:
            events.append(("start", batch[0].rel))
        upload(self, batch)
        with lock:
            events.append(("end", batch[0].rel))

    monkeypatch.setattr(FsspecTarget, "upload", recording)
    push(push_dataset, str(tmp_path / "out"), workers=4, quiet=True)

    # A file of a later phase may start only when every file of earlier phases has ended.
    for i, (kind, rel) in enumerate(events):
        if kind == "start":
            earlier = {r for k, r in events if k == "start" and publish_phase(r) < publish_phase(rel)}
            ended = {r for k, r in events[:i] if k == "end"}
            assert earlier <= ended, rel
    assert events[-1] == ("end", LAYOUT_JSON)
    assert len(events) == 2 * len(expected_files(push_dataset))


@pytest.mark.parametrize(
    ("rel", "phase"),
    [
        ("data/chunk-000/file-000.parquet", 0),
        ("videos/cam/chunk-000/file-000.mp4", 0),
        ("meta/info.json", 1),
        ("meta/episodes/chunk-000/file-000.parquet", 1),
        ("meta/lrs/episodes.parquet", 2),
        (FILES_INDEX, 2),
        (LAYOUT_JSON, 3),
    ],
    ids=["data", "video", "info", "episodes-meta", "lrs-episodes", "lrs-files", "layout"],
)
def test_publish_phase(rel: str, phase: int) -> None:
    assert publish_phase(rel) == phase


def test_dry_run_uploads_nothing(push_dataset: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    push(push_dataset, str(dest), quiet=True)
    (dest / LAYOUT_JSON).unlink()
    summary = push(push_dataset, str(dest), dry_run=True, quiet=True)
    assert summary.dry_run
    assert summary.uploaded == (LAYOUT_JSON,)
    assert len(summary.skipped) == len(expected_files(push_dataset)) - 1
    assert not (dest / LAYOUT_JSON).exists()
    assert summary.describe().startswith("Would upload 1 files (300 B), skipped ")


def test_progress_callback_counts_uploaded_bytes(push_dataset: Path, tmp_path: Path) -> None:
    seen: list[int] = []
    summary = push(push_dataset, str(tmp_path / "out"), workers=2, quiet=True, progress=seen.append)
    assert sum(seen) == summary.uploaded_bytes
    assert len(seen) == len(summary.uploaded)


def _rewrite_index(root: Path, entries: list[FileEntry]) -> None:
    pq.write_table(files_to_table(entries), root / FILES_INDEX)


def _entries(root: Path) -> list[FileEntry]:
    return [FileEntry(**row) for row in pq.read_table(root / FILES_INDEX).to_pylist()]


def _drop_index(root: Path) -> None:
    (root / FILES_INDEX).unlink()


def _drop_video(root: Path) -> None:
    (root / "videos/observation.images.wrist/chunk-000/file-001.mp4").unlink()


def _grow_data(root: Path) -> None:
    with (root / "data/chunk-000/file-000.parquet").open("ab") as handle:
        handle.write(b"x")


def _escape(root: Path) -> None:
    _rewrite_index(root, [*_entries(root), FileEntry("../secret.txt", 1, "0" * 64, "meta")])


def _garbage_index(root: Path) -> None:
    (root / FILES_INDEX).write_bytes(b"not parquet")


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (_drop_index, r"Invalid dataset directory \(.*\): no meta/lrs/files\.parquet\. Expected an lrs/1"),
        (_drop_video, r"videos/observation\.images\.wrist/chunk-000/file-001\.mp4 is missing"),
        (_grow_data, r"Invalid file size \(3001 bytes\) of data/chunk-000/file-000\.parquet\. Expected 3000"),
        (_escape, r"Invalid path \('\.\./secret\.txt'\)\. Expected a unique relative path"),
        (_garbage_index, r"files\.parquet: Invalid files index \(.*\)\. Expected a parquet table"),
    ],
    ids=["no-index", "missing-file", "size-mismatch", "path-escape", "garbage-index"],
)
def test_source_is_validated_before_any_upload(
    push_dataset: Path, tmp_path: Path, damage, match: str
) -> None:
    source = copy_dataset(push_dataset, tmp_path / "src")
    damage(source)
    with pytest.raises(LayoutError, match=match):
        push(source, str(tmp_path / "out"), quiet=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rel", ["videos/observation.images.wrist/chunk-000/file-001.mp4", "meta/info.json"])
def test_a_file_changed_after_reshard_is_refused_and_nothing_published(
    push_dataset: Path, tmp_path: Path, rel: str
) -> None:
    """One byte flipped, same size: the sizes agree, only the index's sha256 tells."""
    source = copy_dataset(push_dataset, tmp_path / "src")
    data = bytearray((source / rel).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (source / rel).write_bytes(bytes(data))
    result = _invoke(str(source), str(tmp_path / "out"), "--quiet", "--workers", "2")
    assert result.exit_code == 3, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert f"Invalid content of {rel} (sha256 " in lines[0] and "Nothing was published" in lines[0]
    landed = all_files(tmp_path / "out") if (tmp_path / "out").exists() else {}
    assert rel not in landed
    assert not any(r.startswith("meta/lrs/") for r in landed)
    # Repaired, the same push completes and a rerun is a no-op.
    shutil.copy(push_dataset / rel, source / rel)
    assert _invoke(str(source), str(tmp_path / "out"), "--quiet").exit_code == 0
    assert all_files(tmp_path / "out") == expected_files(push_dataset)


@pytest.mark.parametrize(
    ("url", "endpoint", "match"),
    [
        (
            "https://example.com/ds",
            None,
            r"Invalid push target \(https://example\.com/ds\)\. Expected a writable",
        ),
        (
            "hf://datasets/me/ds",
            None,
            r"Invalid push target \(hf://datasets/me/ds\)\. Expected hf://buckets/",
        ),
        ("hf://buckets/only-owner", None, r"Invalid bucket URL \(hf://buckets/only-owner\)\. Expected hf://"),
        ("SOURCE", None, r"Invalid push target \(.*\)\. Expected a place outside the source directory"),
        (
            "INSIDE",
            None,
            r"Invalid push target \(file://.*/sub\)\. Expected a place outside the source directory",
        ),
        (
            "OUT",
            "http://127.0.0.1:1",
            r"Invalid --endpoint-url \(http://127\.0\.0\.1:1\)\. Expected no endpoint",
        ),
    ],
    ids=[
        "http",
        "hf-dataset-repo",
        "hf-bucket-no-name",
        "onto-source",
        "inside-source",
        "endpoint-for-local",
    ],
)
def test_invalid_targets(
    push_dataset: Path, tmp_path: Path, url: str, endpoint: str | None, match: str
) -> None:
    url = {
        "SOURCE": str(push_dataset),
        "INSIDE": f"file://{push_dataset}/sub",
        "OUT": str(tmp_path / "out"),
    }.get(url, url)
    with pytest.raises(PushError, match=match):
        push(push_dataset, url, endpoint_url=endpoint, quiet=True)
    assert not (push_dataset / "sub").exists()


def test_bare_path_that_looks_like_a_repo_id_is_a_directory(
    push_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    push(push_dataset, "owner/name", quiet=True)
    assert all_files(tmp_path / "owner" / "name") == expected_files(push_dataset)


def test_invalid_workers(push_dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Invalid workers \(0\)\. Expected an integer >= 1\."):
        push(push_dataset, str(tmp_path / "out"), workers=0)


def test_remote_that_drops_a_file_fails_the_check(
    push_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload = FsspecTarget.upload

    def lossy(self: FsspecTarget, batch: list) -> None:
        if batch[0].rel != "meta/stats.json":
            upload(self, batch)

    monkeypatch.setattr(FsspecTarget, "upload", lossy)
    with pytest.raises(
        PushError, match=r"Invalid remote file \(.*/out/meta/stats\.json\): missing after upload"
    ):
        push(push_dataset, str(tmp_path / "out"), quiet=True)


def test_transient_errors_are_retried_and_logged_without_secrets(
    push_dataset: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    secrets: None,
) -> None:
    upload = FsspecTarget.upload
    failed: set[str] = set()

    def flaky(self: FsspecTarget, batch: list) -> None:
        if batch[0].rel not in failed and len(failed) < 3:
            failed.add(batch[0].rel)
            raise ConnectionResetError(f"connection reset, Authorization: Bearer {TOKEN}")
        upload(self, batch)

    monkeypatch.setattr(FsspecTarget, "upload", flaky)
    with caplog.at_level(logging.DEBUG):
        summary = push(push_dataset, str(tmp_path / "out"), workers=2, quiet=True)
    assert all_files(tmp_path / "out") == expected_files(push_dataset)
    assert len(summary.uploaded) == len(expected_files(push_dataset))
    assert caplog.text.count("retrying") == 3
    assert "<redacted>" in caplog.text
    assert TOKEN not in caplog.text


def test_permanent_upload_error_stops_before_meta_without_secrets(
    push_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secrets: None
) -> None:
    upload = FsspecTarget.upload

    def forbidden(self: FsspecTarget, batch: list) -> None:
        if batch[0].rel == "data/chunk-000/file-001.parquet":
            raise ValueError(f"refused for token={TOKEN}")
        upload(self, batch)

    monkeypatch.setattr(FsspecTarget, "upload", forbidden)
    with pytest.raises(
        PushError, match=r"^Upload of .*/data/chunk-000/file-001\.parquet failed: ValueError"
    ) as info:
        push(push_dataset, str(tmp_path / "out"), workers=2, quiet=True)
    assert TOKEN not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert not any(rel.startswith("meta/") for rel in all_files(tmp_path / "out"))


def _invoke(*args: str) -> object:
    return CliRunner().invoke(cli, ["push", *args], catch_exceptions=False)


def test_cli_push_prints_summary(push_dataset: Path, tmp_path: Path) -> None:
    result = _invoke(str(push_dataset), str(tmp_path / "out"), "--workers", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith(f"Uploaded {len(expected_files(push_dataset))} files (2")
    )
    assert all_files(tmp_path / "out") == expected_files(push_dataset)


def test_cli_dry_run_lists_uploads_and_skips(push_dataset: Path, tmp_path: Path) -> None:
    push(push_dataset, str(tmp_path / "out"), quiet=True)
    (tmp_path / "out" / "meta/info.json").unlink()
    result = _invoke(str(push_dataset), str(tmp_path / "out"), "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "upload meta/info.json"
    assert "skip   data/chunk-000/file-000.parquet" in lines
    assert lines[-1].startswith("Would upload 1 files (700 B), skipped ")
    assert not (tmp_path / "out" / "meta/info.json").exists()


def test_cli_progress_bar_runs(push_dataset: Path, tmp_path: Path) -> None:
    result = _invoke(str(push_dataset), str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "push: 100%" in result.output


def test_cli_failure_is_one_line_without_secrets(
    push_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secrets: None
) -> None:
    def leaky(self: FsspecTarget, batch: list) -> None:
        raise PermissionError(f"denied: Authorization: Bearer {TOKEN}")

    monkeypatch.setattr(FsspecTarget, "upload", leaky)
    result = _invoke(str(push_dataset), str(tmp_path / "out"), "--quiet")
    assert result.exit_code == 3
    assert result.output.startswith("Error: Upload of ")
    assert "PermissionError" in result.output
    assert TOKEN not in result.output


def test_cli_help_documents_every_option() -> None:
    result = CliRunner().invoke(cli, ["push", "--help"])
    assert result.exit_code == 0
    for option in ("--create", "--endpoint-url", "--workers", "--dry-run", "--quiet"):
        assert option in result.output
    assert "[default: 8" in result.output


def test_summary_repr_is_short() -> None:
    summary = PushSummary("s3://b/p", ("a",) * 1000, (), 10, 0, 1.25)
    assert (
        repr(summary)
        == "PushSummary('s3://b/p', uploaded=1000, skipped=0, bytes=10, seconds=1.2, dry_run=False)"
    )


class _NoHashTarget(FsspecTarget):
    """A store that lists sizes only (no content hash), as plain fsspec stores do."""

    def same_content(self, local: object, remote: object) -> None:
        return None


def test_a_same_sized_file_is_skipped_only_where_the_published_index_vouches(tmp_path: Path) -> None:
    from cache.remote import resolve
    from reshard.push.publish import plan_push
    from reshard.push.target import LocalFile, RemoteFile

    local = tmp_path / "f"
    local.write_bytes(b"v2")
    files = [LocalFile(rel, local, 2, "sha-v2") for rel in ("a", "b", "c")]
    remote = {rel: RemoteFile(2) for rel in ("a", "b", "c")}
    target = _NoHashTarget(resolve(str(tmp_path)))
    upload, skip = plan_push(files, remote, target, workers=2, published={"a": "sha-v2", "b": "sha-v1"})
    assert [f.rel for f in skip] == ["a"]  # the index of what is published there says it is ours
    assert sorted(f.rel for f in upload) == ["b", "c"]  # another version, or nothing says
