"""The built-in sample: `sample` writes a synthetic v3 dataset the way lerobot records one, and
`pipeline` runs `lrs demo` (sample, reshard, verify, push, prewarm, train) on it."""
