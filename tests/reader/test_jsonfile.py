"""A dataset's JSON files: nesting measured in bounded work before `json` parses them, one error naming
the file for anything wrong."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from cache.remote import resolve
from reader.errors import DatasetError, LayoutError
from reader.format import jsonfile
from reader.format.catalog import Catalog
from reader.format.jsonfile import MAX_JSON_DEPTH, json_depth, parse_json, read_json_file
from reader.format.layout import Layout
from tests.servers import Faults, RangeServer


def _reference_depth(text: str) -> int:
    """Nesting depth by walking the text one character at a time, strings and escapes followed."""
    depth = deepest = 0
    inside = escaped = False
    for char in text:
        if inside:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                inside = False
        elif char == '"':
            inside = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _value(rng: random.Random, level: int = 0) -> object:
    if level > 6 or rng.random() < 0.3:
        return rng.choice([1, 2.5, None, True, "", "a[b", "x]]}", '"[', "\\", '\\"{', "\\\\[", "\n{"])
    if rng.random() < 0.5:
        return [_value(rng, level + 1) for _ in range(rng.randint(0, 4))]
    keys = ["k", "[", '"{', "\\", "\\\\]"]
    return {f"{rng.choice(keys)}{i}": _value(rng, level + 1) for i in range(rng.randint(0, 4))}


@pytest.mark.parametrize("chunk", [3, 7, 1 << 20], ids=["chunk-3", "chunk-7", "chunk-1M"])
def test_depth_ignores_brackets_inside_strings(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonfile, "_CHUNK", chunk)  # state carried across chunks: quotes open at a cut
    rng = random.Random(7)
    for _ in range(500):
        text = json.dumps(_value(rng))
        assert json_depth(text.encode()) == _reference_depth(text), text
    assert json_depth(b"3") == json_depth(b'"[[[["') == 0


def test_deep_nesting_is_refused_in_bounded_time() -> None:
    started = time.monotonic()
    with pytest.raises(
        DatasetError, match=r"^meta/stats\.json: Invalid JSON nesting \(200000 levels\)\. Expected"
    ):
        parse_json(b"[" * 200_000 + b"]" * 200_000, file="meta/stats.json")
    with pytest.raises(LayoutError, match=rf"Invalid JSON nesting \({MAX_JSON_DEPTH + 1} levels\)"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), file="l", error=LayoutError)
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, file="l") is not None
    assert parse_json(b'{"a": "[[[[[[[[", "b": [[1]]}', file="f") == {"a": "[[[[[[[[", "b": [[1]]}
    assert time.monotonic() - started < 10


def test_what_json_cannot_parse_is_one_error_naming_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DatasetError, match=r"^f\.json: not valid JSON"):
        parse_json(b"{nope", file="f.json")
    with pytest.raises(DatasetError, match=r"^f\.json: not valid JSON"):
        parse_json(b"\xff\xfe{", file="f.json")
    with pytest.raises(DatasetError, match=r"^f\.json: not valid JSON .*integer"):
        parse_json(b"1" * 5000, file="f.json")  # Python's 4,300-digit limit, a ValueError of its own
    monkeypatch.setattr(jsonfile, "MAX_JSON_BYTES", 10)
    with pytest.raises(
        DatasetError, match=r"^f\.json: Invalid JSON file \(11 bytes or more\)\. Expected at most 10 bytes"
    ):
        parse_json(b'"123456789"', file="f.json")


def test_info_json_served_without_end_is_refused_after_the_limit_plus_one_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`{` and spaces without end and without a Content-Length: the read stops, one line names the file."""
    monkeypatch.setattr(jsonfile, "MAX_JSON_BYTES", 1 << 20)
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_bytes(b"{")
    with RangeServer(tmp_path, faults=Faults(endless={"meta/info.json": None})) as server:
        started = time.monotonic()
        with pytest.raises(DatasetError, match=r"info\.json: Invalid JSON file \(1048577 bytes or more\)"):
            Catalog.open(server.url)
        with pytest.raises(DatasetError, match=r"Invalid JSON file \(1048577 bytes or more\)"):
            Layout.load(resolve(server.url, probe_ranges=False))
        assert time.monotonic() - started < 20


def test_a_local_json_file_is_read_no_further_than_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonfile, "MAX_JSON_BYTES", 10)
    (tmp_path / "f.json").write_bytes(b"{" + b" " * 100)
    assert read_json_file(tmp_path / "f.json") == b"{" + b" " * 10
