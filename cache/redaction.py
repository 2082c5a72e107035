"""The one rule that keeps credentials out of everything lrs shows or saves.

In every URL, wherever it stands (a message, a traceback, a log line, a `repr`, a JSON report, a saved
spec), the userinfo (`user:password@`) becomes `<redacted>@` and the whole query, whatever its parameter
names, becomes `?<redacted>`: `https://bob:pw@host/ds?sig=abc&X-Goog-Signature=def` shows as
`https://<redacted>@host/ds?<redacted>`. The URL with its credentials lives only in memory, where it is
read through.

A URL given alone (`redact_url`, and `redact` of a text that is one URL) is split by `urllib.parse`, as
fsspec and the HTTP clients split it, so any character its userinfo holds (a quote, a second `@`) goes with
it. In free text a URL is found by its scheme: its userinfo runs to the last `@` before the host, through
quotes and backslashes (a userinfo may hold `'`, and a repr escapes it), and stops only at whitespace and
at what no URL holds (`/ ? # " < > { } | ^`). Free text loses, too: a path's `?name=value...` query;
a `//user:pw@` without a scheme; the value of a `name=value` or `'name': 'value'` whose name says it is a
secret (`*token*`, `*secret*`, `*password*`, `*api_key*`, `*signature*`, `*credential*`,
`AWS_SECRET_ACCESS_KEY`, `X-Amz-*`, `X-Goog-*`); an `Authorization:` header's value; what follows
`Bearer`; and a Hugging Face token (`hf_...`).

`scrub_exception` applies the rule to an exception and every exception chained to it (`__cause__`,
`__context__`, notes), in place: a library's error that quotes the URL (fsspec's `FileNotFoundError`,
aiohttp's) prints redacted in any traceback that shows it.

No import of the rest of lrs, so that `cache.errors` can redact every error's message on creation.
"""

from __future__ import annotations

import contextlib
import functools
import re
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

__all__ = ["REDACTED", "is_redacted", "redact", "redact_url", "scrub_exception", "scrubbed", "scrubbed_iter"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

REDACTED = "<redacted>"

_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*://"
# What a URL in free text may hold before its `@` (a userinfo, read as urlsplit reads it: to the last `@`).
_USERINFO = r"[^\s/?#\"<>{}|^`]*@"
_URL = re.compile(
    rf"(?P<scheme>{_SCHEME})"
    rf"(?P<userinfo>{_USERINFO})?"
    r"(?P<rest>[^\s?'\"\\]*)"
    r"(?P<query>\?[^\s'\"\\]*)?"
)
_WHOLE_URL = re.compile(rf"{_SCHEME}\S*")
# `//user:pw@host` with no scheme before it (a scheme's URL was redacted first).
_BARE_USERINFO = re.compile(
    rf"(?<![A-Za-z0-9+.-]:)(?<!:)//(?!{re.escape(REDACTED)}@)(?P<userinfo>{_USERINFO})"
)
# A query after a path with no scheme (`GET /ds/meta/info.json?sig=...`).
_BARE_QUERY = re.compile(r"(?<=[^\s'\"\\])\?[\w.~%-]+=[^\s'\"\\]*")
_SECRET_WORD = r"(?:secret|token|passw(?:or)?d|pwd|api[_-]?key|access[_-]?key|private[_-]?key|credentials?|signature|sig)"
# `name=value`, `name = value`, `'name': 'value'`, `"name": "value"`, whose name holds a secret word as a
# part of its own (`AWS_SECRET_ACCESS_KEY`, `hf_token`, `X-Amz-Signature`), not inside a word (`signal`).
_SECRET_PARAMETER = re.compile(
    rf"(?i)(?<![\w-])(?P<name>(?:[\w-]*[_-])?{_SECRET_WORD}(?:[_-][\w-]*)?|x-(?:amz|goog)-[\w-]+)"
    r"(?P<sep>['\"]?\s*=\s*['\"]?|['\"]\s*:\s*['\"]?)"
    rf"(?!{re.escape(REDACTED)})[^&\s'\"\\,}}]+"
)
_AUTHORIZATION = re.compile(
    rf"(?i)(?<![\w-])(?P<head>(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(?!{re.escape(REDACTED)})[^\s'\"][^\r\n'\"]*"
)
_BEARER = re.compile(r"(?i)(?<![\w-])(?P<head>bearer\s+)[A-Za-z0-9._~+/=-]+")
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")
# Punctuation that closes the sentence or the parentheses around a URL rather than belonging to it.
_TRAILING = ").,;:!]}>"


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it redacted (the module docstring's rule), and tokens.

    Idempotent: redacting redacted text changes nothing.
    """
    text = redact_url(text) if _WHOLE_URL.fullmatch(text) else _URL.sub(_redact_url_match, text)
    text = _BARE_USERINFO.sub(f"//{REDACTED}@", text)
    text = _BARE_QUERY.sub(_redact_query, text)
    text = _AUTHORIZATION.sub(rf"\g<head>{REDACTED}", text)
    text = _BEARER.sub(rf"\g<head>{REDACTED}", text)
    text = _SECRET_PARAMETER.sub(rf"\g<name>\g<sep>{REDACTED}", text)
    return _HF_TOKEN.sub(REDACTED, text)


def redact_url(url: str) -> str:
    """`url` split as `urllib.parse.urlsplit` splits it, its userinfo and its query (with the fragment after
    it) redacted. A URL whose sentence punctuation follows it (`http://h/x).`) keeps that punctuation."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # a bad IPv6 literal, a port that is no number: found the free-text way
        return _URL.sub(_redact_url_match, url)
    user, at, host = parts.netloc.rpartition("@")
    netloc = f"{REDACTED}@{host}" if at else host
    if not parts.query and "?" not in url:
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc)) if at else url
    query = _query("?" + parts.query + (f"#{parts.fragment}" if parts.fragment else ""))
    head = urllib.parse.urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))
    return head + query


