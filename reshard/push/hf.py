"""Hugging Face storage buckets (`hf://buckets/<owner>/<name>[/prefix]`) as a push target.

Talks to the Hub only through `HfApi`'s bucket API (`create_bucket`, `list_bucket_tree`,
`batch_bucket_files`); credentials come from wherever huggingface_hub finds them (HF_TOKEN, `hf auth
login`). The listing carries each file's xet hash, which `hf_xet.hash_files` recomputes locally without
any network, so a resumed push skips only files whose content is really there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from huggingface_hub import BucketFile, HfApi
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

from cache.backoff import RetryPolicy, http_status
from reshard.push.target import LocalFile, RemoteFile

# One `batch_bucket_files` call is one xet upload commit plus one /batch request: bound both its file count
# (the Hub chunks at 1000 itself) and its bytes, so a failed batch costs little to redo.
BATCH_MAX_FILES = 256
BATCH_MAX_BYTES = 2 << 30
# huggingface_hub retries each request itself (5 retries, waiting 1, 2, 4, 8 and 8 s, on network errors
# and 5xx): lrs adds one more try after a second, not its own six, so that the budgets do not multiply.
HUB_RETRY = RetryPolicy(attempts=2, base_delay_s=1.0, max_delay_s=1.0)


def parse_bucket_url(url: str) -> tuple[str, str]:
    """Split `hf://buckets/<owner>/<name>[/prefix]` into (`owner/name`, `prefix`).

    Raises:
        ValueError: `url` is not a bucket URL.
    """
    rest = url.removeprefix("hf://buckets/")
    parts = [p for p in rest.strip("/").split("/") if p]
    if rest == url or len(parts) < 2 or any(p in (".", "..") for p in parts):
        raise ValueError(f"Invalid bucket URL ({url}). Expected hf://buckets/<owner>/<name>[/prefix].")
    return "/".join(parts[:2]), "/".join(parts[2:])


class HfBucketTarget:
    """A prefix inside a Hugging Face storage bucket."""

    def __init__(self, url: str, *, endpoint: str | None = None, api: HfApi | None = None) -> None:
        self.bucket_id, self.prefix = parse_bucket_url(url)
        self.url = f"hf://buckets/{self.bucket_id}" + (f"/{self.prefix}" if self.prefix else "")
        self.api = api or HfApi(endpoint=endpoint)
        self.retry = HUB_RETRY

    def __repr__(self) -> str:
        return f"HfBucketTarget({self.url!r})"

    def session(self) -> contextlib.AbstractContextManager[None]:
        """Silence huggingface_hub's own per-batch progress bars: push draws one bar for the whole job."""
        return _hub_progress_bars_off()

    def ensure_exists(self) -> None:
        """Create the bucket (private by the owner's default) unless it exists."""
        self.api.create_bucket(self.bucket_id, exist_ok=True)

    def list_files(self) -> dict[str, RemoteFile]:
        """Every file under the prefix with its size and xet hash."""
        base = f"{self.prefix}/" if self.prefix else ""
        try:
            items = list(
                self.api.list_bucket_tree(self.bucket_id, prefix=self.prefix or None, recursive=True)
            )
        except HfHubHTTPError as exc:
            if http_status(exc) == 404:
                raise FileNotFoundError(f"bucket {self.bucket_id} not found") from exc
            raise
        return {
            item.path[len(base) :]: RemoteFile(int(item.size), item.xet_hash or None)
            for item in items
            if isinstance(item, BucketFile) and item.path.startswith(base)
        }

    def same_content(self, local: LocalFile, remote: RemoteFile) -> bool | None:
        """Compare the bucket's xet hash with the one `hf_xet` computes from the local file (None for a
        file listed without one)."""
        if remote.digest is None:
            return None
        from hf_xet import hash_files

        return hash_files([str(local.path)])[0].hash == remote.digest

    def published_sha256(self) -> dict[str, str]:
        """Empty: a bucket lists its files with their xet hash, which tells content apart by itself."""
        return {}

    def batches(self, files: list[LocalFile]) -> list[list[LocalFile]]:
        """Consecutive groups of at most BATCH_MAX_FILES files and (beyond one file) BATCH_MAX_BYTES bytes."""
        out: list[list[LocalFile]] = []
        size = 0
        for item in files:
            if not out or len(out[-1]) >= BATCH_MAX_FILES or size + item.bytes > BATCH_MAX_BYTES:
                out.append([])
                size = 0
            out[-1].append(item)
            size += item.bytes
        return out

    def upload(self, batch: list[LocalFile]) -> None:
        """Add the unit's files in one `batch_bucket_files` call (re-adding a file overwrites it)."""
        self.api.batch_bucket_files(self.bucket_id, add=[(str(f.path), self._dest(f.rel)) for f in batch])

    def finish(self) -> None:
        """Nothing to tidy: a bucket file appears only once its batch is committed."""

    def _dest(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel


@contextlib.contextmanager
def _hub_progress_bars_off() -> Iterator[None]:
    was_disabled = are_progress_bars_disabled()
    if not was_disabled:
        disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()
