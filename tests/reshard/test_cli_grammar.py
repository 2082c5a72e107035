"""One grammar on the command line, checked over click's command tree: one name for the dataset argument,
the same spelling of an option wherever it applies, `--endpoint-url` wherever a URL is opened, help on
every option, and in each command's help an example that runs as it stands, offline (run here)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from reshard.cli import cli

# Commands whose first argument is not a dataset to read: sample writes one, demo, train and cache take none.
NO_DATASET = {"sample", "demo", "train", "cache"}
# Commands that read a dataset only on this machine's disk.
LOCAL_ONLY = {"push", "sample", "demo", "cache"}
# Each destination's one spelling, wherever a command has it.
SPELLINGS = {
    "as_json": ["--json"],
    "quiet": ["-q", "--quiet"],
    "cache_dir": ["--cache-dir"],
    "cache_max_bytes": ["--cache-max-bytes"],
    "workers": ["--workers"],
    "endpoint_url": ["--endpoint-url"],
    "dry_run": ["--dry-run"],
    "num_episodes": ["--num-episodes"],
    "out": ["--out"],
}
LRS = str(Path(sys.executable).with_name("lrs"))


def _commands() -> dict[str, click.Command]:
    return dict(sorted(cli.commands.items()))


def _example(command: click.Command) -> list[str]:
    lines = (command.epilog or "").splitlines()
    return [line.strip() for line in lines if line.strip().startswith("lrs ")]


@pytest.mark.parametrize("name", list(_commands()))
def test_one_name_for_the_dataset_argument(name: str) -> None:
    arguments = [p for p in _commands()[name].params if isinstance(p, click.Argument)]
    if name in NO_DATASET:
        return
    assert arguments[0].make_metavar(click.Context(_commands()[name])).strip("[]").rstrip(".") == "DATASET"


@pytest.mark.parametrize("name", list(_commands()))
def test_an_option_is_spelled_one_way_and_says_what_it_does(name: str) -> None:
    command = _commands()[name]
    for option in (p for p in command.params if isinstance(p, click.Option)):
        assert option.help, f"lrs {name} {option.opts[0]} has no help"
        if option.name in SPELLINGS:
            assert sorted(option.opts + option.secondary_opts) == sorted(SPELLINGS[option.name]), (
                name,
                option.opts,
            )
    names = {p.name for p in command.params}
    if name not in LOCAL_ONLY:
        assert "endpoint_url" in names or any(
            isinstance(p, click.Option) and p.opts == ["--endpoint-url"] for p in command.params
        ), f"lrs {name} opens a URL but has no --endpoint-url"


@pytest.mark.parametrize("name", list(_commands()))
def test_every_help_has_an_example(name: str) -> None:
    if name == "train":  # lerobot's flags: its example is in docs/lerobot-train.md, run by the lerobot tier
        return
    example = _example(_commands()[name])
    assert example and example[-1].startswith(f"lrs {name} "), (name, example)


@pytest.mark.integration
@pytest.mark.parametrize("name", [n for n in _commands() if n not in ("train", "demo")])
def test_each_helps_example_runs_offline(name: str, tmp_path: Path) -> None:
    """The lines of the help's example, run in an empty folder with the Hub unreachable: each exits 0.
    (`lrs demo`'s is `make demo`, which tests/test_e2e.py runs.)"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for line in _example(_commands()[name]):
        args = shlex.split(line)
        done = subprocess.run(
            [LRS, *args[1:], "-q"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
