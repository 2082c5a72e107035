"""The torch runtime of a stream: the consumer and its episode pool (`pool`), row groups read into tensors
(`rows`), what one process owns while it iterates (`process`) and its published counters (`published`)."""
