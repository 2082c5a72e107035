"""Reader-side probes of `scripts/faults/suite.py`, each run in a process of its own.

`python scripts/faults/probes.py NAME JSON_ARGS` prints one JSON line (the last line of stdout) and exits
0, or 3 after a deliberate lrs error (`LrsError`: its class and first line are in the JSON). Any other
exception is left to Python, so its traceback reaches stderr, where the suite counts it.

- `epoch`: a full epoch of `EpisodeStream`; every sample's (episode, frame) counted, and a sha256 of the
  samples in order (values included), to compare with a fault-free epoch.
- `verify_cache`: every published file of a node cache against the dataset's `meta/lrs/files.parquet`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from typing import Any


def _digest_item(h: Any, item: dict[str, Any]) -> None:
    import torch

    for key in sorted(item):
        value = item[key]
        h.update(key.encode())
        if isinstance(value, torch.Tensor):
            h.update(str(value.dtype).encode() + str(tuple(value.shape)).encode())
            h.update(value.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(value).encode())


def epoch(args: dict[str, Any]) -> dict[str, Any]:
    """One epoch of EpisodeStream(**args["options"]) over args["url"]."""
    from reader import EpisodeStream

    stream = EpisodeStream(args["url"], **args.get("options", {}))
    h = hashlib.sha256()
    seen: Counter[tuple[int, int]] = Counter()
    for item in stream:
        seen[(int(item["episode_index"]), int(item["frame_index"]))] += 1
        _digest_item(h, item)
    stats = stream.stats()
    return {
        "samples": sum(seen.values()),
        "distinct": len(seen),
        "repeated": sum(1 for n in seen.values() if n > 1),
        "digest": h.hexdigest(),
        "total_frames": sum(stream.plan.lengths),
        "stats": str(stats)[:400],
    }


def verify_cache(args: dict[str, Any]) -> dict[str, Any]:
    """Check every published file under args["cache_dir"] against args["dataset"]'s files index."""
    import pyarrow.parquet as pq

    files = pq.read_table(os.path.join(args["dataset"], "meta/lrs/files.parquet")).to_pylist()
    expected = {f["path"]: (f["bytes"], f["sha256"]) for f in files}
    bad, good, temps, total = [], 0, [], 0
    for top, dirs, names in os.walk(args["cache_dir"]):
        dirs[:] = [d for d in dirs if d != ".lrs"]
        for name in names:
            path = os.path.join(top, name)
            if name.endswith(".lrs-part") or name.endswith(".tmp"):
                temps.append(os.path.relpath(path, args["cache_dir"]))
                continue
            rel = os.path.relpath(path, args["cache_dir"]).split(os.sep, 1)[1]
            data = open(path, "rb").read()  # noqa: SIM115 - read whole, closed at once by refcount
            total += len(data)
            if expected.get(rel) != (len(data), hashlib.sha256(data).hexdigest()):
                bad.append(rel)
            else:
                good += 1
    return {"good": good, "bad": bad, "temps": temps, "bytes": total}


PROBES = {"epoch": epoch, "verify_cache": verify_cache}


def main() -> None:
    from cache.errors import LrsError

    name, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        result = PROBES[name](args)
    except LrsError as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(json.dumps({"error": type(exc).__name__, "message": message}))
        sys.exit(3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
