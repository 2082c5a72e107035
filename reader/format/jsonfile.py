"""A dataset's JSON files (`meta/info.json`, `meta/stats.json`, `meta/lrs/layout.json`, ...) parsed in
bounded time and memory: the one way the metadata readers turn a JSON file into a value or an error.

Datasets are untrusted input. Python's `json` parses nesting by recursion, so 200,000 nested brackets end
in a `RecursionError` (a traceback, not a message); `parse_json` measures the nesting first, in one pass
that holds a bounded buffer, and refuses a file nested deeper than `MAX_JSON_DEPTH` or larger than
`MAX_JSON_BYTES` before `json` sees it. The reads themselves are bounded too (`cat_json`, `json_limits`,
`read_json_file`): they stop after `MAX_JSON_BYTES + 1` bytes, so a file or an HTTP body without end
costs 64 MiB before it is refused, not what the server cares to send.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from cache.remote import Remote
from reader.errors import DatasetError

# lerobot's files nest 4 or 5 deep (stats.json: feature / statistic / channel / row / value).
MAX_JSON_DEPTH = 64
# lerobot's metadata JSON files are kilobytes; lrs's layout.json lists re-encoded episodes, a few MB at
# 10,000s of episodes. The bound keeps `json`'s objects of a hostile file to a few hundred MB.
MAX_JSON_BYTES = 64 << 20
_NOT_SYNTAX = bytes(c for c in range(256) if c not in b'"[]{}')
_QUOTE, _OPEN_LIST, _OPEN_OBJECT = b'"[{'
_CHUNK = 1 << 20


def json_limits(*rels: str) -> Mapping[str, int]:
    """The read bound of each JSON file among `rels` (`Remote.cat_many`'s and `Remote.bounded`'s `limits`)."""
    return {rel: MAX_JSON_BYTES for rel in rels if rel.endswith(".json")}


def cat_json(remote: Remote, rel: str) -> bytes:
    """A dataset's JSON file, read no further than one byte past `MAX_JSON_BYTES` (`parse_json` refuses
    such a file)."""
    return remote.cat(rel, limit=MAX_JSON_BYTES)


def read_json_file(path: str | os.PathLike[str]) -> bytes:
    """A local JSON file, read no further than one byte past `MAX_JSON_BYTES` (`parse_json` refuses it)."""
    with open(path, "rb") as file:
        return file.read(MAX_JSON_BYTES + 1)


def json_depth(data: bytes) -> int:
    """How deep the brackets of a JSON text nest (brackets inside strings do not count); 0 for a scalar.

    Linear, in C and numpy: escaped backslashes, then escaped quotes are dropped, then every byte but
    quotes and brackets; the quotes left open and close strings. A text that is not JSON gets some number;
    `json` then says what is wrong with it.
    """
    syntax = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_SYNTAX)
    deepest = level = inside = 0  # inside: 1 where a chunk starts inside a string
    for start in range(0, len(syntax), _CHUNK):
        chunk = np.frombuffer(syntax, dtype=np.uint8, count=min(_CHUNK, len(syntax) - start), offset=start)
        quote = chunk == _QUOTE
        quotes = np.cumsum(quote, dtype=np.int64) + inside
        inside = int(quotes[-1]) & 1
        brackets = chunk[((quotes & 1) == 0) & ~quote]  # a closing quote's own parity is even
        if brackets.size:
            steps = np.where((brackets == _OPEN_LIST) | (brackets == _OPEN_OBJECT), 1, -1)
            depths = level + np.cumsum(steps, dtype=np.int64)
            deepest, level = max(deepest, int(depths.max())), int(depths[-1])
    return deepest


def parse_json(data: bytes | str, *, file: str, error: type[DatasetError] = DatasetError) -> Any:
    """A dataset's JSON file as a value, or `error` naming `file`.

    Raises:
        DatasetError (or `error`): the file is larger than `MAX_JSON_BYTES`, nests deeper than
            `MAX_JSON_DEPTH`, or is not valid UTF-8 JSON.
    """
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > MAX_JSON_BYTES:
        raise error(
            f"Invalid JSON file ({len(raw)} bytes or more). Expected at most {MAX_JSON_BYTES} bytes.",
            file=file,
        )
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise error(f"Invalid JSON nesting ({depth} levels). Expected at most {MAX_JSON_DEPTH}.", file=file)
    try:
        return json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError; also an integer of 4,300+ digits
        raise error(f"not valid JSON ({exc})", file=file) from exc
