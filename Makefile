# Two commands for a newcomer: `make demo` and `make test`. Both set up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test bench lint clean

setup:
	@VENV=$(VENV) bash scripts/setup.sh

demo: setup
	$(VENV)/bin/lrs demo --workdir $${LRS_DEMO_DIR:-/tmp/lrs-demo}

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) scripts/bench_reshard.py --out bench/reshard.json
	$(PY) scripts/bench_reader.py --out bench/reader.json --chart bench/reader.png

lint: setup
	$(VENV)/bin/ruff check cache reader reshard tests scripts
	$(VENV)/bin/ruff format --check cache reader reshard tests scripts

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
