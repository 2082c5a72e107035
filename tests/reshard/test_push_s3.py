"""`lrs push` to S3: moto in server mode on loopback, through s3fs, optionally behind a fault-injecting proxy."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import s3fs
from click.testing import CliRunner

import reshard.cli.push_command  # noqa: F401 - registers `lrs push`
from reader.format.index import LAYOUT_JSON
from reshard.cli import cli
from reshard.errors import PushError
from reshard.push.publish import publish_phase, push
from tests.reshard.push_fixtures import AWS_SECRET, TOKEN, expected_files
from tests.s3server import FaultProxy, moto_server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, endpoint: str, tmp_path: Path) -> str:
    """Dummy credentials and the moto endpoint in the standard AWS variables; no real AWS config."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    return endpoint


@pytest.fixture
def bucket(aws: str) -> str:
    name = f"lrs-{uuid.uuid4().hex[:12]}"
    _fs(aws).mkdir(name)
    return name


def _fs(endpoint: str) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)


def _objects(endpoint: str, root: str) -> dict[str, bytes]:
    fs = _fs(endpoint)
    return {name[len(root) + 1 :]: fs.cat_file(name) for name in fs.find(root)}


@pytest.mark.integration
def test_full_push_then_rerun_skips_everything(push_dataset: Path, aws: str) -> None:
    name = f"lrs-{uuid.uuid4().hex[:12]}"
    summary = push(push_dataset, f"s3://{name}/ds/v1", create=True, workers=4, quiet=True)
    expected = expected_files(push_dataset)
    assert _objects(aws, f"{name}/ds/v1") == expected
    assert len(summary.uploaded) == len(expected)

    again = push(push_dataset, f"s3://{name}/ds/v1", workers=4, quiet=True)
    assert again.uploaded == ()
    assert len(again.skipped) == len(expected)


@pytest.mark.integration
def test_same_size_other_content_is_reuploaded_by_md5_etag(push_dataset: Path, aws: str, bucket: str) -> None:
    push(push_dataset, f"s3://{bucket}/ds", quiet=True)
    rel = "meta/stats.json"
    tampered = bytes(b ^ 0xFF for b in expected_files(push_dataset)[rel])
    _fs(aws).pipe_file(f"{bucket}/ds/{rel}", tampered)

    summary = push(push_dataset, f"s3://{bucket}/ds", quiet=True)

    assert summary.uploaded == (rel,)
    assert _objects(aws, f"{bucket}/ds") == expected_files(push_dataset)


def test_missing_bucket_needs_create(push_dataset: Path, aws: str) -> None:
    url = f"s3://lrs-missing-{uuid.uuid4().hex[:8]}/ds"
    with pytest.raises(
        PushError, match=r"Invalid push target \(s3://lrs-missing-.*/ds\): the bucket does not exist"
    ):
        push(push_dataset, url, quiet=True)
    planned = push(push_dataset, url, dry_run=True, quiet=True)
    assert len(planned.uploaded) == len(expected_files(push_dataset))


