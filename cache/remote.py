"""Where a dataset lives: one URL grammar for every place lrs reads from or writes to, over fsspec.

Accepted forms (`resolve`):

- a local directory, or `file:///abs/path`
- `hf://datasets/<owner>/<name>[@<revision>][/<prefix>]`, or a bare Hub repo id `<owner>/<name>`
  (when no local directory of that name exists; lerobot's local root `$HF_LEROBOT_HOME/<owner>/<name>` is
  looked at first, as `LeRobotDataset` does); read through `HfFileSystem`, lazily. With
  `HF_HUB_OFFLINE=1` (or `HF_DATASETS_OFFLINE=1`) a Hub URL fails at once (`FetchError`)
- `hf://buckets/<owner>/<name>[/<prefix>]` (Hugging Face storage buckets)
- `s3://bucket/prefix` (s3fs; honours `AWS_ENDPOINT_URL`, keys and profiles), `gs://`, ...
- `http(s)://host/path` (fsspec `http`; needs Range support for partial reads)

All reads go through `cache.backoff.with_retries`: transient errors (timeouts, resets, truncated bodies,
HTTP 429/5xx) are retried with exponential backoff and jitter; permanent ones (missing file, 4xx,
permission) raise at once. A read that still fails raises `FetchError` naming the URL, without credentials.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import fsspec
import fsspec.asyn
from fsspec.implementations.local import LocalFileSystem

from cache.backoff import DEFAULT_RETRY, RetryPolicy, TruncatedRead, is_transient, with_retries
from cache.errors import FetchError, LocationError, LrsError, MissingBackend
from cache.redaction import is_redacted, redact

__all__ = ["RANGE_PROBE", "Reads", "Remote", "resolve"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Remote:
    """A dataset root on some filesystem, with retried reads of dataset-relative paths.

    Attributes:
        url: the URL it was resolved from, normalised (no trailing slash), credentials included: for
            reading only; what is shown or saved is `shown`.
        fs: the fsspec filesystem.
        root: the root path inside `fs` (no trailing slash).
    """

    url: str
    fs: Any
    root: str
    retry: RetryPolicy = field(default=DEFAULT_RETRY, compare=False)

    def __repr__(self) -> str:
        return f"Remote({self.shown!r})"

    @property
    def shown(self) -> str:
        """`url` as lrs shows and saves it: without its userinfo and query values (`cache.redaction`)."""
        return redact(self.url)

    @property
    def is_local(self) -> bool:
        """Whether files can be opened in place (no copy needed)."""
        return isinstance(self.fs, LocalFileSystem)

    @property
    def reads_in_place(self) -> bool:
        """Whether readers should use the files where they are rather than copy them into a cache: a
        local path does; a `file://` URL is treated as remote storage (a network filesystem whose random
        reads are slow, or a bucket stand-in), so its files are copied into the node cache like a
        bucket's."""
        return self.is_local and not self.url.startswith("file://")

    def path(self, rel: str) -> str:
        """The full path of a dataset-relative path inside `fs` (in a URL root, before its query)."""
        return _join(self.root, rel) if self.root else rel

    def display(self, rel: str) -> str:
        """A dataset-relative path as a URL a user can recognise, credentials redacted (`shown`)."""
        return redact(_join(self.url, rel))

    def local_path(self, rel: str) -> str | None:
        """The path on this machine's disk, for a local root; None otherwise."""
        return self.path(rel) if self.is_local else None

    def exists(self, rel: str) -> bool:
        """Whether `rel` exists (retried). A transient failure is retried, never taken for absence
        (fsspec's `exists` answers False to any error, a 500 included, so this asks `info`)."""

        def probe() -> bool:
            try:
                self.fs.info(self.path(rel))
            except FileNotFoundError as exc:
                if is_transient(exc):
                    raise
                return False
            return True

        return with_retries(probe, what=self.display(rel), policy=self.retry)

    def size(self, rel: str) -> int:
        """The size of `rel` in bytes (retried). Raises FileNotFoundError when missing."""
        return int(
            with_retries(lambda: self.fs.size(self.path(rel)), what=self.display(rel), policy=self.retry)
        )

    def cat(self, rel: str, *, expect_size: int | None = None, limit: int | None = None) -> bytes:
        """The whole content of `rel`; a body shorter than `expect_size` is retried as truncated.

        With `limit`, the read itself stops after `limit + 1` bytes (`read_bounded`): a file or a body
        without end costs that much memory, no more, and the caller refuses what is longer than `limit`.
        """

        def read() -> bytes:
            if limit is None:
                data = self.fs.cat_file(self.path(rel))
            else:
                data = read_bounded(self.fs, self.path(rel), limit + 1)
            if expect_size is not None and len(data) != expect_size and (limit is None or len(data) <= limit):
                raise TruncatedRead(f"got {len(data)} of {expect_size} bytes")
            return data

        return with_retries(read, what=self.display(rel), policy=self.retry)

    def cat_many(
        self, rels: Sequence[str], *, probe_ranges: bool = False, limits: Mapping[str, int] | None = None
    ) -> Reads:
        """Read several small files concurrently: about the time of one request, not one per file.

        Each read is retried like `cat`; one that fails keeps its error, which `Reads.cat` raises again,
        so a caller handles a missing or unreadable file as it would with `cat` (and no read is retried
        twice). With `probe_ranges`, an HTTP(S) remote's Range support is probed alongside
        (`check_ranges`), in the same round. `limits` bounds the reads of those files it names, as `cat`'s
        `limit` does, also those `Reads.cat` makes later.

        Raises:
            FetchError: `probe_ranges` and the server ignores Range requests.
        """

        bounds = dict(limits or {})

        def read(rel: str) -> tuple[str, bytes | OSError | LrsError]:
            try:
                return rel, self.cat(rel, limit=bounds.get(rel))
            except (OSError, LrsError) as exc:  # FileNotFoundError and FetchError included
                return rel, exc

        probe = probe_ranges and self.is_http
        if not rels and not probe:
            return Reads(self, {}, bounds)
        workers = min(len(rels), 8) + probe
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lrs-cat") as pool:
            checked = pool.submit(self.check_ranges, RANGE_PROBE) if probe else None
            results = dict(pool.map(read, rels))
        if checked is not None:
            checked.result()
        return Reads(self, results, bounds)

    def bounded(self, limits: Mapping[str, int]) -> Reads:
        """A `Reads` that has read nothing yet: its `cat` reads each file when asked, those `limits` names
        bounded as `cat`'s `limit` bounds them."""
        return Reads(self, {}, limits)

    def cat_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes `[start, end)` of `rel`, in one ranged request; a short body is retried.

        Raises:
            FetchError: also when the server answers with more bytes than asked for: it ignores Range
                requests (retrying would not help).
        """

        def read() -> bytes:
            if self.is_http:  # one byte more than asked tells a server that ignores Range, and bounds it
                data = read_bounded(self.fs, self.path(rel), end - start + 1, start=start)
            else:
                data = self.fs.cat_file(self.path(rel), start=start, end=end)
            if len(data) < end - start:
                raise TruncatedRead(f"got {len(data)} of {end - start} bytes at offset {start}")
            return data

        data = with_retries(read, what=f"{self.display(rel)} [{start}:{end})", policy=self.retry)
        if len(data) > end - start:
            raise _range_ignored(self.display(rel), len(data), end - start)
        return data

    @property
    def is_http(self) -> bool:
        return self.url.startswith(("http://", "https://"))

    def check_ranges(self, rel: str) -> None:
        """Ask for the first byte of `rel` alone: a server that answers with more ignores Range requests.

        One try, not retried: a failed probe (a missing `rel`, a server error) proves nothing and is left
        for the reads that follow to report, with their retries.

        Raises:
            FetchError: the server answered and ignores Range requests.
        """
        try:
            data = read_bounded(self.fs, self.path(rel), 2, start=0)
        except Exception:  # noqa: BLE001 - see the docstring
            return
        if len(data) > 1:
            raise _range_ignored(self.display(rel), len(data), 1)

    def get(
        self, rel: str, local: str, *, expect_size: int | None = None, max_size: int | None = None
    ) -> None:
        """Download `rel` to the local file `local` (overwritten), retried as a whole.

        With `max_size`, the download stops one byte past it (`copy_bounded`): a body longer than the
        file can be, under a lying Content-Length or none, fills neither the disk nor the time; the
        caller finds the file too large and refuses it.
        """

        def fetch() -> None:
            if max_size is None:
                self.fs.get_file(self.path(rel), local)
            else:
                copy_bounded(self.fs, self.path(rel), local, max_size + 1)
            got = os.path.getsize(local)
            if expect_size is not None and got != expect_size:
                raise TruncatedRead(f"got {got} of {expect_size} bytes")

        with_retries(fetch, what=self.display(rel), policy=self.retry)

    def open(self, rel: str, mode: str = "rb", **kwargs: Any) -> Any:
        """An fsspec file object for `rel` (reads are not retried: prefer `cat`/`cat_range`)."""
        return self.fs.open(self.path(rel), mode, **kwargs)


class Reads:
    """What `Remote.cat_many` read: each file's content, or the error its read ended with."""

    def __init__(
        self,
        remote: Remote,
        results: dict[str, bytes | OSError | LrsError],
        limits: Mapping[str, int] | None = None,
    ) -> None:
        self.remote = remote
        self._results = results
        self._limits = dict(limits or {})

    def __repr__(self) -> str:
        return f"Reads({self.remote.shown!r}, files={sorted(self._results)})"

    def cat(self, rel: str, *, limit: int | None = None) -> bytes:
        """The content of `rel` as `Remote.cat` gives it: a failed read raises its error again, and a
        file that was not asked for is read now, bounded by `limit` or the limit `cat_many` was given."""
        result = self._results.get(rel)
        bound = limit if limit is not None else self._limits.get(rel)
        if result is None:
            return self.remote.cat(rel, limit=bound)
        if isinstance(result, BaseException):
            raise result
        return result if bound is None else result[: bound + 1]


