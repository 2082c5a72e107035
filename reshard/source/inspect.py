"""Describe the layout of any v3 dataset: how its tables and videos are cut, and whether it is lrs/1.

Parquet metadata comes from DuckDB (`parquet_metadata`, `parquet_schema`) over the data files' footers:
the files themselves for a local dataset, footer stubs fetched with one ranged read each for a remote
one (see `reader.format.locate.footer_bytes`), so inspecting a large remote dataset moves kilobytes. Video
keyframes are read from the packets of a few files per camera (`--probe-videos`).
"""

from __future__ import annotations

import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from cache.printable import printable_lines
from cache.progress import plural
from cache.remote import Remote
from reader.errors import DatasetError, LayoutError
from reader.format.index import LAYOUT_JSON, parse_layout_json
from reader.format.jsonfile import cat_json
from reader.format.locate import footer_bytes
from reshard.job.execute import local_copy
from reshard.source.model import V3Source, describe, open_source
from reshard.video.compare import probe_video
from reshard.video.encode import DEFAULT_CRF, DEFAULT_PRESET


def inspect_dataset(
    url: str, *, probe_videos: int = 2, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON-able report of a v3 dataset's layout.

    Args:
        url: the dataset (path or URL).
        probe_videos: video files per camera whose keyframes are read.
        storage_options: passed to the fsspec filesystem.

    Raises:
        DatasetError: the dataset's metadata is missing or malformed.
    """
    source = open_source(url, storage_options=storage_options, check_files=False)
    with tempfile.TemporaryDirectory(prefix="lrs-inspect-") as tmp:
        data = _data_report(source, Path(tmp))
        videos = {key: _video_report(source, key, probe_videos, Path(tmp)) for key in source.video_keys}
    summary = describe(source)
    head = ("url", "codebase_version", "fps", "episodes", "frames", "episode_length", "tasks")
    return {
        **{key: summary[key] for key in head},
        "data": data,
        "videos": videos,
        "lrs": _layout_report(source.remote, videos),
    }


def _spread(values: list[float] | list[int]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _footers(source: V3Source, tmp: Path) -> dict[str, str]:
    """A local parquet file holding each data file's footer: the file itself when local."""
    paths = {}
    for number, rel in enumerate(source.data_files()):
        local = source.remote.local_path(rel)
        if local is None:
            local = str(tmp / f"footer-{number}.parquet")
            Path(local).write_bytes(footer_bytes(source.remote, rel))
        paths[rel] = local
    return paths


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def _data_report(source: V3Source, tmp: Path) -> dict[str, Any]:
    footers = _footers(source, tmp)
    for rel, path in footers.items():  # a bad file is named here, not in a DuckDB traceback
        try:
            pq.read_metadata(path)
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(
                f"Invalid parquet file ({exc}). Expected a readable parquet footer.",
                file=source.remote.display(rel),
            ) from exc
    files = _sql_list(list(footers.values()))
    # Closed on every path, an error included: closing joins duckdb's worker threads here, not at exit.
    with duckdb.connect() as con:
        groups = con.execute(
            f"""
            SELECT file_name, row_group_id, any_value(row_group_num_rows), any_value(row_group_compressed_bytes),
                   max(TRY_CAST(stats_min AS BIGINT)) FILTER (WHERE path_in_schema = 'episode_index'),
                   max(TRY_CAST(stats_max AS BIGINT)) FILTER (WHERE path_in_schema = 'episode_index'),
                   any_value(compression)
            FROM parquet_metadata({files})
            GROUP BY file_name, row_group_id ORDER BY file_name, row_group_id
            """
        ).fetchall()
        schema = con.execute(
            f"SELECT name, duckdb_type, num_children FROM parquet_schema({_sql_list(list(footers.values())[:1])})"
        ).fetchall()
    per_file = Counter(row[0] for row in groups)
    spans = [(row[4], row[5]) for row in groups if row[4] is not None and row[5] is not None]
    episodes_per_group = [hi - lo + 1 for lo, hi in spans]
    groups_per_episode = Counter(e for lo, hi in spans for e in range(lo, hi + 1))
    page_index = [_has_page_index(path) for path in footers.values()]
    return {
        "files": len(footers),
        "row_groups": len(groups),
        "row_groups_per_file": _spread(list(per_file.values())),
        "episodes_per_row_group": _spread(episodes_per_group),
        "episodes_split_across_row_groups": sum(1 for n in groups_per_episode.values() if n > 1),
        "rows_per_row_group": _spread([row[2] for row in groups]),
        "compression": sorted({row[6] for row in groups}),
        "page_index": "yes" if all(page_index) else ("partial" if any(page_index) else "no"),
        "one_episode_per_row_group": bool(spans)
        and len(spans) == len(groups)
        and max(episodes_per_group) == 1
        and max(groups_per_episode.values()) == 1,
        "columns": _top_level(schema),
    }


def _has_page_index(path: str) -> bool:
    meta = pq.read_metadata(path)
    return meta.num_row_groups > 0 and all(
        meta.row_group(g).column(c).has_offset_index
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    )


def _top_level(schema: list[tuple[str, str | None, int | None]]) -> dict[str, str | None]:
    """The top-level columns and DuckDB types of a `parquet_schema` listing (a flattened tree)."""
    rows = iter(schema[1:])
    columns: dict[str, str | None] = {}

    def skip(children: int) -> None:
        for _ in range(children):
            skip(next(rows)[2] or 0)

    for _ in range(schema[0][2] or 0):
        name, kind, children = next(rows)
        columns[name] = kind
        skip(children or 0)
    return columns


def _video_report(source: V3Source, key: str, probe_files: int, tmp: Path) -> dict[str, Any]:
    info = source.info.features[key].get("info", {})
    by_file = source.episodes_by_video_file(key)
    report: dict[str, Any] = {
        "codec": info.get("video.codec"),
        "pix_fmt": info.get("video.pix_fmt"),
        "gop": info.get("video.g"),
        "files": len(by_file),
        "episodes_per_file": _spread([len(eps) for eps in by_file.values()]),
        "probed_files": 0,
    }
    aligned = total = 0
    tolerance = 0.5 / source.info.fps
    for rel, episodes in list(by_file.items())[:probe_files]:
        with local_copy(source.remote, rel, tmp) as path:
            probe = probe_video(path, camera=key)
        report.update(probed_codec=probe.codec, probed_gop=probe.gop, probed_pix_fmt=probe.pix_fmt)
        report["probed_files"] += 1
        for episode in episodes:
            start = episode.video(key).from_timestamp
            total += 1
            aligned += any(abs(t - start) <= tolerance for t in probe.keyframe_times_s)
    report["episode_starts_on_keyframe"] = {"aligned": aligned, "probed": total}
    return report


def _used(params: Any, videos: dict[str, dict[str, Any]]) -> Any:
    """The parameters as the re-encode used them: a default (None) replaced by the codec's default, and
    the keyframe interval by the one `meta/info.json` records (the source's, else 2)."""
    if not isinstance(params, dict) or params.get("video") not in DEFAULT_CRF:
        return params
    mode = params["video"]
    used = dict(params)
    if used.get("crf") is None:
        used["crf"] = DEFAULT_CRF[mode]
    if used.get("preset") is None:
        used["preset"] = DEFAULT_PRESET[mode]
    gops = [v["gop"] for v in videos.values() if v.get("codec") == mode and v.get("gop") is not None]
    if used.get("gop") is None and gops:
        used["gop"] = gops[0]
    return used


def _layout_report(remote: Remote, videos: dict[str, dict[str, Any]]) -> dict[str, Any]:
    try:
        layout = parse_layout_json(cat_json(remote, LAYOUT_JSON), file=remote.display(LAYOUT_JSON))
    except (FileNotFoundError, LayoutError) as exc:
        return {
            "is_lrs": False,
            "why": "no meta/lrs/layout.json" if isinstance(exc, FileNotFoundError) else str(exc),
        }
    return {
        "is_lrs": True,
        "tool": layout.get("tool"),
        "params": _used(layout.get("params"), videos),
        "reencoded": len(layout.get("reencoded", [])),
    }


def _params(params: dict[str, Any]) -> str:
    """`{'video': 'copy', 'gop': None}` -> `video=copy, gop=-`."""
    return ", ".join(f"{k}={'-' if v is None else v}" for k, v in params.items())


def render(report: dict[str, Any]) -> str:
    """The report as text for humans, each line `printable` (camera keys come from the dataset)."""

    def spread(s: dict[str, float] | None) -> str:
        return "-" if s is None else f"{s['min']:g}/{s['median']:g}/{s['max']:g}"

    data, lrs = report["data"], report["lrs"]
    lines = [
        f"dataset   {report['url']} ({report['codebase_version']}, {report['fps']} fps)",
        f"lrs/1     {'yes' if lrs['is_lrs'] else 'no'}"
        + (f" ({lrs['tool']}; {_params(lrs['params'])})" if lrs["is_lrs"] else f" ({lrs['why']})"),
        f"episodes  {report['episodes']} ({report['frames']} frames; length min/median/max "
        f"{spread(report['episode_length'])}), {report['tasks']} tasks",
        f"data      {plural(data['files'], 'file')}, {plural(data['row_groups'], 'row group')} "
        f"({', '.join(data['compression'])}); page index: {data['page_index']}",
        f"          row groups per file {spread(data['row_groups_per_file'])}, episodes per row group "
        f"{spread(data['episodes_per_row_group'])}, {data['episodes_split_across_row_groups']} episodes split "
        f"across row groups; one episode per row group: {'yes' if data['one_episode_per_row_group'] else 'no'}",
    ]
    for key, video in report["videos"].items():
        starts = video["episode_starts_on_keyframe"]
        lines.append(
            f"video     {key}: {video['codec']} {video['pix_fmt']} g={video['gop']}, {plural(video['files'], 'file')}, "
            f"episodes per file {spread(video['episodes_per_file'])}"
        )
        if video["probed_files"]:
            lines.append(
                f"          probed {plural(video['probed_files'], 'file')}: {video['probed_codec']} GOP "
                f"{video['probed_gop']}, {starts['aligned']}/{starts['probed']} episode starts on a keyframe"
            )
    return printable_lines(lines)
