"""Per-episode video files: `frames` (PyAV primitives and lerobot's nearest-frame rule), `encode` (the
codecs and their settings), `write` (cut or re-encode one episode) and `compare` (probe a file, prove an
output equals its source frame by frame)."""
