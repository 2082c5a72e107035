"""One timed read of an lrs/1 dataset by the lrs of one checkout (`scripts/bench/checkouts.py` runs it with
that checkout first on PYTHONPATH): `BatchLoader` over `EpisodeStream`, uint8, batches after the first.

    python scripts/bench/_checkout_child.py '{"lrs": "...", "batches": 60, "batch_size": 16, "threads": 2}'

Prints one JSON object: samples/s after the first batch, the first batch's latency, this process's CPU
seconds, and which `reader` package was imported (so a run proves which checkout it measured).
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main() -> None:
    given = json.loads(sys.argv[1])
    import reader
    from reader import BatchLoader, EpisodeStream

    started = time.perf_counter()
    stream = EpisodeStream(given["lrs"], return_uint8=True, seed=0)
    options = {"channels_last": True} if given.get("channels_last") else {}  # a baseline may predate it
    loader = BatchLoader(stream, given["batch_size"], threads=given["threads"], **options)
    batches = iter(loader)
    next(batches)
    first = time.perf_counter()
    samples = 0
    for _, batch in zip(range(given["batches"]), batches, strict=False):
        samples += len(batch["index"])
    done = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report = {
        "reader": reader.__file__,
        "samples": samples,
        "samples_per_s": samples / (done - first),
        "first_batch_s": first - started,
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