def is_redacted(url: str) -> bool:
    """Whether `url` went through `redact` and lost credentials (it cannot be read as it stands)."""
    return REDACTED in url


def scrub_exception(exc: BaseException | None) -> None:
    """Redact, in place, the text of `exc` and of every exception chained to it (`__cause__`,
    `__context__`): their arguments, an `OSError`'s file names, their notes. An exception whose text still
    shows a credential after that (a library's `__str__` that reads other attributes) prints the redacted
    text instead, where its class allows it."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        _scrub_one(current)
        stack += [current.__cause__, current.__context__]


def scrubbed(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """`function`, whose exceptions leave it scrubbed (`scrub_exception`): for the entry points of the public
    API, which a training script's traceback shows whatever raised inside."""

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return function(*args, **kwargs)
        except BaseException as exc:
            scrub_exception(exc)
            raise

    return wrapper


def scrubbed_iter(items: Iterator[_T]) -> Iterator[_T]:
    """`items`, whose exceptions leave the iteration scrubbed (`scrub_exception`)."""
    try:
        yield from items
    except BaseException as exc:
        scrub_exception(exc)
        raise


def _scrub_one(exc: BaseException) -> None:
    exc.args = tuple(_redacted(a) for a in exc.args)
    if isinstance(exc, OSError):  # set only when present: OSError's text changes once either is set at all
        for name in ("filename", "filename2"):
            value = getattr(exc, name, None)
            if value is not None:
                with contextlib.suppress(AttributeError):  # PyAV's errors make it a read-only property
                    setattr(exc, name, _redacted(value))
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = [_redacted(n) for n in notes]
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ shows as such in any traceback; nothing to redact
        return
    if redact(text) != text:
        _freeze_text(exc, redact(text))


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bytes):
        return redact(value.decode("utf-8", "replace")).encode()
    return value


def _freeze_text(exc: BaseException, text: str) -> None:
    """Make `str(exc)` return `text`: a subclass of its own class, of the same name, whose `__str__` says it.
    Built-in exception classes refuse a new class; their text comes from `args`, already redacted."""
    cls = type(exc)
    frozen = type(
        cls.__name__, (cls,), {"__str__": lambda self: self._lrs_redacted_text, "__module__": cls.__module__}
    )
    frozen.__qualname__ = cls.__qualname__
    try:
        exc.__class__ = frozen
        exc._lrs_redacted_text = text  # type: ignore[attr-defined]
    except TypeError:
        return


def _redact_url_match(match: re.Match[str]) -> str:
    userinfo = f"{REDACTED}@" if match["userinfo"] else ""
    query = _query(match["query"]) if match["query"] else ""
    return f"{match['scheme']}{userinfo}{match['rest']}{query}"


def _redact_query(match: re.Match[str]) -> str:
    return _query(match[0])


def _query(query: str) -> str:
    """`?<redacted>`, followed by the punctuation that ended the sentence after the query."""
    end = len(query)
    while end > 1 and query[end - 1] in _TRAILING and not query[:end].endswith(REDACTED):
        end -= 1
    if end == 1:
        return query  # a bare `?` ends a question, not a query
    return f"?{REDACTED}{query[end:]}"
