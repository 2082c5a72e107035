"""One rule for every URL lrs shows or saves: its userinfo becomes `<redacted>@` and its whole query
`?<redacted>` (`cache.redaction`). Checked for a `user:password@` and for a query of signed-URL and key
parameters in what commands print (describe, inspect, doctor, reshard, prewarm), in written files
(`layout.json`, `dropped.json`, the reports, the node cache), in errors, log lines, reprs and the read spec
a training job saves, which `lrs prewarm --spec FILE URL` completes with the URL given again. (`options.json`
in the work directory is also checked by `scripts/faults/suite.py --only tokens`.)"""

from __future__ import annotations

import dataclasses
import json
import logging
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cache.backoff import RetryPolicy
from cache.errors import FetchError
from cache.redaction import redact, scrub_exception, scrubbed_iter
from cache.remote import resolve
from reader.errors import DatasetError
from reader.metadata import DatasetMeta
from reader.plan.spec import ReadSpec
from reader.stream import EpisodeStream
from reshard.cli import cli
from reshard.preview.episode_view import read_episode_view
from tests.servers import RangeServer

PASSWORD = "PlantedPassw0rd42"
QUERY_TOKEN = "PlantedQueryToken42"
SIG, API_KEY, GOOG_SIGNATURE = "PlantedSig42", "PlantedApiKey42", "PlantedGoogSignature42"
QUERY = f"sig={SIG}&api_key={API_KEY}&X-Goog-Signature={GOOG_SIGNATURE}&token={QUERY_TOKEN}"
# Per way of putting credentials in a URL: the secrets, and how the URL's start reads once redacted.
SECRETS = {
    "userinfo": (PASSWORD,),
    "quote": (PASSWORD,),
    "query": (SIG, API_KEY, GOOG_SIGNATURE, QUERY_TOKEN),
}
SHOWN = {
    "userinfo": "http://<redacted>@127.0.0.1:",
    "quote": "http://<redacted>@127.0.0.1:",
    "query": "?<redacted>",
}


def _with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://lrs:{PASSWORD}@")


def _credentialed(url: str, kind: str) -> str:
    """`url` with credentials of `kind`: a `user:password@`, one whose password holds a quote (a legal
    userinfo that a regex stopping at quotes missed), or a query of secrets."""
    if kind == "quote":
        return url.replace("http://", f"http://alice:it's-{PASSWORD}@")
    return _with_userinfo(url) if kind == "userinfo" else f"{url}?{QUERY}"


