"""The datasets of an `EpisodeStream`, each as the stream reads it: its catalog, its view of the node
cache, its read options (windows in its own fps, its depth cameras' quantizers) and its episodes."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cache import NodeCache
from reader.decode.depth import Quantizer, is_depth
from reader.errors import DatasetError
from reader.format.catalog import Catalog
from reader.format.v3 import INFO_PATH
from reader.plan.read_plan import FETCH_THREADS, ReadPlan
from reader.runtime.pool import Options
from reader.runtime.windows import Windows, delta_indices


@dataclass(frozen=True)
class StreamSource:
    """One source of the stream: its dataset, its view of the node cache, how it is read, which of its
    episodes, and the keys left out of its samples (a mixture's keys not common to every source)."""

    catalog: Catalog
    cache: NodeCache
    options: Options
    episodes: Sequence[int]
    drop: frozenset[str]


def data_file_size(source: StreamSource, rel: str) -> int:
    """The size of data file `rel` of `source`: from its index, else of the whole file fetched into the cache."""
    size = source.catalog.file_sizes.get(rel)
    if size is not None:
        return size
    # Plain v3 lists no sizes, and a remote's size query cannot always tell a transient failure from a
    # missing file (fsspec's HTTP `info`), so v3 data files are fetched whole into the cache (once per
    # node; local sources are read in place) and their row groups read from there.
    return os.path.getsize(source.cache.fetch(rel))


def open_sources(
    plan: ReadPlan,
    shared: Options,
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    *,
    cache_dir: str | os.PathLike[str],
    cache_max_bytes: int | None,
) -> tuple[StreamSource, ...]:
    """Each source of `plan`, read with the `shared` options plus its own windows, quantizers and checks.

    Args:
        plan: the stream's plan (one source, or a mixture's).
        shared: what every source reads the same way; its windows, keep and depth are
            replaced by each source's.
        delta_timestamps: the stream's windows in seconds (a mixture's keys must be common to every source).
        cache_dir: the node cache directory every source shares.
        cache_max_bytes: the cache budget.

    Raises:
        ValueError: a mixture's window key is missing from a source.
        DatasetError: a depth camera's quantizer parameters are invalid.
    """
    common = plan.common_keys if plan.mixture else None
    sources = []
    for i, planned in enumerate(plan.sources):
        catalog = planned.catalog
        video_keys = catalog.info.video_keys
        keys = [*catalog.column_order, *video_keys]
        for key in delta_timestamps or {}:
            if common is not None and key not in common:
                raise ValueError(
                    f"Invalid delta_timestamps key {key!r}. Expected a feature every source of the "
                    f"mixture has: {catalog.remote.shown} (source {i}) or another lacks it."
                )
        windows = Windows(
            delta_indices(delta_timestamps, fps=catalog.info.fps, tolerance_s=shared.tolerance_s, keys=keys)
        )
        options = replace(
            shared,
            windows=windows,
            keep={k: max(d) - min(d) for k, d in windows.offsets.items() if k in video_keys},
            depth=_quantizers(catalog),
        )
        cache = NodeCache(
            cache_dir,
            catalog.remote,
            fingerprint=catalog.fingerprint,
            max_bytes=cache_max_bytes,
            max_workers=FETCH_THREADS,
        )
        sources.append(StreamSource(catalog, cache, options, planned.episodes, planned.drop))
    return tuple(sources)


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
