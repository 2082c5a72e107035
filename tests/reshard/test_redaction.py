"""A URL's user:password@ and a token query parameter never reach output, logs or written files: error
messages, warnings, `layout.json`, `dropped.json`, and the doctor and verify reports (`options.json` in
the work directory is checked by `scripts/fault_suite.py --only tokens`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from cache.remote import redact, resolve
from reshard.cli import cli
from tests.servers import RangeServer

PASSWORD = "PlantedPassw0rd42"
QUERY_TOKEN = "PlantedQueryToken42"


def _with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://lrs:{PASSWORD}@")


def _files_text(root: Path) -> str:
    return "".join(
        p.read_text(errors="replace") for p in root.rglob("*") if p.is_file() and p.suffix == ".json"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"http://lrs:{PASSWORD}@host:1/ds/meta/info.json", "http://<redacted>@host:1/ds/meta/info.json"),
        ("https://ghp_abc@github.com/x", "https://<redacted>@github.com/x"),
        (f"http://host/ds?token={QUERY_TOKEN}", "http://host/ds?<redacted>"),
        ("s3://bucket/x and a@b.c", "s3://bucket/x and a@b.c"),
    ],
    ids=["user-password", "user-token", "query-token", "nothing-secret"],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_display_redacts_the_url() -> None:
    assert PASSWORD not in resolve(f"http://lrs:{PASSWORD}@127.0.0.1:9/ds").display("meta/info.json")


def test_display_puts_the_path_before_a_query_that_redaction_removes() -> None:
    shown = resolve(f"http://127.0.0.1:9/ds?token={QUERY_TOKEN}").display("meta/info.json")
    assert shown == "http://127.0.0.1:9/ds/meta/info.json?<redacted>", shown


def test_reshard_doctor_and_verify_write_no_password(
    sample_ds: Path, copy_ds: Callable[[Path], Path], tmp_path: Path
) -> None:
    src = copy_ds(sample_ds, "src")
    (src / "videos/observation.images.cam1/chunk-000/file-001.mp4").write_bytes(b"")  # episodes 3-5 dropped
    out = tmp_path / "out"
    runner = CliRunner()
    with RangeServer(src) as server:
        url = _with_userinfo(server.url)
        missing = runner.invoke(
            cli, ["reshard", f"{url}/nothing?token={QUERY_TOKEN}", "--out", str(out), "-q"]
        )
        done = runner.invoke(cli, ["reshard", url, "--out", str(out), "-q", "--skip-defective"])
        doctor = runner.invoke(cli, ["doctor", url, "--json"])
        verify = runner.invoke(cli, ["verify", str(out), "--against", url, "--json"])
    assert missing.exit_code == 3 and "meta/info.json" in missing.output, missing.output
    assert done.exit_code == 0 and doctor.exit_code == 1 and verify.exit_code == 0, (
        done.output,
        verify.output,
    )
    assert json.loads((out / "meta/lrs/dropped.json").read_text())  # where the defects' files are named
    for text in (missing.output, done.output, doctor.output, verify.output, _files_text(out)):
        assert PASSWORD not in text and QUERY_TOKEN not in text
    assert "<redacted>@127.0.0.1" in doctor.output
