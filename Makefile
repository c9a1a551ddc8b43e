# The two commands of the README: `make demo` and `make test`. Each bootstraps .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGES := $(wildcard packages/*/pyproject.toml) conformance/pyproject.toml
EDITABLES := $(foreach p,$(PACKAGES),-e $(dir $(p)))

.PHONY: demo test lint typecheck check bench clean

$(STAMP): $(PACKAGES) requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt $(EDITABLES)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m jobchain.demo

test: $(STAMP)
	$(BIN)/python -m pytest packages conformance -q -n 4 --dist loadgroup --durations=25
	$(MAKE) --no-print-directory lint typecheck

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check packages conformance bench

typecheck: $(STAMP)
	$(BIN)/mypy packages/core/src conformance/src packages/redis/src packages/nats/src packages/sqlite/src packages/postgres/src packages/spark/src

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV)
