"""What a node cache's byte budget costs as the cache grows: prints JSON.

Cases, at each N (default 2,000 and 8,000 files of 1-3 kB from a `file://` source, which the cache treats
as remote storage and copies, so the cache's own bookkeeping is most of the cost):

- `prewarm`: `fetch_in_order` of N files into an empty cache, 4 download threads, without a budget and
  with one that never evicts (100 GiB, as `lrs prewarm --cache-max-bytes 100GiB`);
- `full`: a cache already holding N files; then M more files downloaded without a budget, and M more
  with a budget equal to what the cache holds, so that every download evicts one file (what a training
  stream over a full budgeted cache does on each miss: the proxy for its samples/s); then hits (`fetch`
  and `hold` of cached files) with and without the budget.

- `stream` (with `--stream DIR`, an lrs/1 dataset): one epoch of an `EpisodeStream` (uint8, no DataLoader
  workers) read through a cache that already holds the N files, without a budget and with one they fill
  (every video the stream fetches evicts one of them): the issue's "stream over a full budgeted cache".

Every case runs in a fresh process; the cases are interleaved (rep x N x tree x case). `--baseline DIR`
runs each case a second time against another checkout (e.g. the main branch before the change), with
the same script and data, so that before and after come from one run on one machine.

    PYTHONPATH=. python scripts/bench/cache_budget.py --baseline /work/main > bench/cache_budget.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from _json_report import emit  # this folder

FINGERPRINT = "bench"
BIG_BUDGET = 100 * 2**30


def _rel(i: int) -> str:
    # Chunk directories of 1,000 files, like a resharded dataset's videos/<camera>/chunk-XXX/.
    return f"videos/cam/chunk-{i // 1000:03d}/episode_{i:06d}.mp4"


def make_source(root: str, count: int) -> dict[str, int]:
    """Write `count` files of 1-3 kB under `root`; their sizes by path."""
    rng = random.Random(0)
    sizes = {}
    for i in range(count):
        rel = _rel(i)
        size = rng.randrange(1000, 3000)
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(rng.randbytes(size))
        sizes[rel] = size
    return sizes


def _cache(cache_dir: str, url: str, max_bytes: int | None) -> Any:
    from cache import NodeCache, resolve

    return NodeCache(cache_dir, resolve(url), fingerprint=FINGERPRINT, max_bytes=max_bytes, max_workers=4)


def _prewarm(
    cache_dir: str, url: str, sizes: dict[str, int], rels: list[str], max_bytes: int | None
) -> tuple[float, float]:
    """Wall and CPU seconds (every thread) of one prewarm."""
    from cache.ordered_fetch import FileRequest, fetch_in_order

    cache = _cache(cache_dir, url, max_bytes)
    started, cpu = time.perf_counter(), time.process_time()
    fetch_in_order(cache, [FileRequest(r, sizes[r]) for r in rels], progress=False)
    cache.close()
    return time.perf_counter() - started, time.process_time() - cpu


def _disk_bytes(cache_dir: str) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(os.path.join(cache_dir, FINGERPRINT)):
        total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in names)
    return total


def _timed_fetches(
    cache: Any, rels: list[str], sizes: dict[str, int], *, hold: bool = False
) -> tuple[float, float]:
    """Wall and CPU seconds per file of fetching (or holding) `rels` one after the other."""
    started, cpu = time.perf_counter(), time.process_time()
    for rel in rels:
        if hold:
            with cache.hold(rel, size=sizes[rel]):
                pass
        else:
            cache.fetch(rel, size=sizes[rel])
    return (time.perf_counter() - started) / len(rels), (time.process_time() - cpu) / len(rels)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """One case in this process (a fresh cache directory under `case["work"]`)."""
    n, m, url, work = case["n"], case["m"], case["url"], case["work"]
    with open(os.path.join(work, "sizes.json"), encoding="utf-8") as f:
        sizes = {_rel(i): s for i, s in enumerate(json.load(f))}
    cache_dir = tempfile.mkdtemp(dir=work, prefix="cache-")
    try:
        rels = [_rel(i) for i in range(n)]
        if case["case"] == "stream":
            return _stream(case, cache_dir, rels, sizes)
        if case["case"] == "prewarm":
            seconds, cpu = _prewarm(cache_dir, url, sizes, rels, BIG_BUDGET if case["budget"] else None)
            return {
                "seconds": round(seconds, 3),
                "cpu_s": round(cpu, 3),
                "ms_per_file": round(1000 * seconds / n, 3),
            }
        _prewarm(cache_dir, url, sizes, rels, None)  # the cache holds N files (untimed)
        free = [_rel(i) for i in range(n, n + m)]
        evicting = [_rel(i) for i in range(n + m, n + 2 * m)]
        plain = _cache(cache_dir, url, None)
        miss_plain = _timed_fetches(plain, free, sizes)
        budgeted = _cache(cache_dir, url, _disk_bytes(cache_dir))  # full: every download evicts one file
        miss_budget = _timed_fetches(budgeted, evicting, sizes)
        cached = random.Random(1).sample(rels[: n // 2], min(2000, n // 2))  # the older half: never evicted
        present = [r for r in cached if os.path.exists(os.path.join(cache_dir, FINGERPRINT, r))]
        hit_plain = _timed_fetches(plain, present, sizes)
        hit_budget = _timed_fetches(budgeted, present, sizes)
        hold_budget = _timed_fetches(budgeted, present, sizes, hold=True)
        out = {
            "miss_ms_no_budget": round(1000 * miss_plain[0], 3),
            "miss_ms_full_budget": round(1000 * miss_budget[0], 3),
            "miss_cpu_ms_no_budget": round(1000 * miss_plain[1], 3),
            "miss_cpu_ms_full_budget": round(1000 * miss_budget[1], 3),
            "evictions": budgeted.stats().evictions,
            "hit_us_no_budget": round(1e6 * hit_plain[0], 1),
            "hit_us_budget": round(1e6 * hit_budget[0], 1),
            "hold_us_budget": round(1e6 * hold_budget[0], 1),
        }
        plain.close()
        budgeted.close()
        return out
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def _stream(case: dict[str, Any], cache_dir: str, rels: list[str], sizes: dict[str, int]) -> dict[str, Any]:
    """One epoch of an EpisodeStream (uint8, no workers) over a cache already holding N files of another
    dataset (hard links of the source), with no budget or a budget those files fill."""
    from reader import EpisodeStream

    source = urllib.parse.urlsplit(case["url"]).path
    for rel in rels:
        target = os.path.join(cache_dir, FINGERPRINT, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.link(os.path.join(source, rel), target)
    budget = sum(sizes[r] for r in rels) if case["budget"] else None
    stream = EpisodeStream(
        "file://" + case["dataset"], cache_dir=cache_dir, cache_max_bytes=budget, return_uint8=True, seed=0
    )
    started, cpu = time.perf_counter(), time.process_time()
    samples = sum(1 for _ in stream)
    seconds = time.perf_counter() - started
    return {
        "samples": samples,
        "samples_per_s": round(samples / seconds, 1),
        "cpu_ms_per_sample": round(1000 * (time.process_time() - cpu) / samples, 3),
        "evictions": stream.stats().cache.evictions,
    }


def _run_in_subprocess(tree: str, case: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": tree}
    try:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--case", json.dumps(case)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            cwd=tree,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"timed_out": True, "seconds": timeout_s}
    if proc.returncode != 0:
        raise SystemExit(f"case {case['case']} n={case['n']} failed in {tree}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="2000,8000", help="N: files in the cache (comma-separated)")
    parser.add_argument("--misses", type=int, default=500, help="M: downloads timed in the full-cache case")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--baseline", help="another checkout to run every case against too (before)")
    parser.add_argument(
        "--stream", help="an lrs/1 dataset directory: also time an EpisodeStream epoch over it"
    )
    parser.add_argument("--cases", default="prewarm,full,stream", help="which cases to run")
    parser.add_argument("--case-timeout", type=float, default=900.0, help="seconds before a case is cut")
    parser.add_argument("--work", help="where the source and caches go (default: the system temp dir)")
    parser.add_argument("--out", type=Path, help="Also write the JSON report here.")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return

    counts = [int(x) for x in args.files.split(",")]
    here = str(Path(__file__).resolve().parents[2])  # this checkout
    trees = {"after": here, **({"before": os.path.abspath(args.baseline)} if args.baseline else {})}
    work = tempfile.mkdtemp(prefix="lrs-bench-cache-", dir=args.work)
    try:
        source = os.path.join(work, "source")
        sizes = make_source(source, max(counts) + 2 * args.misses)
        with open(os.path.join(work, "sizes.json"), "w", encoding="utf-8") as f:
            json.dump([sizes[_rel(i)] for i in range(len(sizes))], f)
        base = {"m": args.misses, "url": "file://" + source, "work": work, "dataset": args.stream}
        cases = [("prewarm", False), ("prewarm", True), ("full", None)]
        if args.stream:
            cases += [("stream", False), ("stream", True)]
        cases = [c for c in cases if c[0] in args.cases.split(",")]
        for tree in trees.values():  # untimed: the first process to read the source pays for it
            _run_in_subprocess(tree, {**base, "case": "prewarm", "budget": False, "n": min(counts)})
        results = []
        for rep in range(args.repeats):
            for n in counts:
                for label, tree in trees.items():
                    # Each pair's order flips every repeat: what a case leaves behind (the kernel
                    # writing back and discarding the last one's files) falls on both sides.
                    for case, budget in cases if rep % 2 == 0 else _flip_pairs(cases):
                        spec = {**base, "case": case, "budget": budget, "n": n}
                        out = _run_in_subprocess(tree, spec, args.case_timeout)
                        row = {"tree": label, "rep": rep, "n": n, "case": case, "budget": budget, **out}
                        print(json.dumps(row), file=sys.stderr)
                        results.append(row)
        emit({"results": results, "summary": _summary(results)}, args.out, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _flip_pairs(cases: list[tuple[str, bool | None]]) -> list[tuple[str, bool | None]]:
    """The cases with each (no budget, budget) pair of one kind in the other order."""
    out: list[tuple[str, bool | None]] = []
    for kind in dict.fromkeys(c[0] for c in cases):
        out += reversed([c for c in cases if c[0] == kind])
    return out


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per tree and N, medians over repeats: the ratios the issue's done-when asks for (None where a
    case timed out)."""

    def med(rows: list[dict[str, Any]], key: str) -> float | None:
        values = sorted(r[key] for r in rows if key in r and not r.get("timed_out"))
        return values[len(values) // 2] if values else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a is not None and b else None

    summary: dict[str, Any] = {}
    for tree in dict.fromkeys(r["tree"] for r in results):
        for n in dict.fromkeys(r["n"] for r in results):
            rows = [r for r in results if r["tree"] == tree and r["n"] == n]
            plain = [r for r in rows if r["case"] == "prewarm" and not r["budget"]]
            budget = [r for r in rows if r["case"] == "prewarm" and r["budget"]]
            full = [r for r in rows if r["case"] == "full"]
            figures = {
                "prewarm_s_no_budget": med(plain, "seconds"),
                "prewarm_s_budget": med(budget, "seconds"),
                "prewarm_budget_timed_out": any(r.get("timed_out") for r in budget),
                "prewarm_cpu_s_no_budget": med(plain, "cpu_s"),
                "prewarm_cpu_s_budget": med(budget, "cpu_s"),
                "miss_ms_no_budget": med(full, "miss_ms_no_budget"),
                "miss_ms_full_budget": med(full, "miss_ms_full_budget"),
                "miss_cpu_ms_no_budget": med(full, "miss_cpu_ms_no_budget"),
                "miss_cpu_ms_full_budget": med(full, "miss_cpu_ms_full_budget"),
                "hit_us_no_budget": med(full, "hit_us_no_budget"),
                "hit_us_budget": med(full, "hit_us_budget"),
                "hold_us_budget": med(full, "hold_us_budget"),
            }
            f = figures
            figures["prewarm_budget_over_no_budget"] = ratio(f["prewarm_s_budget"], f["prewarm_s_no_budget"])
            figures["prewarm_cpu_budget_over_no_budget"] = ratio(
                f["prewarm_cpu_s_budget"], f["prewarm_cpu_s_no_budget"]
            )
            figures["full_cache_throughput_budget_over_no_budget"] = ratio(
                f["miss_ms_no_budget"], f["miss_ms_full_budget"]
            )
            figures["full_cache_cpu_throughput_budget_over_no_budget"] = ratio(
                f["miss_cpu_ms_no_budget"], f["miss_cpu_ms_full_budget"]
            )
            stream = {
                b: [r for r in rows if r["case"] == "stream" and r["budget"] is b] for b in (False, True)
            }
            if stream[False]:
                figures["stream_samples_per_s_no_budget"] = med(stream[False], "samples_per_s")
                figures["stream_samples_per_s_full_budget"] = med(stream[True], "samples_per_s")
                figures["stream_budget_over_no_budget"] = ratio(
                    figures["stream_samples_per_s_full_budget"], figures["stream_samples_per_s_no_budget"]
                )
            summary.setdefault(tree, {})[str(n)] = figures
    return summary


if __name__ == "__main__":
    main()
