"""`ReadSpec`: everything that decides what a training run reads, in one frozen, JSON-able record.

A run's sources (each a `SourceSpec`, as mosaicml/streaming's `Stream`: a URL, a weight, an episode
selection), its order (shuffle, seed, a weighted mixture's samples per epoch), its pool, its topology and
how it reads (cache, transport, windows, decode) are checked here, once. `EpisodeStream(spec)` reads it,
`ReadPlan.open(spec)` plans it and `lrs prewarm --spec FILE` fetches for it: a training job writes
`stream.spec.to_json()` next to its checkpoint, so prewarm and the run agree by reading one file.

What is not data stays out: callables (`image_transforms`), `storage_options` (they may hold credentials)
and a process's own rank. Nor do credentials in a URL: `to_json` and `repr` show each source URL redacted
(`cache.redaction`: its `user:password@` and its query), so a spec saved for a signed or credentialed URL
cannot be replayed as it stands; `with_urls` gives the URLs again (`lrs prewarm --spec FILE URL...`), and
reading a redacted URL fails in one line that says so. Torch-free, so that `lrs prewarm` starts without torch.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from cache import Remote
from cache.arguments import check_int
from cache.redaction import is_redacted, redact
from reader.schedule import check_weights
from reader.schedule.keys import MAX_SEED

SPEC_VERSION = 1
DEFAULT_POOL_SIZE = 16
DEFAULT_PREFETCH_EPISODES = 8
DEFAULT_DECODE_THREADS = 2
DEFAULT_DECODE_AHEAD = 8
# The largest frame side the reader decodes or resizes to (8K is 7680x4320): a camera's frames become
# tensors of 3 x height x width bytes each, times the frames of a batch and the workers' prefetch.
MAX_FRAME_SIDE = 8192

SeekMode = Literal["exact", "approximate"]
DepthUnit = Literal["mm", "m"]


def check_unit(unit: str) -> DepthUnit:
    """Validate `depth_output_unit`."""
    if unit == "mm":
        return "mm"
    if unit == "m":
        return "m"
    raise ValueError(f"Invalid depth_output_unit ({unit!r}). Expected 'mm' or 'm'.")


def default_pool_size(batch_size: int | None) -> int:
    """The default `episode_pool_size`: max(16, ceil(1.25 x batch_size)).

    A batch then fits in one round of the pool with room for the pieces that come and go during it, so
    it rarely holds one episode twice (measured: `scripts/bench/bench_reader.py`, mixing).
    """
    if batch_size is None:
        return DEFAULT_POOL_SIZE
    return max(DEFAULT_POOL_SIZE, -(-5 * check_int("batch_size", batch_size, 1) // 4))


def resolve_topology(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size): given, else torch.distributed when initialized, else RANK/WORLD_SIZE, else 0/1.

    The one place a run's topology is found (the stream, the read plan and `lrs prewarm` ask it).
    torch.distributed is consulted only where torch is already imported: it cannot be initialized otherwise.
    """
    if rank is None or world_size is None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            found = (dist.get_rank(), dist.get_world_size())
        else:
            found = (int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
        rank = found[0] if rank is None else rank
        world_size = found[1] if world_size is None else world_size
    check_int("world_size", world_size, 1)
    check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(f"Invalid rank ({rank}). Expected < world_size ({world_size}).")
    return rank, world_size


def check_resize(size: object) -> tuple[int, int]:
    """`resize` as (height, width): two whole numbers of pixels in 1..`MAX_FRAME_SIDE` (the frames are RGB
    once resized, so odd sizes are fine, unlike a 4:2:0 re-encode's)."""
    if (
        isinstance(size, (tuple, list))
        and len(size) == 2
        and all(isinstance(side, int) and not isinstance(side, bool) for side in size)
        and all(1 <= side <= MAX_FRAME_SIDE for side in size)
    ):
        return int(size[0]), int(size[1])
    raise ValueError(
        f"Invalid resize ({size!r}). Expected (height, width) in pixels, each 1..{MAX_FRAME_SIDE}, or None."
    )


def check_device_name(device: object) -> str:
    """`decode_device` as written: "cpu" or "cuda[:n]" (whether CUDA is there is `reader.decode.video`'s check)."""
    if device != "cpu" and not (isinstance(device, str) and (device == "cuda" or device.startswith("cuda:"))):
        raise ValueError(f"Invalid decode_device ({device!r}). Expected 'cpu' or 'cuda[:<index>]'.")
    return device


def check_seek_mode(mode: object) -> SeekMode:
    """torchcodec's seek mode."""
    if mode not in ("exact", "approximate"):
        raise ValueError(f"Invalid seek_mode ({mode!r}). Expected 'exact' or 'approximate'.")
    return mode


@dataclass(frozen=True)
class SourceSpec:
    """One dataset of a run.

    Attributes:
        url: the dataset's path or URL (see `cache.remote.resolve`), lrs/1 or plain v3; credentials in it
            stay in memory (`repr` and `ReadSpec.to_json` redact them).
        weight: its share of a weighted mixture's samples (None: every frame once per epoch).
        episodes: the episode indices read, ascending, each once (None: all).
    """

    url: str
    weight: float | None = None
    episodes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.url, os.PathLike):
            object.__setattr__(self, "url", os.fspath(self.url))
        if not isinstance(self.url, str) or not self.url:
            raise ValueError(f"Invalid source url ({self.url!r}). Expected a path or a URL.")
        if self.episodes is not None:
            object.__setattr__(self, "episodes", _episodes(self.episodes))

    def __repr__(self) -> str:
        return f"SourceSpec(url={redact(self.url)!r}, weight={self.weight!r}, episodes={self.episodes!r})"


