"""lrs cache: the node-local, multi-process file cache every byte of a dataset lands in.

`NodeCache` fetches whole files (verified, published atomically, shared by every process of a node,
kept within a byte budget by LRU eviction) and byte ranges; `aggregate_stats` sums the counters of every
process that used a cache directory. `cache.remote.resolve` turns a URL into the `Remote` it reads from.
"""

from cache.errors import CacheError, FetchError, IntegrityError, LrsError
from cache.node import NodeCache
from cache.remote import Remote, resolve
from cache.stats import CacheStats, aggregate_stats

__all__ = [
    "CacheError",
    "CacheStats",
    "FetchError",
    "IntegrityError",
    "LrsError",
    "NodeCache",
    "Remote",
    "aggregate_stats",
    "resolve",
]
