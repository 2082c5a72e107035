"""Batches: `collate` (one shared buffer per batch from a DataLoader worker), the loaders that count what a
trainer consumes (`loaders`: `BatchLoader`, `ResumableLoader`), and the consumer's in-place batch fill with
its decode lanes (`fill`)."""
