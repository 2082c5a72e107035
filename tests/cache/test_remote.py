"""`Remote.cat_many`: small files read concurrently, unreadable ones left for the caller; and the catalog
reading its metadata that way (one round-trip to a remote instead of five)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cache.remote import resolve
from reader.catalog import Catalog
from reshard.run import reshard
from reshard.sample import write_sample
from tests.servers import Faults, RangeServer


@pytest.fixture(scope="module")
def lrs_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = write_sample(tmp_path_factory.mktemp("remote") / "src", episodes=3, cameras=1)
    out = tmp_path_factory.mktemp("remote") / "lrs"
    reshard(str(src), out, quiet=True)
    return out


WANTED = ["meta/info.json", "meta/lrs/layout.json", "meta/missing.json", "meta/tasks.parquet"]


def _expected(root: Path) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in WANTED if (root / rel).exists()}


def test_cat_many_reads_what_exists_and_leaves_out_the_rest(lrs_ds: Path) -> None:
    got = resolve(str(lrs_ds)).cat_many(WANTED)
    assert got == _expected(lrs_ds)
    assert "meta/missing.json" not in got
    assert resolve(str(lrs_ds)).cat_many([]) == {}


def test_cat_many_over_http_is_concurrent_and_retries_failures(lrs_ds: Path) -> None:
    faults = Faults(latency_s=0.2, fail_rate=0.3, seed=3)
    with RangeServer(lrs_ds, faults=faults) as server:
        got = resolve(server.url).cat_many(WANTED)
        assert got == _expected(lrs_ds)
        assert server.max_in_flight >= 3
        assert any(r.status == 500 for r in server.requests), "no fault injected: the retry path was not run"


def test_catalog_reads_its_metadata_in_one_round(lrs_ds: Path) -> None:
    with RangeServer(lrs_ds, faults=Faults(latency_s=0.2)) as server:
        catalog = Catalog.open(server.url)
        assert catalog.kind == "lrs/1" and len(catalog.episodes) == 3
        assert server.max_in_flight >= 4  # layout.json, info.json, the two index tables, tasks


def test_catalog_of_a_plain_v3_dataset_still_opens_over_http(lrs_ds: Path, tmp_path: Path) -> None:
    src = write_sample(tmp_path / "v3", episodes=2, cameras=1)
    with RangeServer(src) as server:
        catalog = Catalog.open(server.url)
    assert catalog.kind == "v3" and len(catalog.episodes) == 2