@dataclass(frozen=True)
class ReadSpec:
    """What a training run reads and how (see the module docstring). Frozen and checked on creation.

    The fields carry `EpisodeStream`'s names and meanings (its docstring says each); in brief:

    Attributes:
        sources: the datasets; more than one (or `mixture=True`) is a mixture.
        mixture: whether samples carry `dataset_index` (default: more than one source).
        samples_per_epoch: a weighted mixture's samples per epoch (None: the frames of all sources).
        shuffle, seed: the order.
        episode_pool_size, batch_size: the pool (None: `default_pool_size(batch_size)`, see `pool_size`).
        world_size: ranks in the job (None: found when a stream or plan opens, `resolve_topology`).
        num_workers: the DataLoader's workers per rank, when known (prewarm plans for them; a stream refuses
            to iterate under another count).
        cache_dir, cache_max_bytes, prefetch_episodes: the node cache and how far ahead it is filled.
        return_uint8, delta_timestamps, tolerance_s, depth_output_unit, resize: what a sample holds.
        decode_device, decoder_cache_size, seek_mode, decode_threads, decode_ahead: how frames are decoded.
    """

    sources: tuple[SourceSpec, ...]
    mixture: bool | None = None
    samples_per_epoch: int | None = None
    shuffle: bool = True
    seed: int = 0
    episode_pool_size: int | None = None
    batch_size: int | None = None
    world_size: int | None = None
    num_workers: int | None = None
    cache_dir: str | None = None
    cache_max_bytes: int | None = None
    prefetch_episodes: int = DEFAULT_PREFETCH_EPISODES
    return_uint8: bool = False
    delta_timestamps: tuple[tuple[str, tuple[float, ...]], ...] | None = field(default=None)
    tolerance_s: float = 1e-4
    depth_output_unit: DepthUnit = "mm"
    decode_device: str = "cpu"
    decoder_cache_size: int | None = None
    seek_mode: SeekMode = "approximate"
    decode_threads: int = DEFAULT_DECODE_THREADS
    decode_ahead: int = DEFAULT_DECODE_AHEAD
    resize: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        sources = tuple(self.sources) if isinstance(self.sources, (list, tuple)) else self.sources
        if (
            not isinstance(sources, tuple)
            or not sources
            or not all(isinstance(s, SourceSpec) for s in sources)
        ):
            raise ValueError(f"Invalid sources ({self.sources!r}). Expected a non-empty list of SourceSpec.")
        object.__setattr__(self, "sources", sources)
        if self.mixture is None:
            object.__setattr__(self, "mixture", len(sources) > 1)
        _check_flag("mixture", self.mixture)
        if len(sources) > 1 and not self.mixture:
            raise ValueError(f"Invalid mixture (False) for {len(sources)} sources. Expected True.")
        self._check_order()
        self._check_reading()
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))
        if self.delta_timestamps is not None:
            object.__setattr__(self, "delta_timestamps", _windows(self.delta_timestamps))

    def _check_order(self) -> None:
        weights = [s.weight for s in self.sources]
        if any(w is not None for w in weights):
            if not self.mixture:
                raise ValueError("Invalid weights for one source. Expected a list of sources to weigh.")
            if None in weights:
                raise ValueError(
                    f"Invalid weights ({weights}). Expected a weight for every source or for none."
                )
            checked = check_weights([w for w in weights if w is not None], len(weights))
            object.__setattr__(
                self, "sources", tuple(_with_weight(s, w) for s, w in zip(self.sources, checked, strict=True))
            )
        if self.samples_per_epoch is not None:
            check_int("samples_per_epoch", self.samples_per_epoch, 1)
            if self.weights is None:
                raise ValueError(
                    "Invalid samples_per_epoch without weights. Expected weights to share them out."
                )
        _check_flag("shuffle", self.shuffle)
        check_int("seed", self.seed, 0, MAX_SEED)
        for name in (
            "episode_pool_size",
            "batch_size",
            "world_size",
            "cache_max_bytes",
            "decoder_cache_size",
        ):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        if self.num_workers is not None:
            check_int("num_workers", self.num_workers, 0)

    def _check_reading(self) -> None:
        for name in ("prefetch_episodes", "decode_threads", "decode_ahead"):
            check_int(name, getattr(self, name), 0)
        _check_flag("return_uint8", self.return_uint8)
        tolerance = self.tolerance_s
        if not _real(tolerance) or not tolerance >= 0:
            raise ValueError(f"Invalid tolerance_s ({tolerance!r}). Expected a number of seconds >= 0.")
        check_unit(self.depth_output_unit)
        check_device_name(self.decode_device)
        check_seek_mode(self.seek_mode)
        if self.resize is not None:
            object.__setattr__(self, "resize", check_resize(self.resize))  # JSON gives a list

    @classmethod
    def of(
        cls,
        source: str | os.PathLike[str] | Remote | Sequence[str | os.PathLike[str] | Remote],
        *,
        weights: Sequence[float] | None = None,
        episodes: Sequence[int] | Sequence[Sequence[int] | None] | None = None,
        shuffle: bool = True,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        return_uint8: bool = False,
        **options: Any,
    ) -> ReadSpec:
        """The spec of `EpisodeStream`'s keyword form: `source` one dataset or a list of them (a mixture,
        even of one), `weights` and `episodes` one per source in a mixture; `options` the other fields.

        Raises:
            ValueError: a bad argument (the message names it).
        """
        given, mixture = _sources_given(source)
        if weights is not None and mixture:
            weights = check_weights(weights, len(given))
        per_source = _per_source(weights, len(given), mixture)
        selections = _mixture_selections(episodes, len(given)) if mixture else [episodes]
        sources = tuple(
            SourceSpec(_url(src, i, mixture), w, None if e is None else tuple(e))
            for i, (src, w, e) in enumerate(zip(given, per_source, selections, strict=True))
        )
        return cls(
            sources,
            mixture=mixture,
            shuffle=bool(shuffle),
            return_uint8=bool(return_uint8),
            delta_timestamps=None if delta_timestamps is None else _windows(delta_timestamps),
            **options,
        )

    @property
    def weights(self) -> tuple[float, ...] | None:
        """A weighted mixture's weights, one per source (None: unweighted)."""
        weights = tuple(s.weight for s in self.sources)
        return None if weights[0] is None else weights  # type: ignore[return-value]

    @property
    def pool_size(self) -> int:
        """The pool each consumer holds: `episode_pool_size`, else `default_pool_size(batch_size)`."""
        return (
            self.episode_pool_size
            if self.episode_pool_size is not None
            else default_pool_size(self.batch_size)
        )

    @property
    def windows(self) -> dict[str, list[float]] | None:
        """`delta_timestamps` as `EpisodeStream` takes it."""
        return None if self.delta_timestamps is None else {k: list(v) for k, v in self.delta_timestamps}

    @property
    def redacted_urls(self) -> tuple[str, ...]:
        """The source URLs that `to_json` saved without their credentials: `with_urls` must give them again
        before the spec can be read."""
        return tuple(s.url for s in self.sources if is_redacted(s.url))

    def with_urls(self, urls: Sequence[str | os.PathLike[str]]) -> ReadSpec:
        """This spec with its source URLs given again, one per source in order, credentials included: a
        spec read back by `from_json` holds a credentialed URL redacted.

        Raises:
            ValueError: another number of URLs, or one that is not its source's URL once redacted.
        """
        given = [os.fspath(u) for u in urls]
        if len(given) != len(self.sources):
            raise ValueError(
                f"Invalid URLs ({len(given)}). Expected {len(self.sources)}, one per source of the spec."
            )
        for i, (url, source) in enumerate(zip(given, self.sources, strict=True)):
            if redact(url) != redact(source.url):
                raise ValueError(
                    f"Invalid URL of source {i} ({redact(url)}). Expected the spec's ({redact(source.url)}), "
                    "with the credentials it was saved without."
                )
        return replace(
            self, sources=tuple(replace(s, url=u) for s, u in zip(self.sources, given, strict=True))
        )

    def to_json(self) -> str:
        """The spec as JSON text, with a version; `ReadSpec.from_json` reads it back equal, but for the
        credentials of a source URL (its userinfo and query), which are saved redacted (`redacted_urls`)."""
        data: dict[str, Any] = {"version": SPEC_VERSION}
        for f in fields(self):
            data[f.name] = getattr(self, f.name)
        data["sources"] = [
            {
                "url": redact(s.url),
                "weight": s.weight,
                "episodes": None if s.episodes is None else list(s.episodes),
            }
            for s in self.sources
        ]
        data["delta_timestamps"] = self.windows
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> ReadSpec:
        """Read what `to_json` wrote.

        Raises:
            ValueError: not JSON, another version, an unknown or missing key, or a bad value.
        """
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"Invalid read spec ({exc}). Expected the JSON of ReadSpec.to_json().") from None
        if not isinstance(data, dict):
            raise ValueError(f"Invalid read spec ({type(data).__name__}). Expected a JSON object.")
        if data.get("version") != SPEC_VERSION:
            raise ValueError(f"Invalid read spec version ({data.get('version')!r}). Expected {SPEC_VERSION}.")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names - {"version"})
        if unknown:
            raise ValueError(f"Invalid read spec key ({unknown[0]!r}). Expected one of {sorted(names)}.")
        if not isinstance(data.get("sources"), list):
            raise ValueError(
                f"Invalid read spec sources ({data.get('sources')!r}). Expected a list of sources."
            )
        values = {k: v for k, v in data.items() if k in names}
        values["sources"] = tuple(_source_from_json(s) for s in data["sources"])
        return cls(**values)


