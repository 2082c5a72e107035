"""A cache disk that fills up: a `CacheError` naming the cache file (not a failed read of the remote, not a
bare OSError), and no temp file left behind. Where the disk fills is simulated at the two writes a
download makes: the file itself (inside the remote's copy, which wraps it in a FetchError) and the
record of its verified sha256."""

from __future__ import annotations

import errno

import pytest

from cache import fetch as fetch_module
from cache.errors import CacheError
from cache.remote import Remote
from tests.cache.helpers import part_files


def _full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _full_inside_a_read(*args: object, **kwargs: object) -> None:
    from cache.errors import FetchError

    try:
        _full()
    except OSError as exc:
        raise FetchError("Reading http://h/x failed: OSError: [Errno 28] No space left on device") from exc


@pytest.mark.parametrize(
    ("target", "fake"),
    [((Remote, "get"), _full_inside_a_read)],
    ids=["downloaded-file"],
)
def test_a_full_cache_disk_is_a_cache_error_and_leaves_no_temp(
    source, serve, open_cache, cache_dir, monkeypatch, target, fake
) -> None:
    root, files = source
    spec = next(iter(files.values()))
    owner, name = target
    monkeypatch.setattr(fetch_module if owner == "cache.fetch" else owner, name, fake)
    node = open_cache(serve(root).url)
    with pytest.raises(
        CacheError, match=r"Could not write .*\.lrs-part into the node cache: No space left on device"
    ):
        node.fetch(spec.rel, size=spec.size, sha256=spec.sha256)
    assert part_files(cache_dir) == []