def _assert_clean(kind: str, **texts: str) -> None:
    for name, text in texts.items():
        for secret in SECRETS[kind]:
            assert secret not in text, (name, text)


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
        (f"https://host/ds?{QUERY}", "https://host/ds?<redacted>"),
        ("https://h/x?a=1&b=2#frag", "https://h/x?<redacted>"),
        (f"http://lrs:p@ss{PASSWORD}@host/ds?{QUERY}", "http://<redacted>@host/ds?<redacted>"),
        (
            f"Invalid dataset location (http://h/ds?{QUERY}): gone.",
            "Invalid dataset location (http://h/ds?<redacted>): gone.",
        ),
        (f"Remote('http://h/ds?{QUERY}')", "Remote('http://h/ds?<redacted>')"),
        (f'{{"url": "http://h/ds?{QUERY}", "n": 1}}', '{"url": "http://h/ds?<redacted>", "n": 1}'),
        (f"GET /ds/meta/info.json?{QUERY} HTTP/1.1", "GET /ds/meta/info.json?<redacted> HTTP/1.1"),
        (f"Authorization: token={QUERY_TOKEN}", "Authorization: <redacted>"),
        (f"http://alice:it's-{PASSWORD}@host/ds", "http://<redacted>@host/ds"),
        (
            f'EpisodeStream("http://alice:it\'s-{PASSWORD}@host/ds")',
            'EpisodeStream("http://<redacted>@host/ds")',
        ),
        (f"Remote('http://alice:it\\'s-{PASSWORD}@host/ds')", "Remote('http://<redacted>@host/ds')"),
        (
            f'{{"url": "http://alice:it\'s-{PASSWORD}@h/ds", "n": 1}}',
            '{"url": "http://<redacted>@h/ds", "n": 1}',
        ),
        (f"AWS_SECRET_ACCESS_KEY={PASSWORD} next", "AWS_SECRET_ACCESS_KEY=<redacted> next"),
        (f"aws_secret_access_key = {PASSWORD}", "aws_secret_access_key = <redacted>"),
        (f"{{'hf_token': '{PASSWORD}'}}", "{'hf_token': '<redacted>'}"),
        (f"Authorization: Bearer {PASSWORD}", "Authorization: <redacted>"),
        (f"sent Bearer {PASSWORD} to", "sent Bearer <redacted> to"),
        (f"see //lrs:{PASSWORD}@host/ds", "see //<redacted>@host/ds"),
        ("signal=15 design=2", "signal=15 design=2"),
        ("hf_abcdefghijklmnop in text", "<redacted> in text"),
        ("s3://bucket/x and a@b.c", "s3://bucket/x and a@b.c"),
        ("hf://datasets/owner/name@main/prefix", "hf://datasets/owner/name@main/prefix"),
        ("Did you mean http://h/x?", "Did you mean http://h/x?"),
    ],
    ids=[
        "user-password",
        "user-token",
        "query-token",
        "query-any-names",
        "query-and-fragment",
        "password-with-at",
        "in-parentheses",
        "in-repr",
        "in-json",
        "path-query",
        "authorization-header",
        "password-with-quote",
        "quoted-url-in-call",
        "escaped-quote-in-repr",
        "quote-in-json",
        "aws-secret-env",
        "aws-secret-ini",
        "secret-in-dict-repr",
        "bearer-header",
        "bearer-in-text",
        "userinfo-without-scheme",
        "words-not-secrets",
        "hf-token",
        "nothing-secret",
        "hub-revision",
        "question-mark",
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


class _QuotesItsUrl(Exception):
    """A library error whose text comes from an attribute, not from its arguments (as aiohttp's do)."""

    def __init__(self, url: str) -> None:
        super().__init__("failed")
        self.url = url

    def __str__(self) -> str:
        return f"failed, url={self.url!r}"


def test_scrub_exception_redacts_the_whole_chain_in_place() -> None:
    """Arguments, an OSError's file names, notes, and a `__str__` of its own, through causes and contexts:
    what `traceback` prints of each holds no credential, and each keeps its class for `except`."""
    url = f"http://alice:it's-{PASSWORD}@host/ds/meta/info.json?token={QUERY_TOKEN}"
    errors: list[BaseException] = [
        FileNotFoundError(url),
        PermissionError(13, "Permission denied", url),
        _QuotesItsUrl(url),
        ValueError("context", url),
    ]
    errors[0].add_note(f"while reading {url}")
    errors[0].__cause__, errors[1].__context__, errors[2].__cause__ = errors[1], errors[2], errors[3]
    scrub_exception(errors[0])
    text = "".join(traceback.format_exception(errors[0]))
    assert PASSWORD not in text and QUERY_TOKEN not in text, text
    assert text.count("http://<redacted>@host/ds/meta/info.json?<redacted>") == 5, text
    assert isinstance(errors[0], FileNotFoundError) and isinstance(errors[2], _QuotesItsUrl)
    assert str(errors[0]) == "http://<redacted>@host/ds/meta/info.json?<redacted>"
    assert errors[1].filename == "http://<redacted>@host/ds/meta/info.json?<redacted>"
    assert "_QuotesItsUrl: failed, url=" in text


def test_an_error_made_while_handling_another_redacts_that_one() -> None:
    """`raise LrsError(...) from exc`: the cause printed above it in a traceback is redacted too."""
    with pytest.raises(FetchError) as raised:
        try:
            raise FileNotFoundError(f"http://lrs:{PASSWORD}@host/ds")
        except FileNotFoundError as exc:
            raise FetchError("Reading failed") from exc
    assert PASSWORD not in "".join(traceback.format_exception(raised.value))


def test_public_entry_points_scrub_what_leaves_them(tmp_path: Path) -> None:
    """`DatasetMeta.open` of a credentialed URL where no dataset is, and an iteration that fails with a
    library's error: the tracebacks a training script prints hold no credential."""
    with RangeServer(tmp_path) as server:
        url = _credentialed(f"{server.url}/nothing", "quote")
        with pytest.raises(DatasetError) as missing:
            DatasetMeta.open(url)

    def failing() -> Iterator[int]:
        yield 1
        raise ConnectionResetError(f"reset, url={url!r}")

    with pytest.raises(ConnectionResetError) as reset:
        list(scrubbed_iter(failing()))
    for raised in (missing.value, reset.value):
        text = "".join(traceback.format_exception(raised))
        assert PASSWORD not in text and "<redacted>@127.0.0.1" in text, text


def test_display_redacts_the_url() -> None:
    assert PASSWORD not in resolve(f"http://lrs:{PASSWORD}@127.0.0.1:9/ds").display("meta/info.json")


def test_display_puts_the_path_before_a_query_that_redaction_removes() -> None:
    shown = resolve(f"http://127.0.0.1:9/ds?token={QUERY_TOKEN}").display("meta/info.json")
    assert shown == "http://127.0.0.1:9/ds/meta/info.json?<redacted>", shown


@pytest.mark.integration
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


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["userinfo", "quote", "query"])
def test_commands_print_and_write_no_credentials(sample_ds: Path, tmp_path: Path, kind: str) -> None:
    """describe, inspect, doctor and reshard (and its rerun) over a credentialed URL: what they print and
    write, and their errors for a URL where no dataset is."""
    out = tmp_path / "out"
    runner = CliRunner()
    with RangeServer(sample_ds) as server:
        url, missing = _credentialed(server.url, kind), _credentialed(f"{server.url}/nothing", kind)
        shown = {
            " ".join(args): runner.invoke(cli, args)
            for args in (
                ["describe", url],
                ["describe", url, "--json"],
                ["inspect", url, "--json"],
                ["doctor", url],
                ["doctor", url, "--json"],
                ["reshard", url, "--out", str(out)],
                ["reshard", url, "--out", str(out), "-q"],  # a rerun: "already a complete reshard of URL"
            )
        }
        failed = {
            " ".join(args): runner.invoke(cli, args)
            for args in (["describe", missing], ["doctor", missing], ["reshard", missing, "--out", str(out)])
        }
    assert all(r.exit_code == 0 for r in shown.values()), {k: r.output for k, r in shown.items()}
    assert [r.exit_code for r in failed.values()] == [3, 3, 3], {k: r.output for k, r in failed.items()}
    _assert_clean(
        kind,
        **{k: r.output for k, r in {**shown, **failed}.items()},
        errors=" ".join(str(r.exception) for r in failed.values()),
        files=_files_text(out),
    )
    assert json.loads(shown[f"inspect {url} --json"].output)["url"] == redact(url)
    assert SHOWN[kind] in shown[f"describe {url}"].output
    assert "already a complete reshard of" in shown[f"reshard {url} --out {out} -q"].output
    assert SHOWN[kind] in failed[f"describe {missing}"].output