def keyword_defaults() -> dict[str, Any]:
    """The keywords of `EpisodeStream` (and `ReadSpec.of`) that a spec holds, with their defaults: the fields
    of `ReadSpec` but `sources` and `mixture` (a list of sources says those), and `weights` and `episodes`,
    one per source (`SourceSpec.weight` and `SourceSpec.episodes`)."""
    per_source = {f.name: f.default for f in fields(SourceSpec)}
    spec = {f.name: f.default for f in fields(ReadSpec) if f.name not in ("sources", "mixture")}
    return {"weights": per_source["weight"], "episodes": per_source["episodes"], **spec}


def check_spec_alone(given: Mapping[str, Any]) -> None:
    """With a `ReadSpec`, the keywords it holds must be left at their defaults (the spec says them).

    Raises:
        ValueError: a keyword given another value (the message names it).
    """
    defaults = keyword_defaults()
    for name, value in given.items():
        default = defaults[name]
        if value is not default and value != default:
            raise ValueError(
                f"Invalid {name} ({value!r}) with a ReadSpec. Expected it in the spec: "
                f"dataclasses.replace(spec, {name}=...)."
            )


def _source_from_json(data: Any) -> SourceSpec:
    if not isinstance(data, dict) or "url" not in data or set(data) - {"url", "weight", "episodes"}:
        raise ValueError(
            f"Invalid read spec source ({data!r}). Expected an object with url, weight, episodes."
        )
    episodes = data.get("episodes")
    if episodes is not None and not isinstance(episodes, list):
        raise ValueError(f"Invalid episodes ({episodes!r}). Expected a list of episode indices or null.")
    return SourceSpec(data["url"], data.get("weight"), None if episodes is None else tuple(episodes))


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"Invalid {name} ({value!r}). Expected True or False.")


