"""`lrs train`: lerobot's own trainer (`lerobot-train`) over an `EpisodeStream`.

`options` translates lerobot's dataset settings into stream arguments and `resume` maps a lerobot
checkpoint to a stream state (both pure, no lerobot); `loader` is what the trainer iterates in place of
its DataLoader (torch, no lerobot); `hooks` runs lerobot's `train()` with them and is the only module
that imports lerobot, when the command runs.
"""
