# Two commands for a newcomer: `make demo` and `make test`. Both set up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-all bench faults lint docs clean

setup:
	@VENV=$(VENV) bash scripts/setup.sh

demo: setup
	$(VENV)/bin/lrs demo --workdir $${LRS_DEMO_DIR:-/tmp/lrs-demo}

# The fast tier: every test not marked integration, lerobot, faults or slurm (pyproject.toml's markers).
test: setup
	$(PY) -m pytest -m "not integration and not lerobot and not faults and not slurm" $(PYTEST_ARGS)

# Every test: what `make test` runs, then the integration, lerobot, faults and slurm tiers (CI runs this).
test-all: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# Every benchmark (scripts/bench/*.py but its `_` helpers) takes --out FILE and writes JSON there; the
# reader bench also draws bench/reader.png (samples/s and first-batch latency per case).
bench: setup
	@mkdir -p bench
	@set -e; for script in scripts/bench/[!_]*.py; do \
	  [ -e "$$script" ] || continue; name=$$(basename $$script .py); name=$${name#bench_}; \
	  extra=; [ "$$name" != reader ] || extra="--chart bench/reader.png"; \
	  echo "== $$script -> bench/$$name.json $${extra#--chart }"; \
	  $(PY) $$script --out bench/$$name.json $$extra; \
	done

# Every fault and bad-input case (scripts/faults/suite.py): a table on stdout, JSON in bench/faults.json.
# Mounts small tmpfs disks when run as root (else RLIMIT_FSIZE stands in for a full disk).
faults: setup
	@mkdir -p bench
	$(PY) scripts/faults/suite.py --out bench/faults.json $(FAULTS_ARGS)

# ruff, then mypy as configured in pyproject.toml (strict on cache, reader/schedule and reader/format).
lint: setup
	$(VENV)/bin/ruff check cache reader reshard tests scripts
	$(VENV)/bin/ruff format --check cache reader reshard tests scripts
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/) into site/. --strict: any warning fails the build (a link to a
# page or anchor that does not exist, a docstring that does not parse). CLI options come from click
# (mkdocs-click), API pages from docstrings (mkdocstrings); nothing is fetched from the network.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info site