def _real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _with_weight(source: SourceSpec, weight: float) -> SourceSpec:
    return source if source.weight == weight else SourceSpec(source.url, weight, source.episodes)


def _episodes(episodes: Any) -> tuple[int, ...]:
    """An episode selection, ascending, each index once (whether each exists is the catalog's to say)."""
    chosen = sorted(episodes)
    for e in chosen:
        check_int("episode index", e, 0)
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"Invalid episodes ({list(episodes)}). Expected each episode index once.")
    if not chosen:
        raise ValueError("Invalid episodes ([]). Expected at least one episode index.")
    return tuple(int(e) for e in chosen)


def _windows(windows: Any) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """delta_timestamps as (key, seconds) pairs, in the order given (whether each key exists and each
    offset falls on a frame is `reader.plan.windows`' to say)."""
    items = list(windows.items() if isinstance(windows, Mapping) else windows)
    pairs = []
    for item in items:
        key, seconds = item
        if (
            not isinstance(key, str)
            or isinstance(seconds, (str, bytes))
            or not hasattr(seconds, "__iter__")
            or not all(_real(s) for s in seconds)
        ):
            raise ValueError(
                f"Invalid delta_timestamps ({dict(items)!r}). Expected feature keys mapped to lists of seconds."
            )
        pairs.append((key, tuple(float(s) for s in seconds)))
    return tuple(pairs)


