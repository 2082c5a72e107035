"""`lrs push` to `hf://buckets/...`, with huggingface_hub's bucket calls replaced at the HfApi boundary.

`FakeHub` stands in for the Hub behind `HfApi.create_bucket`, `list_bucket_tree` and
`batch_bucket_files`: every call is first bound to the real method's signature (so a call the real API
would reject fails here too), then applied to an in-memory bucket that keeps size and xet hash, the
latter computed by `hf_xet` exactly as the Hub would.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner
from hf_xet import hash_files
from huggingface_hub import BucketFile, BucketFolder, HfApi
from huggingface_hub.errors import BucketBatchError, BucketNotFoundError, HfHubHTTPError
from huggingface_hub.utils import are_progress_bars_disabled

import reshard.cli.push_command  # noqa: F401 - registers `lrs push`
from reader.format.index import LAYOUT_JSON
from reshard.cli import cli
from reshard.errors import PushError
from reshard.push import hf as push_hf
from reshard.push.publish import publish_phase, push
from tests.reshard.push_fixtures import TOKEN, expected_files

BUCKET = "owner/bkt"


def _http_error(status: int, message: str, cls: type[HfHubHTTPError] = HfHubHTTPError) -> HfHubHTTPError:
    request = httpx2.Request("POST", f"https://huggingface.co/api/buckets/{BUCKET}/batch")
    return cls(message, response=httpx2.Response(status, request=request))


class FakeHub:
    """An in-memory Hub with buckets: path -> (size, xet hash); records every call it gets."""

    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, tuple[int, str]]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.endpoints: list[str] = []
        self.faults: list[Callable[[int], BaseException | None]] = []
        self._lock = threading.Lock()
        self._batches = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
        for name in ("create_bucket", "list_bucket_tree", "batch_bucket_files"):
            monkeypatch.setattr(HfApi, name, self._bound(name, getattr(HfApi, name)))
        return self

    def _bound(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(real)

        def method(api: HfApi, *args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(api, *args, **kwargs)
            with self._lock:
                self.endpoints.append(api.endpoint)
            return getattr(self, name)(**{k: v for k, v in bound.arguments.items() if k != "self"})

        return method

    def create_bucket(self, bucket_id: str, exist_ok: bool = False, **_: Any) -> None:
        with self._lock:
            self.calls.append(("create_bucket", (bucket_id, exist_ok)))
            self.buckets.setdefault(bucket_id, {})

    def list_bucket_tree(
        self, bucket_id: str, prefix: str | None = None, recursive: bool | None = None, **_: Any
    ):
        with self._lock:
            self.calls.append(("list_bucket_tree", (bucket_id, prefix, recursive)))
            if bucket_id not in self.buckets:
                raise _http_error(404, "404 Client Error. Bucket Not Found", BucketNotFoundError)
            files = sorted(self.buckets[bucket_id].items())
        folders = {p.rsplit("/", 1)[0] for p, _ in files if "/" in p}
        items: list[BucketFile | BucketFolder] = [
            BucketFolder(type="directory", path=p) for p in sorted(folders)
        ]
        items += [BucketFile(type="file", path=p, size=s, xetHash=h) for p, (s, h) in files]
        return iter([i for i in items if prefix is None or i.path.startswith(prefix)])

    def batch_bucket_files(
        self, bucket_id: str, add: list[tuple[str, str]] | None = None, **rest: Any
    ) -> None:
        assert rest.get("copy") is None and rest.get("delete") is None
        with self._lock:
            number, self._batches = self._batches, self._batches + 1
            self.calls.append(("batch_bucket_files", [dest for _, dest in add or []]))
            for fault in self.faults:
                if (error := fault(number)) is not None:
                    raise error
        hashed = hash_files([src for src, _ in add or []])
        with self._lock:
            for (_, dest), info in zip(add or [], hashed, strict=True):
                self.buckets[bucket_id][dest] = (info.file_size, info.hash)

    def batches(self) -> list[list[str]]:
        return [arg for name, arg in self.calls if name == "batch_bucket_files"]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(push_hf, "BATCH_MAX_FILES", 4)
    monkeypatch.setattr(push_hf, "BATCH_MAX_BYTES", 10_000)
    return FakeHub().install(monkeypatch)


def _xet(push_dataset: Path, rel: str) -> tuple[int, str]:
    info = hash_files([str(push_dataset / rel)])[0]
    return info.file_size, info.hash


def test_push_sends_bounded_batches_in_publish_order(push_dataset: Path, hub: FakeHub) -> None:
    summary = push(push_dataset, f"hf://buckets/{BUCKET}/ds/v1", create=True, workers=1, quiet=True)

    expected = expected_files(push_dataset)
    assert hub.calls[0] == ("create_bucket", (BUCKET, True))
    assert hub.calls[1] == ("list_bucket_tree", (BUCKET, "ds/v1", True))
    assert hub.calls[-1] == ("list_bucket_tree", (BUCKET, "ds/v1", True))
    batches = hub.batches()
    sent = [dest.removeprefix("ds/v1/") for batch in batches for dest in batch]
    assert sent == list(summary.uploaded)
    assert sorted(sent) == sorted(expected)
    assert all(dest.startswith("ds/v1/") for batch in batches for dest in batch)
    for batch in batches:
        rels = [dest.removeprefix("ds/v1/") for dest in batch]
        assert len(rels) <= 4
        assert len(rels) == 1 or sum(len(expected[r]) for r in rels) <= 10_000
        assert len({publish_phase(r) for r in rels}) == 1, "a batch never straddles publish phases"
    phases = [publish_phase(r) for r in sent]
    assert phases == sorted(phases)
    assert batches[-1] == [f"ds/v1/{LAYOUT_JSON}"]
    assert hub.buckets[BUCKET] == {f"ds/v1/{rel}": _xet(push_dataset, rel) for rel in expected}
    assert not are_progress_bars_disabled()


def test_resume_skips_files_with_same_size_and_xet_hash(push_dataset: Path, hub: FakeHub) -> None:
    expected = expected_files(push_dataset)
    same = ["data/chunk-000/file-000.parquet", "videos/observation.images.front/chunk-000/file-000.mp4"]
    same_size_other_hash = "meta/info.json"
    other_size = "data/chunk-000/file-001.parquet"
    hub.buckets[BUCKET] = {rel: _xet(push_dataset, rel) for rel in same}
    hub.buckets[BUCKET][same_size_other_hash] = (len(expected[same_size_other_hash]), "0" * 64)
    hub.buckets[BUCKET][other_size] = (7, _xet(push_dataset, other_size)[1])

    summary = push(push_dataset, f"hf://buckets/{BUCKET}", workers=2, quiet=True)

    assert sorted(summary.skipped) == sorted(same)
    assert sorted(summary.uploaded) == sorted(set(expected) - set(same))
    assert hub.calls[0] == ("list_bucket_tree", (BUCKET, None, True))
    assert hub.buckets[BUCKET] == {rel: _xet(push_dataset, rel) for rel in expected}


def test_interrupted_push_publishes_no_meta_and_rerun_sends_the_rest(
    push_dataset: Path, hub: FakeHub
) -> None:
    hub.buckets[BUCKET] = {}
    hub.faults.append(lambda n: _http_error(403, "403 Forbidden") if n == 2 else None)
    with pytest.raises(
        PushError, match=r"^Upload of hf://buckets/owner/bkt/.* failed: .*\(HTTP 403\).*HF_TOKEN"
    ):
        push(push_dataset, f"hf://buckets/{BUCKET}", workers=1, quiet=True)
    landed = set(hub.buckets[BUCKET])
    # Batches 0 and 1 landed; one already queued may slip through before the cancel, no meta ever.
    assert len(landed) >= 3
    assert all(publish_phase(rel) == 0 for rel in landed)

    hub.faults.clear()
    hub.calls.clear()
    summary = push(push_dataset, f"hf://buckets/{BUCKET}", workers=1, quiet=True)

    sent = {dest for batch in hub.batches() for dest in batch}
    assert sent == set(expected_files(push_dataset)) - landed
    assert set(summary.skipped) == landed


def test_transient_hub_errors_are_retried(
    push_dataset: Path, hub: FakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    hub.buckets[BUCKET] = {}
    hub.faults.append(
        lambda n: _http_error(503, f"503 Service Unavailable token={TOKEN}") if n in (0, 3) else None
    )
    with caplog.at_level(logging.DEBUG):
        summary = push(push_dataset, f"hf://buckets/{BUCKET}", workers=2, quiet=True)
    assert len(summary.uploaded) == len(expected_files(push_dataset))
    assert caplog.text.count("retrying") == 2
    assert TOKEN not in caplog.text


def test_partial_batch_failure_names_the_file(push_dataset: Path, hub: FakeHub) -> None:
    hub.buckets[BUCKET] = {}

    def partial(n: int) -> BaseException | None:
        error = _http_error(200, "Some operations failed:\n  - meta/info.json: invalid", BucketBatchError)
        error.failures = [{"path": "meta/info.json", "error": "invalid"}]
        return error if n == 5 else None

    hub.faults.append(partial)
    with pytest.raises(PushError, match=r"failed: BucketBatchError \(HTTP 200\): Some operations failed"):
        push(push_dataset, f"hf://buckets/{BUCKET}", workers=1, quiet=True)


def test_missing_bucket_without_create(push_dataset: Path, hub: FakeHub) -> None:
    with pytest.raises(
        PushError, match=r"Invalid push target \(hf://buckets/owner/bkt\): the bucket does not exist"
    ):
        push(push_dataset, f"hf://buckets/{BUCKET}", quiet=True)
    planned = push(push_dataset, f"hf://buckets/{BUCKET}", dry_run=True, create=True, quiet=True)
    assert len(planned.uploaded) == len(expected_files(push_dataset))
    assert [name for name, _ in hub.calls] == ["list_bucket_tree", "list_bucket_tree"]


def test_endpoint_url_reaches_hfapi(push_dataset: Path, hub: FakeHub) -> None:
    push(push_dataset, f"hf://buckets/{BUCKET}", create=True, endpoint_url="http://127.0.0.1:1", quiet=True)
    assert set(hub.endpoints) == {"http://127.0.0.1:1"}


def test_cli_failure_hides_the_token(
    push_dataset: Path, hub: FakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    hub.buckets[BUCKET] = {}
    hub.faults.append(lambda n: _http_error(401, f"401 Unauthorized: invalid token {TOKEN} (Bearer {TOKEN})"))
    with caplog.at_level(logging.DEBUG):
        result = CliRunner().invoke(cli, ["push", str(push_dataset), f"hf://buckets/{BUCKET}/ds", "--quiet"])
    assert result.exit_code == 3
    assert "HTTP 401" in result.output and "HF_TOKEN or `hf auth login`" in result.output
    assert TOKEN not in result.output
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("hf://buckets/o/b", "o/b", ""),
        ("hf://buckets/o/b/", "o/b", ""),
        ("hf://buckets/o/b/x/y", "o/b", "x/y"),
    ],
    ids=["root", "trailing-slash", "prefix"],
)
def test_parse_bucket_url(url: str, bucket: str, prefix: str) -> None:
    assert push_hf.parse_bucket_url(url) == (bucket, prefix)


@pytest.mark.parametrize(
    "url", ["hf://buckets/o", "hf://buckets/o/b/../c", "s3://o/b"], ids=["no-name", "dotdot", "s3"]
)
def test_parse_bucket_url_rejects(url: str) -> None:
    with pytest.raises(ValueError, match=r"Invalid bucket URL \(.*\)\. Expected hf://buckets/<owner>/<name>"):
        push_hf.parse_bucket_url(url)


def test_hub_retries_print_one_line_each_through_lrs_logging() -> None:
    """huggingface_hub's own retry loop (the real `http_backoff`, against a closed port): one line per
    retry, not the hub's two lines twice (its own handler and lrs's)."""
    import subprocess
    import sys

    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')\n"
        "from reshard.cli.push_command import _one_line_per_hub_warning\n"
        "_one_line_per_hub_warning()\n"
        "from huggingface_hub.utils import http_backoff\n"
        "try:\n"
        "    http_backoff('GET', 'http://127.0.0.1:1/api/x', max_retries=3, base_wait_time=0.01, max_wait_time=0.01)\n"
        "except Exception as exc:\n"
        "    print('failed', type(exc).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().startswith("failed"), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3, done.stderr
    for k, line in enumerate(lines, 1):
        assert "thrown while requesting GET http://127.0.0.1:1/api/x; retrying in" in line
        assert line.endswith(f"[Retry {k}/3].")


def test_lrs_adds_one_try_to_the_hubs_own_retries(
    push_dataset: Path, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload that keeps failing with 503 is tried twice by lrs (the hub's client retried each try)."""
    monkeypatch.setattr(push_hf, "HUB_RETRY", push_hf.RetryPolicy(attempts=2, base_delay_s=0, max_delay_s=0))
    failures = [0]

    def always_503(_: int) -> BaseException:
        failures[0] += 1
        return _http_error(503, "unavailable")

    hub.faults.append(always_503)
    with pytest.raises(PushError, match="after 2 attempts"):
        push(push_dataset, f"hf://buckets/{BUCKET}", workers=1, create=True, quiet=True)
    tries = Counter(tuple(dests) for dests in hub.batches())
    assert max(tries.values()) == 2 and failures[0] == sum(tries.values())
