"""Publishing a resharded dataset: `publish` (the order, the checks, progress), `target` (where: an
fsspec URL or a Hugging Face bucket), `hf` (the bucket calls) and `retry` (retries with backoff)."""
