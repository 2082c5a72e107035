"""The built-in sample: `sample` writes a synthetic v3 dataset the way lerobot records one (with `frames`,
`schema`, `stats` and `encode`), and `pipeline` runs `lrs demo` (sample, reshard, verify, push, prewarm,
train) on it, with its settings in `config`, its training loop in `stream` and its checks in `checks`."""
