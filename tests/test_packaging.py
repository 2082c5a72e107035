"""How lrs is installed: its distribution name, its command, and imports that hold in any directory."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from reshard.distribution import DISTRIBUTION


def _run_python(code: str, cwd: Path | None = None) -> None:
    """Run `code` in a fresh interpreter (in `cwd`); fail with its stderr unless it exits 0."""
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_distribution_is_lrs_lerobot_with_the_lrs_command() -> None:
    dist = metadata.distribution(DISTRIBUTION)
    assert dist.metadata["Name"] == "lrs-lerobot"
    assert {ep.name for ep in dist.entry_points if ep.group == "console_scripts"} == {"lrs"}
    done = subprocess.run(
        [Path(sys.executable).with_name("lrs"), "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith(f"lrs, version {dist.version}")


@pytest.mark.integration
def test_imports_hold_in_a_directory_with_cache_and_reader_folders(tmp_path: Path) -> None:
    """A node cache in ./cache (and any ./reader folder) must not shadow the packages: with setuptools'
    default editable finder, `from reader import EpisodeStream` failed there with an ImportError."""
    for name in ("cache/lrs1-abc", "reader/x", "reshard"):
        (tmp_path / name).mkdir(parents=True)
    _run_python(
        "from reader import EpisodeStream, DatasetMeta; from cache import NodeCache; import reshard.cli",
        tmp_path,
    )


def test_the_packages_load_their_exports_on_first_use() -> None:
    """`import reshard` and `import reader` (what `lrs --help` loads first) import none of their jobs
    or the stream until a name is used."""
    _run_python("""
import sys, reshard, reader
loaded = sorted(m for m in sys.modules if m.startswith(('reshard.', 'reader.')))
assert loaded == ['reader.errors'], loaded
from reshard import reshard as job, validate
assert callable(job) and callable(validate) and 'reshard.job.run' in sys.modules
""")


def test_the_torch_free_modules_stay_torch_free() -> None:
    """The Architecture page (docs/architecture.md) says which modules load without torch (the command
    line and `lrs prewarm --dry-run` start quickly because of it); and no command module imports another."""
    _run_python("""
import sys
import cache, cache.node, cache.ordered_fetch, cache.remote
import reader.format.v3, reader.format.index, reader.format.layout, reader.format.catalog
import reader.format.parquet, reader.plan.read_plan, reader.schedule, reader.plan.fetch, reader.metadata
import reader.plan.resume.state, reader.plan.resume.loader_math, reshard.cli
assert 'torch' not in sys.modules, 'torch was imported'
""")
    commands = Path(__file__).resolve().parent.parent / "reshard" / "cli"
    for module in commands.glob("*.py"):
        if module.stem == "__init__":
            continue  # the package adds every command to the group
        text = module.read_text()
        others = [
            m.stem for m in commands.glob("*.py") if m.stem not in ("__init__", "base", "types", module.stem)
        ]
        imported = [
            o for o in others if f"from reshard.cli.{o} import" in text or f"import reshard.cli.{o}" in text
        ]
        assert not imported, f"{module.name} imports {imported}"
