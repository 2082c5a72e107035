"""Run every fault and bad-input case against lrs and report: a table on stdout, JSON with --out.

    python scripts/faults/suite.py [--out FILE] [--only NAME,...] [--quick] [--keep DIR]

For each case: the outcome (a clear error, with its exit code and the first line of its message, or a
correct result), whether a Python traceback appeared in any child's stdout or stderr, and the files
left behind (partial outputs, work directories, temp files), found by listing directories before and
after. The cases live in `scripts/faults/inputs.py` (malformed metadata, bad videos, corrupt indexes),
`scripts/faults/runtime.py` (node-cache corruption, a full disk, SIGKILL then rerun, a shared cache
under a small budget, epochs under 5xx faults, planted secrets) and `scripts/faults/trust.py` (a source
changed under a reshard, two reshards into one output, URLs as local directories, the demo's
directory). Exit status: 0 when every case behaved, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(ROOT))  # this checkout's lrs, after this folder (see scripts/README.md)

import exits  # noqa: E402, F401 - registers its cases
import hostile  # noqa: E402, F401 - registers its cases
import inputs  # noqa: E402, F401 - registers its cases
import runtime  # noqa: E402, F401 - registers its cases
import trust  # noqa: E402, F401 - registers its cases
from harness import REGISTRY, Case, Ctx, Registered, Verdict  # noqa: E402


def run_case(ctx: Ctx, entry: Registered) -> dict[str, Any]:
    shutil.rmtree(ctx.base / "cases" / entry.name, ignore_errors=True)
    case = Case(entry.name, ctx.base / "cases" / entry.name)
    start = time.monotonic()
    try:
        verdict = entry.fn(ctx, case)
    except Exception as exc:  # the suite's own failure: reported as a failed case, not a crash
        verdict = Verdict(
            False, f"suite error: {type(exc).__name__}: {exc}"[:300], traceback.format_exc()[-1500:]
        )
    tracebacks = sum(p.tracebacks for p in case.procs)
    leftovers = case.leftovers()
    return {
        "name": entry.name,
        "group": entry.group,
        "ok": verdict.ok and tracebacks == 0 and not leftovers,
        "outcome": verdict.outcome,
        "behaved": verdict.ok,
        "tracebacks": tracebacks,
        "leftovers": leftovers,
        "note": verdict.note,
        "figures": verdict.figures,
        "children": len(case.procs),
        "seconds": round(time.monotonic() - start, 1),
        "traceback_tail": next((p.stderr[-1500:] for p in case.procs if p.tracebacks), ""),
    }


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for r in results:
        figures.update(r["figures"])
    return {
        "cases": len(results),
        "ok": sum(r["ok"] for r in results),
        "failed": [r["name"] for r in results if not r["ok"]],
        "tracebacks": sum(r["tracebacks"] for r in results),
        "cases_with_leftovers": sum(bool(r["leftovers"]) for r in results),
        "leftover_files": sum(len(r["leftovers"]) for r in results),
        **figures,
    }


def table(results: list[dict[str, Any]]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| case | group | outcome | ok | tracebacks | left behind |", "|---|---|---|---|---|---|"]
    for r in results:
        left = ", ".join(r["leftovers"][:3]) + (
            f" (+{len(r['leftovers']) - 3})" if len(r["leftovers"]) > 3 else ""
        )
        outcome = r["outcome"] + (f" [{r['note']}]" if r["note"] else "")
        lines.append(
            f"| {r['name']} | {r['group']} | {cell(outcome)} | {'yes' if r['ok'] else '**NO**'} "
            f"| {r['tracebacks']} | {cell(left) or 'nothing'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--only", help="comma-separated case names (or group names) to run")
    parser.add_argument("--quick", action="store_true", help="a fast subset (and shorter loops)")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temp dir)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args()

    selected = list(REGISTRY)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {e.name for e in REGISTRY} - {e.group for e in REGISTRY}
        if unknown:
            parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
        selected = [e for e in selected if e.name in wanted or e.group in wanted]
    elif args.quick:
        selected = [e for e in selected if e.quick]
    if args.list:
        print("\n".join(f"{e.group:10} {e.name}" for e in selected))
        return

    base = args.keep or Path(tempfile.mkdtemp(prefix="lrs-faults-"))
    base.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(base, quick=args.quick)
    results = []
    try:
        for entry in selected:
            result = run_case(ctx, entry)
            results.append(result)
            mark = "ok" if result["ok"] else "FAILED"
            print(
                f"{mark:6} {entry.name} ({result['seconds']} s): {result['outcome'][:150]}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        runtime.cleanup()
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    report = {"summary": summary(results), "cases": results}
    print(table(results))
    print()
    print(json.dumps(report["summary"], indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
