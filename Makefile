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

# Every scripts/bench_*.py takes --out FILE and writes JSON there; the reader bench also draws
# bench/reader.png (samples/s and first-batch latency per case).
bench: setup
	@mkdir -p bench
	@set -e; for script in scripts/bench_*.py; do \
	  [ -e "$$script" ] || continue; name=$$(basename $$script .py); name=$${name#bench_}; \
	  extra=; [ "$$name" != reader ] || extra="--chart bench/reader.png"; \
	  echo "== $$script -> bench/$$name.json $${extra#--chart }"; \
	  $(PY) $$script --out bench/$$name.json $$extra; \
	done

lint: setup
	$(VENV)/bin/ruff check cache reader reshard tests scripts
	$(VENV)/bin/ruff format --check cache reader reshard tests scripts

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
