"""`ReadSpec`: a JSON round trip that is exact, one-line errors, and `EpisodeStream(spec)` reading exactly
what the keyword form reads."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from reader.plan.spec import SPEC_VERSION, ReadSpec, SourceSpec, default_pool_size, keyword_defaults
from reader.stream import EpisodeStream

EVERY_FIELD = ReadSpec(
    (SourceSpec("s3://bucket/a", 0.25, (0, 3, 7)), SourceSpec("/data/b", 0.75)),
    samples_per_epoch=1000,
    shuffle=False,
    seed=2**64 - 1,
    episode_pool_size=20,
    batch_size=64,
    world_size=8,
    num_workers=4,
    cache_dir="/local/lrs-cache",
    cache_max_bytes=200 * 2**30,
    prefetch_episodes=3,
    return_uint8=True,
    delta_timestamps=(("action", (0.0, 0.1, 1 / 3)), ("observation.state", (-0.1, 0.0))),
    tolerance_s=1e-3,
    depth_output_unit="m",
    decode_device="cuda:1",
    decoder_cache_size=100,
    seek_mode="exact",
    decode_threads=0,
    decode_ahead=0,
    resize=(224, 225),
)


@pytest.mark.parametrize(
    "spec",
    [
        ReadSpec((SourceSpec("data/x"),)),
        ReadSpec((SourceSpec("data/x"),), mixture=True),
        ReadSpec.of(["a", "b"], weights=[2, 1], episodes=[[5, 1], None], delta_timestamps={"a": [0, 0.1]}),
        EVERY_FIELD,
    ],
    ids=["one", "mixture-of-one", "keywords", "every-field"],
)
def test_the_json_round_trip_is_exact(spec: ReadSpec) -> None:
    text = spec.to_json()
    assert json.loads(text)["version"] == SPEC_VERSION
    again = ReadSpec.from_json(text)
    assert again == spec and again.to_json() == text
    assert [type(s.weight) for s in again.sources] == [type(s.weight) for s in spec.sources]


def test_the_keyword_form_normalises_what_it_is_given(tmp_path: Path) -> None:
    spec = ReadSpec.of(tmp_path, episodes=[3, 1], batch_size=40, cache_dir=tmp_path / "c")
    assert spec.sources == (SourceSpec(str(tmp_path), None, (1, 3)),) and spec.mixture is False
    assert spec.cache_dir == str(tmp_path / "c") and spec.pool_size == default_pool_size(40) == 50
    assert ReadSpec.of(["a"]).mixture is True and ReadSpec.of(["a", "b"], weights=[1, 3]).weights == (
        1.0,
        3.0,
    )
    assert ReadSpec.of("a", delta_timestamps={"x": [0, 1]}).windows == {"x": [0.0, 1.0]}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ReadSpec.of([]), r"Invalid source \(\[\]\)\. Expected a dataset, or a non-empty list of them\."),
        (lambda: ReadSpec.of(["a", 3]), r"Invalid source 1 of the mixture \(3\)\. Expected a path, a URL"),
        (lambda: ReadSpec.of("a", weights=[1]), r"Invalid weights for one source\. Expected a list"),
        (lambda: ReadSpec.of(["a", "b"], weights=[1]), r"Invalid weights \(\[1\]\): 1 given\. Expected one per"),
        (
            lambda: ReadSpec((SourceSpec("a", 1.0), SourceSpec("b"))),
            r"Invalid weights \(\[1\.0, None\]\)\. Expected a weight for every source or for none\.",
        ),
        (lambda: ReadSpec.of("a", samples_per_epoch=5), r"Invalid samples_per_epoch without weights\."),
        (lambda: ReadSpec.of(["a", "b"], episodes=[[1]]), r"Invalid episodes for a mixture of 2 sources\."),
        (lambda: ReadSpec.of("a", episodes=[2, 2]), r"Invalid episodes \(\[2, 2\]\)\. Expected each episode index"),
        (lambda: ReadSpec.of("a", episodes=[-1]), r"Invalid episode index \(-1\)\. Expected an integer >= 0\."),
        (lambda: ReadSpec.of("a", seed=2**64), r"Invalid seed \(18446744073709551616\)\. Expected an integer in"),
        (lambda: ReadSpec.of("a", world_size=0), r"Invalid world_size \(0\)\. Expected an integer >= 1\."),
        (lambda: ReadSpec.of("a", num_workers=-1), r"Invalid num_workers \(-1\)\. Expected an integer >= 0\."),
        (lambda: ReadSpec.of("a", tolerance_s=-1), r"Invalid tolerance_s \(-1\)\. Expected a number of seconds"),
        (lambda: ReadSpec.of("a", seek_mode="fast"), r"Invalid seek_mode \('fast'\)\. Expected 'exact' or"),
        (lambda: ReadSpec.of("a", decode_device="tpu"), r"Invalid decode_device \('tpu'\)\. Expected 'cpu'"),
        (lambda: ReadSpec.of("a", depth_output_unit="cm"), r"Invalid depth_output_unit \('cm'\)\."),
        (
            lambda: ReadSpec.of("a", delta_timestamps={"x": "0.1"}),
            r"Invalid delta_timestamps \(\{'x': '0\.1'\}\)\. Expected feature keys mapped to lists of seconds\.",
        ),
        (lambda: ReadSpec((SourceSpec("a"), SourceSpec("b")), mixture=False), r"Invalid mixture \(False\)"),
        (lambda: ReadSpec((SourceSpec("a"),), shuffle=1), r"Invalid shuffle \(1\)\. Expected True or False\."),
        (lambda: SourceSpec(""), r"Invalid source url \(''\)\. Expected a path or a URL\."),
        (
            lambda: ReadSpec.of("a", resize=(224, 0)),
            r"Invalid resize \(\(224, 0\)\)\. Expected \(height, width\) in pixels, each 1\.\.8192, or None\.",
        ),
    ],
    ids=[
        "no-source", "mixture-source", "one-weighed", "weight-count", "some-weights", "samples",
        "mixture-episodes", "duplicate", "negative-episode", "seed", "world", "workers", "tolerance",
        "seek-mode", "device", "depth-unit", "windows", "mixture-flag", "shuffle", "url", "resize",
    ],
)  # fmt: skip
def test_a_bad_spec_is_a_one_line_error(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        make()
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: "[1]", r"Invalid read spec \(list\)\. Expected a JSON object\."),
        (lambda d: "{", r"Invalid read spec \(Expecting property name .*\)\. Expected the JSON of ReadSpec"),
        (lambda d: {**d, "version": 2}, r"Invalid read spec version \(2\)\. Expected 1\."),
        (lambda d: {**d, "pool": 3}, r"Invalid read spec key \('pool'\)\. Expected one of \["),
        (
            lambda d: {**d, "sources": "a"},
            r"Invalid read spec sources \('a'\)\. Expected a list of sources\.",
        ),
        (lambda d: {**d, "sources": [{"path": "a"}]}, r"Invalid read spec source \(\{'path': 'a'\}\)\."),
        (lambda d: {**d, "seed": -1}, r"Invalid seed \(-1\)\."),
        (
            lambda d: {**d, "sources": []},
            r"Invalid sources \(\(\)\)\. Expected a non-empty list of SourceSpec\.",
        ),
    ],
    ids=["not-object", "not-json", "version", "unknown-key", "sources", "source", "seed", "no-sources"],
)
def test_a_bad_spec_file_is_a_one_line_error(edit: Any, message: str) -> None:
    edited = edit(json.loads(ReadSpec.of("a").to_json()))
    with pytest.raises(ValueError, match=message):
        ReadSpec.from_json(edited if isinstance(edited, str) else json.dumps(edited))


def samples(stream: EpisodeStream) -> list[dict[str, Any]]:
    return list(stream)


def assert_same_samples(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> None:
    assert len(left) == len(right) > 0
    for a, b in zip(left, right, strict=True):
        assert list(a) == list(b)
        for key, value in a.items():
            if isinstance(value, torch.Tensor):
                assert value.dtype == b[key].dtype and torch.equal(value, b[key]), key
            else:
                assert value == b[key], key


def test_a_spec_reads_the_same_samples_as_the_keywords(sample_resharded_ds: Path, tmp_path: Path) -> None:
    fps = EpisodeStream(sample_resharded_ds).fps
    keywords: dict[str, Any] = {
        "episodes": [1, 4, 6],
        "delta_timestamps": {"action": [0, 1 / fps], "observation.state": [-1 / fps, 0]},
        "episode_pool_size": 2,
        "seed": 7,
        "cache_dir": tmp_path / "cache",
    }
    by_keywords = EpisodeStream(sample_resharded_ds, **keywords)
    spec = ReadSpec.from_json(by_keywords.spec.to_json())
    by_spec = EpisodeStream(spec)
    assert by_spec.spec == spec == by_keywords.spec and spec.world_size == 1
    assert by_spec.identity == by_keywords.identity
    assert_same_samples(samples(by_keywords), samples(by_spec))
    assert by_spec.state_dict(1, 4, 0) == by_keywords.state_dict(1, 4, 0)


def test_a_mixture_spec_reads_the_same_samples_as_the_keywords(
    sample_ds: Path, sample_resharded_ds: Path, tmp_path: Path
) -> None:
    mixture = {"weights": [2, 1], "samples_per_epoch": 60, "episodes": [None, [0, 2]], "seed": 3}
    by_keywords = EpisodeStream([sample_resharded_ds, sample_ds], cache_dir=tmp_path / "c", **mixture)
    spec = ReadSpec(
        (SourceSpec(str(sample_resharded_ds), 2.0), SourceSpec(str(sample_ds), 1.0, (0, 2))),
        samples_per_epoch=60,
        seed=3,
        cache_dir=str(tmp_path / "c"),
    )
    by_spec = EpisodeStream(spec)
    assert by_spec.spec == by_keywords.spec == dataclasses.replace(spec, world_size=1)
    assert_same_samples(samples(by_keywords), samples(by_spec))


def test_the_spec_holds_what_it_holds_and_follows_the_seed(sample_resharded_ds: Path) -> None:
    spec = ReadSpec.of(sample_resharded_ds, episode_pool_size=3, world_size=1)
    with pytest.raises(ValueError, match=r"Invalid seed \(4\) with a ReadSpec\. Expected it in the spec"):
        EpisodeStream(spec, seed=4)
    stream = EpisodeStream(spec, image_transforms=lambda frame: frame, rank=0)
    state = stream.state_dict(batches_consumed=1, batch_size=2, num_workers=0)
    stream.load_state_dict({**state, "seed": 9})
    assert stream.spec == dataclasses.replace(spec, seed=9)


def test_the_world_size_comes_from_the_environment_once(
    sample_resharded_ds: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    stream = EpisodeStream(ReadSpec.of(sample_resharded_ds))
    assert (stream.rank, stream.world_size, stream.spec.world_size, stream.plan.world_size) == (2, 3, 3, 3)


# `EpisodeStream`'s keywords that are no field of a `ReadSpec`: the sources themselves, the process's rank,
# and what does not serialize (a callable, the filesystem's options).
NOT_IN_SPEC = ("self", "source", "rank", "image_transforms", "storage_options")


def _documented(doc: str, section: str) -> list[str]:
    """The names a Google-style docstring section documents (`a, b: ...` documents a and b)."""
    lines = inspect.cleandoc(doc).splitlines()
    start = lines.index(f"{section}:") + 1
    names = []
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break
        entry = re.match(r"^    ([a-z_0-9]+(?:, [a-z_0-9]+)*):", line)
        if entry:
            names += entry.group(1).split(", ")
    return names


def test_stream_keywords_are_the_spec_fields_with_their_defaults() -> None:
    """The `ReadSpec` fields state the read options once: `EpisodeStream.__init__` spells them out (for IDEs
    and docs), with the same names and defaults, keyword-only, and its docstring documents each."""
    params = inspect.signature(EpisodeStream.__init__).parameters
    stream = {name: p.default for name, p in params.items() if name not in NOT_IN_SPEC}
    assert stream == keyword_defaults()
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in stream)
    assert EpisodeStream.__doc__ is not None and ReadSpec.__doc__ is not None
    assert _documented(EpisodeStream.__doc__, "Args") == [n for n in params if n != "self"]
    fields = [f.name for f in dataclasses.fields(ReadSpec)]
    assert sorted(_documented(ReadSpec.__doc__, "Attributes")) == sorted(fields)
