"""docs/multi-node.md shows the SLURM recipes as they are: each file of scripts/slurm/ that a user copies
is a ```shell block of the page, character for character (the tests submit the files)."""

from __future__ import annotations

import re

import pytest

from tests.support.slurm_cluster import ROOT

PAGE = ROOT / "docs" / "multi-node.md"


@pytest.mark.parametrize("name", ["reshard.sbatch", "prewarm_node.sh", "train.sbatch"])
def test_the_page_shows_the_recipe_as_it_is(name: str) -> None:
    shown = re.findall(r"^```shell\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert (ROOT / "scripts" / "slurm" / name).read_text() in shown