def read_bounded(fs: Any, path: str, most: int, *, start: int | None = None) -> bytes:
    """At most `most` bytes of `path` (from `start`, or from its beginning), read in steps: a larger file,
    or an HTTP body without end, with a lying Content-Length or none, stops costing memory at `most` bytes.

    HTTP(S) is read as a stream on the filesystem's session (`_http_stream`; no HEAD asks for a length
    first), with `start` as a Range request for `most - 1` bytes: a server that honours it sends no more,
    and the byte beyond tells one that does not.
    """
    # BytesIO hands its buffer over without a copy: the read costs `most` bytes at its peak, not twice.
    buffer = io.BytesIO()
    _stream(fs, path, most, buffer.write, start=start)
    return buffer.getvalue()


def copy_bounded(fs: Any, path: str, local: str, most: int) -> None:
    """Copy at most `most` bytes of `path` into the local file `local` (overwritten), in 1 MiB steps, read
    as `read_bounded` reads (HTTP(S) as a stream: its Content-Length is not trusted)."""
    with open(local, "wb") as target:
        _stream(fs, path, most, target.write)


def _stream(
    fs: Any, path: str, most: int, sink: Callable[[bytes], object], *, start: int | None = None
) -> None:
    """At most `most` bytes of `path` (from `start`) into `sink`, in steps of at most 1 MiB."""
    if _is_http_fs(fs):
        _http_stream(fs, path, most, sink, start=start)
        return
    got = 0
    with fs.open(path, "rb") as file:
        if start:
            file.seek(start)
        while got < most:
            part = file.read(min(most - got, 1 << 20))
            if not part:
                break
            sink(part)
            got += len(part)


