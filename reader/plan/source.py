"""`OpenedSource`: one dataset of a run once opened, the one record of it that the plan, the pool and the
consumer share, and `open_sources`, the one place where a spec's sources are opened.

A source is opened once, in `ReadPlan.open`: its catalog (`reader.format.catalog`), its selected
episodes, the keys a mixture leaves out of its samples, the stream's windows in its own fps, its depth
cameras' quantizers and, when the run reads through a node cache, that cache. Torch-free: `lrs prewarm`
opens the same sources (without a cache) to plan what to fetch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cache import LrsError, NodeCache, Remote
from cache.redaction import redact
from reader.decode.depth import Quantizer, is_depth
from reader.errors import DatasetError
from reader.format.catalog import Catalog
from reader.format.v3 import INFO_PATH, with_frame_size
from reader.plan.spec import ReadSpec, SourceSpec
from reader.plan.windows import Windows, delta_indices

_log = logging.getLogger("lrs.reader")

# Downloads in flight per process (the stream's, prewarm's): the first batch needs the whole pool's videos.
FETCH_THREADS = 8


@dataclass(frozen=True)
class OpenedSource:
    """One dataset of a run, opened (see the module docstring). Built by `open_sources` only.

    Attributes:
        position: its place in the spec's sources.
        spec: the user's record of it (`ReadSpec.sources[position]`).
        catalog: its index (lrs/1) or v3 metadata.
        episodes: the selected episode indices, ascending.
        dataset_index: what its samples carry as `dataset_index` (a mixture's position; None: one dataset).
        drop: keys left out of its samples (a mixture keeps the features common to every source).
        windows: the run's delta windows in this source's frames (its fps).
        keep: camera -> frames a window rereads.
        depth: depth camera -> its quantizer.
        cache: the node cache the run reads it through (None: planned only, no cache opened).
    """

    position: int
    spec: SourceSpec
    catalog: Catalog
    episodes: Sequence[int]
    dataset_index: int | None = None
    drop: frozenset[str] = frozenset()
    windows: Windows = field(default_factory=lambda: Windows({}))
    keep: Mapping[str, int] = field(default_factory=dict)
    depth: Mapping[str, Quantizer] = field(default_factory=dict)
    cache: NodeCache | None = None

    @property
    def display(self) -> Callable[[str], str]:
        """A dataset-relative path as messages show it (credentials redacted)."""
        return self.catalog.remote.display

    @property
    def node_cache(self) -> NodeCache:
        """The node cache the run reads this source through.

        Raises:
            ValueError: the source was opened for planning only (no `cache_dir`).
        """
        if self.cache is None:
            raise ValueError(
                f"Invalid use of source {self.position} ({self.catalog.remote.shown}) for reading: it was "
                "opened for planning only. Expected ReadPlan.open(spec, cache_dir=...)."
            )
        return self.cache

    def data_file_size(self, rel: str) -> int:
        """The size of data file `rel`: from the index, else of the whole file fetched into the cache."""
        size = self.catalog.file_sizes.get(rel)
        if size is not None:
            return size
        # Plain v3 lists no sizes, and a remote's size query cannot always tell a transient failure from a
        # missing file (fsspec's HTTP `info`), so v3 data files are fetched whole into the cache (once per
        # node; local sources are read in place) and their row groups read from there.
        return os.path.getsize(self.node_cache.fetch(rel))


def open_sources(
    spec: ReadSpec,
    *,
    remotes: Sequence[Remote | None] | None = None,
    storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[OpenedSource, ...]:
    """Every source of `spec`, opened: catalogs, selections, a mixture's common keys, windows, quantizers,
    and with `cache_dir` the node cache each is read through (one directory, each dataset under its
    fingerprint).

    Raises:
        ValueError: an episode index beyond a dataset's episodes, or a mixture's window key missing from a
            source.
        DatasetError: a source's metadata is missing or malformed (a mixture's error names the source), a
            mixture's common features disagree, or a depth camera's quantizer parameters are invalid.
    """
    mixture = bool(spec.mixture)
    remotes = list(remotes) if remotes is not None else [None] * len(spec.sources)
    catalogs = [
        _open_source(r if r is not None else s.url, i, mixture, storage_options)
        for i, (s, r) in enumerate(zip(spec.sources, remotes, strict=True))
    ]
    selections = [
        _selection(s.episodes, len(c.episodes)) for s, c in zip(spec.sources, catalogs, strict=True)
    ]
    drops = _disabled_keys(catalogs, spec.resize) if mixture else [frozenset[str]()] * len(catalogs)
    common = set(catalogs[0].info.features) - drops[0] if mixture else None
    sources = []
    for i, (source_spec, catalog) in enumerate(zip(spec.sources, catalogs, strict=True)):
        windows = _windows(catalog, spec, common, i)
        video_keys = catalog.info.video_keys
        sources.append(
            OpenedSource(
                position=i,
                spec=source_spec,
                catalog=catalog,
                episodes=selections[i],
                dataset_index=i if mixture else None,
                drop=drops[i],
                windows=windows,
                keep={k: max(d) - min(d) for k, d in windows.offsets.items() if k in video_keys},
                depth=_quantizers(catalog),
                cache=None if cache_dir is None else _node_cache(catalog, cache_dir, spec.cache_max_bytes),
            )
        )
    return tuple(sources)


def _windows(catalog: Catalog, spec: ReadSpec, common: set[str] | None, index: int) -> Windows:
    """The spec's windows in `catalog`'s frames; a mixture's keys must be `common` to every source."""
    delta_timestamps = spec.windows
    keys = [*catalog.column_order, *catalog.info.video_keys]
    for key in delta_timestamps or {}:
        if common is not None and key not in common:
            raise ValueError(
                f"Invalid delta_timestamps key {key!r}. Expected a feature every source of the "
                f"mixture has: {catalog.remote.shown} (source {index}) or another lacks it."
            )
    return Windows(
        delta_indices(delta_timestamps, fps=catalog.info.fps, tolerance_s=spec.tolerance_s, keys=keys)
    )