def _sources_given(source: Any) -> tuple[list[Any], bool]:
    """(the sources, whether they form a mixture): a list or tuple is a mixture, even of one."""
    if isinstance(source, (list, tuple)):
        if not source:
            raise ValueError("Invalid source ([]). Expected a dataset, or a non-empty list of them.")
        return list(source), True
    return [source], False


def _url(source: Any, index: int, mixture: bool) -> str:
    if isinstance(source, Remote):
        return source.url
    if not isinstance(source, (str, os.PathLike)):
        what = f"source {index} of the mixture" if mixture else "source"
        raise ValueError(f"Invalid {what} ({source!r}). Expected a path, a URL or a cache.Remote.")
    return os.fspath(source)


def _per_source(weights: Sequence[float] | None, count: int, mixture: bool) -> list[float | None]:
    if weights is None:
        return [None] * count
    if not mixture:
        raise ValueError("Invalid weights for one source. Expected a list of sources to weigh.")
    return list(weights)


def _mixture_selections(episodes: Any, count: int) -> list[Any]:
    if episodes is None:
        return [None] * count
    chosen = list(episodes)
    if len(chosen) != count or not all(e is None or isinstance(e, (list, tuple, range)) for e in chosen):
        raise ValueError(
            f"Invalid episodes for a mixture of {count} sources. Expected one list of episode "
            "indices (or None) per source."
        )
    return chosen