def _http_stream(
    fs: Any, url: str, most: int, sink: Callable[[bytes], object], *, start: int | None = None
) -> None:
    """At most `most` bytes of the HTTP(S) body of `url` into `sink`, in steps, on the filesystem's own
    session and headers (a token), as fsspec's `cat_file` asks; with `start`, a Range request for
    `most - 1` bytes. The response is released whatever happens (fsspec's streaming file left an
    unanswered 404's connection open, logged at exit as "Unclosed connection")."""

    async def read() -> None:
        kw = fs.kwargs.copy()
        if start is not None:  # beside the filesystem's own headers, not instead of them
            headers = dict(kw.pop("headers", None) or {})
            kw["headers"] = {**headers, "Range": f"bytes={start}-{start + max(most - 2, 0)}"}
        session = await fs.set_session()
        async with session.get(fs.encode_url(url), **kw) as response:
            fs._raise_not_found_for_status(response, url)
            got = 0
            while got < most:
                part = await response.content.read(min(most - got, 1 << 20))
                if not part:
                    break
                sink(part)
                got += len(part)

    fsspec.asyn.sync(fs.loop, read)


def _is_http_fs(fs: Any) -> bool:
    protocol = fs.protocol
    return bool({"http", "https"} & set(protocol if isinstance(protocol, (tuple, list)) else (protocol,)))


# Every dataset root has it: the file an HTTP(S) root's Range support is probed with.
RANGE_PROBE = "meta/info.json"


def _join(base: str, rel: str) -> str:
    """`base/rel`; in a URL with a query (a signed URL, `?token=...`) the path goes before the query, where
    it belongs and where the server reads it."""
    if "://" in base:
        parts = urlsplit(base)
        if parts.query or parts.fragment:
            return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{rel}"))
    return f"{base}/{rel}"