@pytest.mark.parametrize("kind", ["userinfo", "quote", "query"])
def test_stream_spec_reprs_and_errors_hold_no_credentials(
    sample_resharded_ds: Path, tmp_path: Path, kind: str
) -> None:
    """What a training job prints or saves: the stream's repr and repo_id, its spec (`to_json`, the file
    `lrs prewarm --spec` reads, and its repr), the Remote's repr, and a failed open's error."""
    with RangeServer(sample_resharded_ds) as server:
        url = _credentialed(server.url, kind)
        stream = EpisodeStream(url, cache_dir=tmp_path / "cache")
        remote = resolve(url)
        with pytest.raises(DatasetError, match=r"meta/info\.json") as missing:
            EpisodeStream(_credentialed(f"{server.url}/nothing", kind))
    saved = json.loads(stream.spec.to_json())
    assert saved["sources"][0]["url"] == redact(url) and SHOWN[kind] in redact(url)
    _assert_clean(
        kind,
        stream=repr(stream),
        repo_id=stream.repo_id,
        spec=stream.spec.to_json(),
        spec_repr=repr(stream.spec),
        remote=repr(remote),
        error=str(missing.value),
        error_file=str(missing.value.file),
        traceback="".join(traceback.format_exception(missing.value)),
    )
    assert isinstance(missing.value.__cause__, FileNotFoundError)  # fsspec's, which quoted the whole URL
    assert stream.spec.sources[0].url == url  # in memory, where it is read through, the URL is whole