def test_endpoint_url_option_overrides_environment(
    push_dataset: Path, aws: str, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    result = CliRunner().invoke(
        cli,
        ["push", str(push_dataset), f"s3://{bucket}/ds", "--endpoint-url", aws, "--quiet", "--workers", "3"],
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Uploaded {len(expected_files(push_dataset))} files")
    assert _objects(aws, f"{bucket}/ds") == expected_files(push_dataset)


@pytest.mark.integration
def test_every_command_that_opens_a_url_takes_endpoint_url(
    sample_resharded_ds: Path, aws: str, bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One endpoint rule: --endpoint-url on each command reads an s3:// dataset where AWS_ENDPOINT_URL
    points nowhere, and the variable is as it was afterwards (was: push and reshard only)."""
    pushed = CliRunner().invoke(cli, ["push", str(sample_resharded_ds), f"s3://{bucket}/ds", "-q"])
    assert pushed.exit_code == 0, pushed.output
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # read first by cache.remote
    url = f"s3://{bucket}/ds"
    for args in (
        ["describe", url],
        ["inspect", url, "--json"],
        ["doctor", url],
        ["verify", url],
        ["prewarm", url, "--cache-dir", str(tmp_path / "cache"), "--num-episodes", "1"],
        ["show", url, "--episode", "0", "--frames", "2", "--out", str(tmp_path / "show.png")],
    ):
        result = CliRunner().invoke(cli, [*args, "--endpoint-url", aws])
        assert result.exit_code == 0, (args, result.output)
        assert os.environ["AWS_ENDPOINT_URL"] == os.environ["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9"
    refused = CliRunner().invoke(cli, ["describe", url, "--endpoint-url", "127.0.0.1:9000"])
    assert refused.exit_code == 2 and "Expected an http:// or https:// URL" in refused.output, refused.output


@pytest.mark.integration
def test_publish_order_on_the_wire(push_dataset: Path, aws: str, bucket: str) -> None:
    with FaultProxy(aws) as proxy:
        push(push_dataset, f"s3://{bucket}/ds", endpoint_url=proxy.endpoint, workers=4, quiet=True)
    prefix = f"/{bucket}/ds/"
    puts = [
        path[len(prefix) :]
        for method, path, _ in proxy.requests
        if method == "PUT" and path.startswith(prefix)
    ]
    assert sorted(puts) == sorted(expected_files(push_dataset))
    phases = [publish_phase(rel) for rel in puts]
    assert phases == sorted(phases)
    assert puts[-1] == LAYOUT_JSON


@pytest.mark.integration
def test_injected_500s_are_survived(
    push_dataset: Path,
    aws: str,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # botocore would hide the faults behind its own retries; leave them to push's retry layer.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    with FaultProxy(aws, fail_fraction=0.3, seed=7) as proxy, caplog.at_level(logging.WARNING):
        summary = push(push_dataset, f"s3://{bucket}/ds", endpoint_url=proxy.endpoint, workers=3, quiet=True)
    assert proxy.injected >= 5
    assert any(status == 500 and method == "PUT" for method, _, status in proxy.requests)
    assert "retrying" in caplog.text
    assert AWS_SECRET not in caplog.text
    assert len(summary.uploaded) == len(expected_files(push_dataset))
    assert _objects(aws, f"{bucket}/ds") == expected_files(push_dataset)


_CHILD = """
import sys, threading
from reshard.push.publish import push

landed = 0

def progress(nbytes):
    global landed
    landed += 1
    print("landed", nbytes, flush=True)
    if landed == int(sys.argv[3]):
        threading.Event().wait()  # frozen mid-push until the test kills us

push(sys.argv[1], sys.argv[2], workers=1, quiet=True, progress=progress)
print("finished", flush=True)
"""


@pytest.mark.integration
def test_sigkill_mid_push_then_resume(push_dataset: Path, aws: str, bucket: str) -> None:
    url, landed = f"s3://{bucket}/ds", 3
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(push_dataset), url, str(landed)],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [child.stdout.readline() for _ in range(landed)]  # type: ignore[union-attr]
        assert all(line.startswith("landed") for line in lines), (lines, child.stderr.read())  # type: ignore[union-attr]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
    assert child.returncode == -signal.SIGKILL

    partial = _objects(aws, f"{bucket}/ds")
    assert len(partial) == landed
    assert all(publish_phase(rel) == 0 for rel in partial)

    summary = push(push_dataset, url, quiet=True)
    expected = expected_files(push_dataset)
    assert sorted(summary.skipped) == sorted(partial)
    assert sorted(summary.uploaded) == sorted(set(expected) - set(partial))
    assert _objects(aws, f"{bucket}/ds") == expected


@pytest.mark.integration
def test_failure_output_has_no_secrets(
    push_dataset: Path, aws: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with FaultProxy(aws, fail_fraction=1.0, max_failures=None) as proxy, caplog.at_level(logging.DEBUG):
        result = CliRunner().invoke(
            cli,
            [
                "push",
                str(push_dataset),
                "s3://lrs-any/ds",
                "--endpoint-url",
                proxy.endpoint,
                "--quiet",
                "--workers",
                "1",
            ],
        )
    assert result.exit_code == 3
    assert result.output.startswith("Error: Listing of s3://lrs-any/ds failed after 6 attempts")
    for secret in (AWS_SECRET, TOKEN):
        assert secret not in result.output
        assert secret not in caplog.text