def _range_ignored(where: str, got: int, asked: int) -> FetchError:
    return FetchError(
        f"Invalid server for {where}: it ignores HTTP Range requests (answered {got} bytes to a request "
        f"for {asked}). Expected a server that supports Range (nginx, S3, a Hugging Face bucket; "
        "`python -m http.server` does not), or a local copy of the dataset."
    )


def resolve(
    url: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None, probe_ranges: bool = True
) -> Remote:
    """Resolve a dataset location to a `Remote`.

    Args:
        url: a path or URL in one of the forms of this module's docstring.
        storage_options: passed to the fsspec filesystem (e.g. `endpoint_url`, `token`).
        probe_ranges: for HTTP(S), ask for one byte of `meta/info.json` now (`Remote.check_ranges`);
            False leaves it to the caller (`Remote.cat_many(probe_ranges=True)` does it in its round).

    Raises:
        LocationError: the URL is empty, of an unknown form, redacted (`cache.redaction`: shown or saved
            without its credentials), or refused by its scheme's filesystem (also a ValueError).
        MissingBackend: the scheme's filesystem package is not installed (`gs://` without gcsfs); also
            an ImportError. Every command and `EpisodeStream` resolve through here, so this is the one
            place that turns it into one line naming the package.
        FetchError: an HTTP(S) server that ignores Range requests.
    """
    text = os.fspath(url).strip()
    if not text:
        raise LocationError("Invalid dataset location (''). Expected a path or URL.")
    if is_redacted(text):
        raise LocationError(
            f"Invalid dataset location ({text}): its credentials were redacted where it was shown or saved. "
            "Expected the URL with them, given again (a saved read spec holds it redacted)."
        )
    options = dict(storage_options or {})
    if "://" not in text:
        if os.path.exists(text) or not _REPO_ID.match(text):
            root = os.path.abspath(text).rstrip("/") or "/"
            return Remote(url=root, fs=fsspec.filesystem("file"), root=root)
        local = lerobot_root(text)
        if os.path.isfile(os.path.join(local, "meta", "info.json")):
            return Remote(url=local, fs=fsspec.filesystem("file"), root=local)
        text = f"hf://datasets/{text}"
    protocol, _, rest = text.partition("://")
    rest = rest.rstrip("/")
    if protocol == "file":
        root = "/" + rest.lstrip("/")
        return Remote(url=f"file://{root}", fs=fsspec.filesystem("file"), root=root)
    if protocol == "hf":
        return _resolve_hf(rest, options)
    if protocol in ("http", "https"):
        fs = filesystem(protocol, text, _http_options(options))
        remote = Remote(url=f"{protocol}://{rest}", fs=fs, root=f"{protocol}://{rest}")
        # lrs reads row groups and prefetches by range: a server that ignores Range (`python -m
        # http.server`) is named now, not when training's first ranged read gets a whole file.
        if probe_ranges:
            remote.check_ranges(RANGE_PROBE)
        return remote
    if protocol == "s3":
        options = _s3_options(options)
    fs = filesystem(protocol, text, options)
    if protocol == "s3":
        # One retry policy (`cache.backoff`), not three nested: s3fs retries a failed call 5 times and
        # botocore each of those again, which turned one refused connection into minutes of waiting.
        fs.retries = 1
    # A filesystem that takes arguments from the URL reads its path its own way (`ftp://host/x`: host
    # `host`, path `/x`); for the others (buckets) the path is the rest of the URL.
    root = fs._strip_protocol(text).rstrip("/") if _url_kwargs(fs, text) else rest
    return Remote(url=f"{protocol}://{rest}", fs=fs, root=root)


# Where the pip package of a filesystem is not the module fsspec imports.
_PIP_NAMES = {"s3fs": "s3fs (or lrs-lerobot[s3])"}