@pytest.mark.parametrize("kind", ["userinfo", "query"])
def test_prewarm_asks_a_saved_spec_for_its_url_again(
    sample_resharded_ds: Path, tmp_path: Path, kind: str
) -> None:
    """A saved spec holds a credentialed URL redacted: `lrs prewarm --spec` without the URL refuses in one
    line (usage, exit 2), with another URL too, and with the URL given again it fetches; a stream of the
    saved spec says its URL was redacted, and `with_urls` gives it back."""
    spec_file, cache_dir = tmp_path / "spec.json", tmp_path / "cache"
    runner = CliRunner()
    with RangeServer(sample_resharded_ds) as server:
        url = _credentialed(server.url, kind)
        spec_file.write_text(EpisodeStream(url, cache_dir=cache_dir, episode_pool_size=3).spec.to_json())
        without = runner.invoke(cli, ["prewarm", "--spec", str(spec_file), "--quiet"])
        other = runner.invoke(cli, ["prewarm", "--spec", str(spec_file), f"{server.url}/other", "--quiet"])
        dry = runner.invoke(cli, ["prewarm", url, "--cache-dir", str(cache_dir), "--episode-pool-size", "3",
                                  "--dry-run"])  # fmt: skip
        again = runner.invoke(cli, ["prewarm", "--spec", str(spec_file), url])
        saved = ReadSpec.from_json(spec_file.read_text())
        with pytest.raises(DatasetError, match=r"credentials were redacted where it was shown or saved"):
            EpisodeStream(saved)
        assert len(EpisodeStream(saved.with_urls([url]))) == 244
    assert without.exit_code == 2 and "Missing argument 'DATASET...': the spec" in without.output, (
        without.output
    )
    assert f"{redact(url)} without its credentials" in without.output
    assert other.exit_code == 2 and "Invalid URL (" in other.output, other.output
    assert dry.exit_code == 0 and again.exit_code == 0 and "fetched" in again.output, again.output
    with pytest.raises(
        ValueError, match=r"Invalid URL of source 0 \(http://elsewhere/ds\)\. Expected the spec's"
    ):
        saved.with_urls(["http://elsewhere/ds"])
    cached = " ".join(str(p) for p in cache_dir.rglob("*")) + "".join(
        p.read_text(errors="replace")
        for p in cache_dir.rglob("*")
        if p.is_file() and p.stat().st_size < 65536
    )
    _assert_clean(
        kind,
        spec_file=spec_file.read_text(),
        without=without.output,
        other=other.output,
        dry=dry.output,
        again=again.output,
        saved=repr(saved),
        cache=cached,
    )


@pytest.mark.parametrize("kind", ["userinfo", "query"])
def test_retry_log_lines_and_errors_hold_no_credentials(caplog: pytest.LogCaptureFixture, kind: str) -> None:
    """A read retried and then failed: its warning names the file and the error (whose text quotes the
    whole URL, as aiohttp's does) without the credentials; so does the FetchError."""

    class Resetting:
        def cat_file(self, path: str) -> bytes:
            raise ConnectionResetError(f"Connection reset by peer, url='{path}'")

    url = _credentialed("http://127.0.0.1:9/ds", kind)
    remote = dataclasses.replace(
        resolve(url, probe_ranges=False), fs=Resetting(), retry=RetryPolicy(attempts=2, base_delay_s=0.0)
    )
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(FetchError, match=r"failed after 2 attempts") as failed,
    ):
        remote.cat("meta/info.json")
    assert "retrying" in caplog.text and SHOWN[kind] in caplog.text, caplog.text
    _assert_clean(kind, log=caplog.text, error=str(failed.value))


def test_show_draws_the_url_without_credentials(sample_resharded_ds: Path, tmp_path: Path) -> None:
    """`lrs show` writes the dataset's URL into the PNG's title: the view it draws holds it redacted."""
    with RangeServer(sample_resharded_ds) as server:
        url = _credentialed(server.url, "userinfo")
        view = read_episode_view(url, 0, frames=2, cache_dir=tmp_path / "cache")
    assert view.source == redact(url) and PASSWORD not in view.source
