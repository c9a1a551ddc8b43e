# The two commands of the README: `make demo` and `make test`. Each bootstraps .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo needs the core and the embedded default only (no PySpark: seconds, not minutes).
DEMO_STAMP := $(VENV)/.demo
DEMO_PACKAGES := packages/core/pyproject.toml packages/sqlite/pyproject.toml
PACKAGES := $(wildcard packages/*/pyproject.toml) conformance/pyproject.toml
EDITABLES := $(foreach p,$(PACKAGES),-e $(dir $(p)))

.PHONY: demo test lint typecheck check bench dist docs clean chaos suite-mutants suite-mutants-doc audit

$(STAMP): $(PACKAGES) requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt $(EDITABLES)
	touch $(STAMP)

$(DEMO_STAMP): $(DEMO_PACKAGES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(foreach p,$(DEMO_PACKAGES),-e $(dir $(p)))
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m jobchain.demo

test: $(STAMP)
	JOBCHAIN_TEST_VACUUM_CATALOGS=1 $(BIN)/python -m pytest packages conformance -q -n 4 --dist loadgroup --durations=25
	$(MAKE) --no-print-directory lint typecheck docs

# Every deliberately broken adapter against the cases named to catch it; prints
# "suite mutants: N variants run, N caught, 0 missed" and rewrites docs/adapters/suite-mutants.md.
suite-mutants: suite-mutants-doc
	$(BIN)/python -m pytest conformance/tests -q -n 2 --dist loadgroup -k "catches or mutants"

suite-mutants-doc: $(STAMP)
	$(BIN)/python conformance/tests/mutants.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check packages conformance bench tools

typecheck: $(STAMP)
	$(BIN)/mypy packages/core/src conformance/src packages/redis/src packages/nats/src packages/sqlite/src packages/postgres/src packages/spark/src

# The full chaos suite (the compact one runs in `make test`); the failure-mode table goes to
# bench/results/chaos-<date>.{json,md} and docs/benchmarks.md, written even when a cell fails.
CHAOS_RESULTS ?= bench/results/chaos-$(shell date -u +%F).json
chaos: $(STAMP)
	JOBCHAIN_CHAOS=1 JOBCHAIN_CHAOS_FULL=1 JOBCHAIN_CHAOS_RESULTS=$(CHAOS_RESULTS) \
		$(BIN)/python -m pytest packages/postgres/tests/chaos -q -p no:randomly; \
	status=$$?; $(BIN)/python bench/chaos_report.py $(CHAOS_RESULTS) || exit 1; exit $$status

# The benchmark runs on a private PostgreSQL cluster of its own (production-like settings,
# removed at the end); BENCH_PG=postgresql://USER@HOST:PORT runs it on that server instead.
# BENCH_QUICK=1 is a smoke run of a few minutes; the knobs are listed in bench/run.py.
bench: $(STAMP)
	$(BIN)/python bench/run.py

# Opt-in soak (issue 21): BENCH_SOAK_SECONDS [1800] of steady load at 50 % of measured capacity on a
# private PostgreSQL cluster; writes bench/results/soak-<date>.{json,md} (bench/soak.py).
.PHONY: bench-soak
bench-soak: $(STAMP)
	$(BIN)/python bench/soak.py

# Known vulnerabilities in what .venv has installed (SECURITY.md). Not part of `make test`: it
# needs the network (pip-audit asks PyPI's advisory API, or OSV with PIP_AUDIT_ARGS="-s osv";
# it has no offline database). pip-audit is not on this machine's local package index, so it is
# not in requirements-dev.txt: install it where PyPI is reachable (`.venv/bin/pip install
# pip-audit`, or `pipx install pip-audit`; PIP_AUDIT=/path/to/pip-audit picks one). Our own
# editable packages are not on PyPI and are skipped.
PIP_AUDIT ?= $(firstword $(wildcard $(BIN)/pip-audit) $(shell command -v pip-audit 2>/dev/null))
PIP_AUDIT_ARGS ?=
audit: $(STAMP)
	@if [ -z "$(PIP_AUDIT)" ]; then \
		echo "make audit: pip-audit is missing (not in $(BIN)/ nor on PATH)." >&2; \
		echo "  It is not on the local package index; install it from PyPI:" >&2; \
		echo "  $(BIN)/pip install pip-audit   (or: pipx install pip-audit)" >&2; \
		exit 1; \
	fi
	PIPAPI_PYTHON_LOCATION=$(abspath $(BIN)/python) $(PIP_AUDIT) --skip-editable --progress-spinner off $(PIP_AUDIT_ARGS)

# Wheels of every distribution into dist/ (or DIST=elsewhere), for `pip install dist/*.whl` on
# another machine. packages/core/tests/cli/test_dist.py installs them into a fresh venv.
DIST ?= dist
dist: $(STAMP)
	rm -rf $(DIST)
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir $(DIST) $(foreach p,$(PACKAGES),$(dir $(p)))

# The documentation site (mkdocs.yml): docs/ and an API reference generated from the docstrings,
# into build/site (gitignored; open build/site/index.html). --strict fails on a broken link or
# anchor and on a page missing from the nav. Offline: no plugin fetches anything.
# NO_MKDOCS_2_WARNING silences mkdocs-material's end-of-life banner.
DOCS_SITE ?= build/site
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(DOCS_SITE)

clean:
	rm -rf $(VENV) dist $(DOCS_SITE)