def filesystem(protocol: str, url: str, options: dict[str, Any]) -> Any:
    """The fsspec filesystem of `protocol` for `url`, with the URL's own arguments (an FTP host).

    Raises:
        MissingBackend: its package is not installed: one line that names the package to install.
        LocationError: fsspec knows no such protocol, or its filesystem refuses the URL.
    """
    shown = redact(url)
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        cause = exc.__cause__
        package = getattr(cause, "name", None) or _registered_package(protocol) or protocol
        package = package.split(".")[0]
        raise MissingBackend(
            f"Invalid dataset location ({shown}): {protocol}:// needs the package {package}, which is not "
            f"installed. Expected it installed: pip install {_PIP_NAMES.get(package, package)}.",
            package=package,
        ) from None
    except ValueError as exc:
        raise LocationError(
            f"Invalid dataset location ({shown}): {exc}. Expected a path, a Hub repo id or a URL of a "
            "known scheme (hf, s3, gs, az, http(s), file, ...)."
        ) from None
    try:
        kwargs = {**_url_kwargs(cls, url), **options}
        return fsspec.filesystem(protocol, **kwargs)
    except ImportError as exc:  # a filesystem that imports its client lazily (sftp: paramiko)
        package = (getattr(exc, "name", None) or protocol).split(".")[0]
        raise MissingBackend(
            f"Invalid dataset location ({shown}): {protocol}:// needs the package {package}, which is not "
            f"installed. Expected it installed: pip install {_PIP_NAMES.get(package, package)}.",
            package=package,
        ) from None
    except OSError as exc:  # a filesystem that connects when made (ftp, sftp)
        raise FetchError(
            f"Could not connect to {shown}: {type(exc).__name__}: {exc}. Expected a reachable server."
        ) from None
    except (TypeError, ValueError) as exc:
        raise LocationError(
            f"Invalid dataset location ({shown}): {exc}. Expected a URL {protocol}:// accepts."
        ) from None


def _url_kwargs(cls: Any, url: str) -> dict[str, Any]:
    return dict(cls._get_kwargs_from_urls(url))


def _registered_package(protocol: str) -> str | None:
    entry = fsspec.registry.known_implementations.get(protocol, {})
    return entry.get("class", "").split(".")[0] or None


def lerobot_root(repo_id: str) -> str:
    """Where lerobot keeps a dataset `owner/name` on this machine, as `LeRobotDataset(repo_id)` looks for
    it before the Hub (lerobot 0.6.1's `HF_LEROBOT_HOME`: that variable, else `$HF_HOME/lerobot`, where
    HF_HOME defaults to `~/.cache/huggingface`)."""
    home = os.environ.get("HF_LEROBOT_HOME")
    if not home:
        hf_home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
        )
        home = os.path.join(hf_home, "lerobot")
    return os.path.abspath(os.path.join(os.path.expanduser(home), repo_id))


def hub_offline() -> str | None:
    """The variable that makes the Hub off limits (`HF_HUB_OFFLINE`, `HF_DATASETS_OFFLINE`), if one is set."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return name
    return None


def _resolve_hf(rest: str, options: dict[str, Any]) -> Remote:
    from huggingface_hub import HfFileSystem

    kind, _, tail = rest.partition("/")
    if kind not in ("datasets", "buckets") or tail.count("/") < 1:
        raise LocationError(
            f"Invalid Hugging Face URL (hf://{rest}). Expected hf://datasets/<owner>/<name>[@revision] "
            "or hf://buckets/<owner>/<name>[/prefix]."
        )
    offline = hub_offline()
    if offline:
        # Offline is a decision, not a transient fault: no retries, no warning per request.
        repo = "/".join(tail.split("/")[:2]).split("@")[0]
        where = f" nor in lerobot's local root ({lerobot_root(repo)})" if kind == "datasets" else ""
        raise FetchError(
            f"Invalid dataset location (hf://{rest}): {offline}=1 and it is not on this machine{where}. "
            f"Expected a local copy (a path, or the dataset in lerobot's root), or {offline} unset."
        )
    fs = HfFileSystem(**options)
    return Remote(url=f"hf://{rest}", fs=fs, root=rest)


# Every remote call is bounded: a connection in CONNECT_TIMEOUT_S, and no READ_TIMEOUT_S without a byte
# (then `cache.backoff` retries it, with a warning line); no total cap, so a large video may take its time.
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60


def _http_options(options: dict[str, Any]) -> dict[str, Any]:
    """aiohttp's default gives up on any request after 5 minutes (a large video on a slow link) and waits
    30 s for a connection: a connection in `CONNECT_TIMEOUT_S` and a byte every `READ_TIMEOUT_S` instead."""
    import aiohttp

    client = dict(options.get("client_kwargs") or {})
    client.setdefault(
        "timeout", aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)
    )
    return {**options, "client_kwargs": client}


def _s3_options(options: dict[str, Any]) -> dict[str, Any]:
    # s3fs reads keys and profiles from the standard AWS places itself; only the endpoint needs help
    # on older botocore versions that ignore AWS_ENDPOINT_URL.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in options and "client_kwargs" not in options:
        options["endpoint_url"] = endpoint
    # botocore's own retries off (`cache.backoff` retries every read), and its waits bounded as HTTP's.
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("retries", {"mode": "standard", "total_max_attempts": 1})
    config.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    config.setdefault("read_timeout", READ_TIMEOUT_S)
    return {**options, "config_kwargs": config}