def _node_cache(catalog: Catalog, cache_dir: str | os.PathLike[str], max_bytes: int | None) -> NodeCache:
    return NodeCache(
        cache_dir,
        catalog.remote,
        fingerprint=catalog.fingerprint,
        max_bytes=max_bytes,
        max_workers=FETCH_THREADS,
    )


def _quantizers(catalog: Catalog) -> dict[str, Quantizer]:
    """The quantizer of each depth camera, from `meta/info.json`.

    Raises:
        DatasetError: a depth camera's quantizer parameters are invalid (naming the camera).
    """
    features = catalog.info.features
    quantizers = {}
    for key in catalog.info.video_keys:
        if is_depth(features[key]):
            try:
                quantizers[key] = Quantizer.from_feature(features[key])
            except ValueError as exc:
                raise DatasetError(
                    f"Invalid depth camera {key!r}: {exc}", file=catalog.remote.display(INFO_PATH)
                ) from exc
    return quantizers


def _open_source(
    source: str | Remote, index: int, mixture: bool, storage_options: dict[str, Any] | None
) -> Catalog:
    """The catalog of one source; in a mixture, an error names which source failed."""
    try:
        return Catalog.open(source, storage_options=storage_options)
    except LrsError as exc:
        if not mixture:
            raise
        url = source.shown if isinstance(source, Remote) else redact(source)
        raise DatasetError(f"Invalid source {index} of the mixture ({url}): {exc}") from exc


def _disabled_keys(catalogs: list[Catalog], resize: tuple[int, int] | None) -> list[frozenset[str]]:
    """Per source, the features a mixture leaves out: those not every source has (lerobot's
    `MultiLeRobotDataset` rule). With `resize`, colour cameras are compared at that size, which the stream
    gives every one of them.

    Raises:
        DatasetError: a common feature differs in dtype or shape between two sources, or none is common.
    """
    features = [c.info.features for c in catalogs]
    common = set(features[0]).intersection(*features[1:])
    if not common:
        raise DatasetError("Invalid mixture: its sources have no feature in common. Expected at least one.")
    for key in sorted(common):
        for i in range(1, len(features)):
            for name in ("dtype", "shape"):
                a, b = _as_read(features[0][key], name, resize), _as_read(features[i][key], name, resize)
                if a != b:
                    camera = _colour_camera(features[0][key])
                    fix = " or resize=(H, W), which gives every colour camera one size" if camera else ""
                    raise DatasetError(
                        f"Invalid mixture: feature {key!r} has {name} {a!r} in source 0 "
                        f"({catalogs[0].remote.shown}) and {b!r} in source {i} ({catalogs[i].remote.shown}). "
                        f"Expected the same dtype and shape wherever a key is common to every source{fix}."
                    )
    disabled = [frozenset(set(f) - common) for f in features]
    for catalog, keys in zip(catalogs, disabled, strict=True):
        if keys:
            _log.warning(
                "lrs: the mixture leaves out %s of %s: not every source has them.",
                ", ".join(sorted(keys)),
                catalog.remote.shown,
            )
    return disabled


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def _colour_camera(feature: dict[str, Any]) -> bool:
    return feature.get("dtype") in ("video", "image") and not is_depth(feature)


def _as_read(feature: dict[str, Any], name: str, resize: tuple[int, int] | None) -> Any:
    """The feature's `name` ("dtype", "shape") as the stream yields it: a colour camera's shape at `resize`."""
    if name == "shape" and resize is not None and _colour_camera(feature):
        resized = with_frame_size(feature, *resize)
        if resized is not None:
            return resized
    return _plain(feature.get(name))


def _selection(episodes: Sequence[int] | None, total: int) -> Sequence[int]:
    """The spec's selection (already ascending, each index once) within the dataset's `total` episodes."""
    if episodes is None:
        return range(total)  # every episode: pickles in a few bytes, whatever the dataset's size
    for e in episodes:
        if e >= total:
            raise ValueError(f"Invalid episode index ({e}). Expected < {total}, the dataset's episodes.")
    return list(episodes)
