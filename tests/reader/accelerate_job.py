"""A training job under `accelerate launch`, as docs/multi-node.md describes it: the model and optimizer
prepared by accelerate, the DataLoader over the stream not (the stream already yields this rank's share).

    accelerate launch --multi_gpu --num_processes 2 ... tests/reader/accelerate_job.py '<json spec>'

The spec names the dataset (`root`), `batch_size`, `seed` and `out`; each rank writes the (episode, frame)
of its samples, in order, to `<out>.rank<R>`.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from reader import EpisodeStream, collate


def main() -> None:
    spec = json.loads(sys.argv[1])
    accelerator = Accelerator(cpu=True)  # initializes torch.distributed: the stream takes its rank from it
    stream = EpisodeStream(spec["root"], batch_size=spec["batch_size"], seed=spec["seed"], num_workers=0)
    loader = DataLoader(stream, batch_size=spec["batch_size"], collate_fn=collate)  # not prepared
    policy = torch.nn.Linear(stream.meta.features["action"]["shape"][0], 1)
    optimizer = torch.optim.AdamW(policy.parameters())
    policy, optimizer = accelerator.prepare(policy, optimizer)
    frames = []
    for batch in loader:
        loss = policy(batch["action"].to(accelerator.device)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        frames += [
            [int(e), int(f)] for e, f in zip(batch["episode_index"], batch["frame_index"], strict=True)
        ]
    out = f"{spec['out']}.rank{accelerator.process_index}"
    with open(out + ".tmp", "w") as f:
        json.dump({"frames": frames, "rank": stream.rank, "world": stream.world_size}, f)
    os.replace(out + ".tmp", out)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
