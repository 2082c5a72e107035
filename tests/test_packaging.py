"""How lrs is installed: its distribution name, its command, and imports that hold in any directory."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from reshard import DISTRIBUTION


def test_the_distribution_is_lrs_lerobot_with_the_lrs_command() -> None:
    dist = metadata.distribution(DISTRIBUTION)
    assert dist.metadata["Name"] == "lrs-lerobot"
    assert {ep.name for ep in dist.entry_points if ep.group == "console_scripts"} == {"lrs"}
    done = subprocess.run(
        [Path(sys.executable).with_name("lrs"), "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith(f"lrs, version {dist.version}")


def test_imports_hold_in_a_directory_with_cache_and_reader_folders(tmp_path: Path) -> None:
    """A node cache in ./cache (and any ./reader folder) must not shadow the packages: with setuptools'
    default editable finder, `from reader import EpisodeStream` failed there with an ImportError."""
    for name in ("cache/lrs1-abc", "reader/x", "reshard"):
        (tmp_path / name).mkdir(parents=True)
    code = "from reader import EpisodeStream, DatasetMeta; from cache import NodeCache; import reshard.cli"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
