"""`lrs show`: one PNG of an episode that a person can read on a headless node (over SSH, in a bucket).

`reshard.preview.episode_view` reads the episode through `EpisodeStream` (so the picture is what a model
is fed), `reshard.preview.strip` turns camera frames into tiles (depth as a colour map),
`reshard.preview.plot` draws the state and action curves, and `reshard.preview.canvas` lays them out
under the task string. Drawing uses Pillow only, already a dependency of lrs for image cameras.
"""
