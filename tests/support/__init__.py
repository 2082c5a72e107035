"""What tests build their datasets with, through the Python API of the sample generator and the reshard
job (never the `lrs` command line), so that `tests/reader` and `tests/cache` stand on the library."""
