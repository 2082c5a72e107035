"""Per-episode video files: `frames` (PyAV primitives and lerobot's nearest-frame rule), `encode` (the
codecs and their settings), `cut` (which packets of a packed file hold an episode, and whether they can be
copied), `write` (cut or re-encode one episode), `compare` (probe a file, prove an output equals its
source frame by frame) and `extent` (how much of a file is there: a file cut short, per frame)."""
