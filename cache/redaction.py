"""The one rule that keeps credentials out of everything lrs shows or saves.

In every URL, wherever it stands (a message, a traceback, a log line, a `repr`, a JSON report, a saved
spec), the userinfo (`user:password@`) becomes `<redacted>@` and the whole query, whatever its parameter
names, becomes `?<redacted>`: `https://bob:pw@host/ds?sig=abc&X-Goog-Signature=def` shows as
`https://<redacted>@host/ds?<redacted>`. The URL with its credentials lives only in memory, where it is
read through. In free text without a scheme, a path's `?name=value...` query, a `name=value` whose name
says it is a secret (token, signature, key, password, `X-Amz-*`, `X-Goog-*`) and a Hugging Face token
(`hf_...`) are redacted too.

No import of the rest of lrs, so that `cache.errors` can redact every error's message on creation.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "is_redacted", "redact"]

REDACTED = "<redacted>"

# A URL in free text ends at whitespace, a quote or a backslash (a JSON or repr boundary); its userinfo at
# the last `@` before the first `/`, as `urllib.parse.urlsplit` reads it.
_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"
    r"(?P<userinfo>[^\s/'\"\\]*@)?"
    r"(?P<rest>[^\s?'\"\\]*)"
    r"(?P<query>\?[^\s'\"\\]*)?"
)
# A query after a path with no scheme (`GET /ds/meta/info.json?sig=...`).
_BARE_QUERY = re.compile(r"(?<=[^\s'\"\\])\?[\w.~%-]+=[^\s'\"\\]*")
_SECRET_PARAMETER = re.compile(
    r"(?i)(?<![\w-])((?:[\w-]*(?:token|signature|sig|credential|secret|password|passwd|api[_-]?key)|"
    r"x-(?:amz|goog)-[\w-]+)=)[^&\s'\"\\]+"
)
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")
# Punctuation that closes the sentence or the parentheses around a URL rather than belonging to it.
_TRAILING = ").,;:!]}>"


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it redacted (the module docstring's rule), and tokens.

    Idempotent: redacting redacted text changes nothing.
    """
    text = _URL.sub(_redact_url, text)
    text = _BARE_QUERY.sub(_redact_query, text)
    text = _SECRET_PARAMETER.sub(rf"\1{REDACTED}", text)
    return _HF_TOKEN.sub(REDACTED, text)


def is_redacted(url: str) -> bool:
    """Whether `url` went through `redact` and lost credentials (it cannot be read as it stands)."""
    return REDACTED in url


def _redact_url(match: re.Match[str]) -> str:
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
