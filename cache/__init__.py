"""lrs cache: the node-local, multi-process file cache every byte of a dataset lands in.

`NodeCache` fetches whole files (verified, published atomically, shared by every process of a node,
kept within a byte budget by LRU eviction) and byte ranges; `sum_cache_stats` sums the counters of every
process that used a cache directory; `cache_contents` and `clean_cache` list and empty one.
`cache.remote.resolve` turns a URL into the `Remote` it reads from.
"""

from cache.budget import Eviction
from cache.cache_stats import CacheStats, sum_cache_stats
from cache.contents import CacheContents, DatasetUsage, cache_contents, clean_cache
from cache.errors import (
    CacheError,
    FetchError,
    IntegrityError,
    LrsError,
    MissingBackend,
    PathError,
    TrustError,
)
from cache.node import NodeCache
from cache.remote import Remote, resolve

__all__ = [
    "CacheContents",
    "CacheError",
    "CacheStats",
    "DatasetUsage",
    "Eviction",
    "FetchError",
    "IntegrityError",
    "LrsError",
    "MissingBackend",
    "NodeCache",
    "PathError",
    "Remote",
    "TrustError",
    "cache_contents",
    "clean_cache",
    "sum_cache_stats",
    "resolve",
]
