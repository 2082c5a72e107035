"""The torch runtime of a stream: each source opened for reading (`sources`), the consumer and its episode
pool (`pool`), row groups read into tensors (`rows`), delta windows (`windows`), what one process owns while
it iterates (`process`) and its published counters (`published`)."""
