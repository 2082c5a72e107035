"""The order of an epoch, as pure functions of (seed, epoch, shuffle, topology, episode lengths, pool size).

Nothing here does I/O, so prefetch can run ahead of emission, `lrs prewarm` (another process) can compute
what a node will read first, and a resume replays arithmetic instead of data.

An epoch is built in four steps, each a small function over numpy arrays:

1. `epoch_order`: a permutation of the selected episodes, seeded by (seed, epoch).
2. `rank_range`: the episodes' frames are concatenated in that order and cut into `world_size` equal
   slices of `S = total // world_size` frames, so every rank yields the same number of samples and DDP
   never hangs. The last `total % world_size` frames of the stream are dropped: at most `world_size - 1`
   frames per epoch, and different ones every epoch when shuffled. If `total < world_size`, `S = 0` and
   every rank is empty.
3. `worker_share`: a rank's DataLoader workers share its pieces. The rank's frame stream is cut into
   runs of `RUN_FRAMES` positions, dealt to the `max(1, num_workers)` workers in turn, so every worker
   holds a share of every piece of its rank (`deal`): the workers' pools hold the same episodes at the
   same time (a video is fetched once per node, at about the same time for every worker), and a
   worker's pool can hold as many episodes as its rank has, not a 1/num_workers slice of them. A
   worker's share of the epoch, `worker_share`, depends on nothing but the rank's sample count: the
   shares differ by at most `RUN_FRAMES` and are the same every epoch.
4. `Emission`: a consumer admits its pieces in order into a pool of up to K and emits in rounds; see
   the class docstring.

`Schedule` (`epoch_schedule`) puts the steps together for a run; `keys` holds the keys of every random
choice; `mixture` draws a weighted mixture's epochs and `rest` the rest of an epoch on a new topology.
"""

from __future__ import annotations

from reader.schedule.emission import Admission, Emission, EmissionPlan, Step
from reader.schedule.epoch_schedule import EpochPlan, Schedule
from reader.schedule.mixture import Entries, check_weights, mixture_entries, source_quotas
from reader.schedule.order import (
    RUN_FRAMES,
    Piece,
    Share,
    Topology,
    consumer_pieces,
    consumer_stream,
    deal,
    dropped_frames,
    epoch_order,
    rank_range,
    samples_per_rank,
    worker_share,
)

__all__ = [
    "Admission",
    "Emission",
    "EmissionPlan",
    "Entries",
    "EpochPlan",
    "Piece",
    "RUN_FRAMES",
    "Schedule",
    "Share",
    "Step",
    "Topology",
    "check_weights",
    "consumer_pieces",
    "consumer_stream",
    "deal",
    "dropped_frames",
    "epoch_order",
    "mixture_entries",
    "rank_range",
    "samples_per_rank",
    "source_quotas",
    "worker_share",
]
