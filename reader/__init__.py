"""lrs reader package: the layout contract (read side) and `EpisodeStream`, the training-time reader.

`from reader import EpisodeStream` streams an lrs/1 (or plain v3) dataset as a torch IterableDataset;
`ResumableLoader` counts the batches a trainer consumes so that `state_dict()` can resume exactly.
"""

from reader.pool import ReaderStats
from reader.stream import EpisodeStream, ResumableLoader

__all__ = ["EpisodeStream", "ReaderStats", "ResumableLoader"]
