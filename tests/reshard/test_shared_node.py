"""A node other users share: a cache or work directory another user made is refused in one line (exit 3)
before anything is read from it, a worker context is unpickled only if it is the file this job wrote,
and every published output file has one mode."""

from __future__ import annotations

import os
import pickle
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from reshard.cli import cli
from reshard.errors import ReshardError
from reshard.job.process_pool import _read_context, _write_context
from reshard.job.run import default_work_dir
from tests.servers import RangeServer

OTHER_UID = 4321
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another uid needs root")


def lrs(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*args, "--quiet"])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output.strip().splitlines()[-1] if result.output.strip() else ""


def others(path: Path) -> Path:
    """A directory as another user would leave it for us: theirs, open to all."""
    path.mkdir(parents=True)
    path.chmod(0o777)
    os.chown(path, OTHER_UID, OTHER_UID)
    return path


@as_root
def test_prewarm_refuses_a_cache_dir_of_another_user(sample_resharded_ds: Path, tmp_path: Path) -> None:
    shared = others(tmp_path / "shared")
    with RangeServer(sample_resharded_ds) as server:
        code, line = lrs("prewarm", server.url, "--cache-dir", str(shared), "--num-episodes", "1")
        assert not server.requests
    assert code == 3
    assert line.startswith(
        f"Error: Invalid cache directory ({shared}): owned by another user (owner uid 4321"
    )
    assert os.listdir(shared) == []


@as_root
def test_a_stream_refuses_a_cache_dir_of_another_user(sample_resharded_ds: Path, tmp_path: Path) -> None:
    from cache import TrustError
    from reader import EpisodeStream

    shared = others(tmp_path / "shared")
    with (
        RangeServer(sample_resharded_ds) as server,
        pytest.raises(TrustError, match=r"owned by another user"),
    ):
        next(iter(EpisodeStream(server.url, cache_dir=str(shared), shuffle=False)))
    assert os.listdir(shared) == []


@as_root
@pytest.mark.parametrize("workers", ["1", "2"])
def test_reshard_refuses_a_work_dir_of_another_user(sample_ds: Path, tmp_path: Path, workers: str) -> None:
    out = tmp_path / "out"
    work = others(default_work_dir(out))
    code, line = lrs("reshard", str(sample_ds), "--out", str(out), "--workers", workers)
    assert code == 3
    assert line.startswith(f"Error: Invalid work directory ({work}): owned by another user")
    assert os.listdir(work) == [] and not out.exists()


def test_a_replaced_worker_context_is_never_unpickled(tmp_path: Path) -> None:
    ran = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {ran}",))

    path, digest = _write_context({"episodes": [1, 2]}, tmp_path / "tmp")
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert pickle.loads(_read_context(path, digest)) == {"episodes": [1, 2]}
    path.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ReshardError, match=r"Invalid worker context .*: not the file this job wrote"):
        pickle.loads(_read_context(path, digest))
    assert not ran.exists()


def test_published_files_all_have_one_mode(sample_resharded_ds: Path) -> None:
    modes = {
        str(p.relative_to(sample_resharded_ds)): stat.S_IMODE(p.stat().st_mode)
        for p in sample_resharded_ds.rglob("*")
        if p.is_file()
    }
    assert any(k.endswith(".mp4") for k in modes)
    assert set(modes.values()) == {0o644}, modes


def test_a_link_out_of_a_source_is_a_defect_and_a_refusal(sample_ds: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(sample_ds, src)
    video = next(iter(sorted((src / "videos").rglob("*.mp4"))))
    outside = tmp_path / "elsewhere.mp4"
    video.rename(outside)
    video.symlink_to(outside)
    (src / "meta" / "inside.json").symlink_to(src / "meta" / "info.json")  # a link that stays inside is fine
    rel = video.relative_to(src)
    result = CliRunner().invoke(cli, ["doctor", str(src), "--quiet"])
    assert result.exit_code == 1, result.output
    assert (
        f"[files] {src / rel}: Invalid file (a symbolic link to {outside}, outside the dataset)"
        in result.output
    )
    assert "inside.json" not in result.output
    code, line = lrs("reshard", str(src), "--out", str(tmp_path / "out"))
    assert code == 3
    assert line.startswith(
        f"Error: {src / rel}: Invalid file (a symbolic link to {outside}, outside the dataset)"
    )
    assert not (tmp_path / "out").exists()


def group_writable(path: Path) -> Path:
    """A group's project directory (setgid 2775, not sticky): any member may rename what it holds."""
    path.mkdir(parents=True)
    path.chmod(0o2775)
    return path


def test_prewarm_refuses_a_cache_under_a_group_writable_parent(
    sample_resharded_ds: Path, tmp_path: Path
) -> None:
    group = group_writable(tmp_path / "projects" / "g")
    with RangeServer(sample_resharded_ds) as server:
        code, line = lrs("prewarm", server.url, "--cache-dir", str(group / "cache"), "--num-episodes", "1")
        assert not server.requests
    assert code == 3
    assert line.startswith(f"Error: Invalid cache directory ({group}/cache): its ancestor {group} (owner "), (
        line
    )
    assert "is writable by its group and not sticky" in line and "chmod g-w,o-w" in line
    assert os.listdir(group) == []


def test_reshard_refuses_a_work_dir_under_a_world_writable_grandparent(
    sample_ds: Path, tmp_path: Path
) -> None:
    scratch = tmp_path / "scratch"
    (scratch / "alice").mkdir(parents=True, mode=0o755)
    scratch.chmod(0o777)
    out = scratch / "alice" / "out"
    code, line = lrs("reshard", str(sample_ds), "--out", str(out))
    assert code == 3
    assert line.startswith(
        f"Error: Invalid work directory ({default_work_dir(out)}): its ancestor {scratch} "
    )
    assert os.listdir(scratch / "alice") == []
