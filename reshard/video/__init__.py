"""Per-episode video files: writing them (`write`: split or re-encode) and proving them (`compare`:
probe a file, compare an output with its source frame by frame)."""
