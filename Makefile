# Developer entry points. Everything runs from the checkout with .venv/bin/python; the launcher
# (controlplane/launcher/) starts embedded PostgreSQL/Redis when DATABASE_URL/REDIS_URL are unset.
#
#   make demo                      # dashboard on http://127.0.0.1:8000/ (PORT=8001 make demo), and a Prometheus when installed
#   make test                      # whole suite (installs Debian's chromium and prometheus if it can)
#   make test PYTEST_ARGS="-k foo" # a subset
#   make test-unit                 # the pure cores and codecs: no PostgreSQL, no Redis, seconds
#   make doctor                    # each system requirement: found / installed / missing
#   make lint                      # ruff, the import contracts (.importlinter), mypy
#   make clean | make distclean

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv demo test test-unit doctor services lint clean distclean

venv: $(STAMP)

# Re-installs only when pyproject.toml or the store's C codec changed since the last successful
# install. pip's cache is kept on purpose (no --no-cache-dir): re-creating the venv must not download
# everything again. Editable install: [tool.setuptools] packages = ["controlplane"] (for the `rmqha`
# console script) and the apps are always imported from this checkout; the install also compiles
# brokers/store/_codec.c in place (optional: without a C compiler the store uses its Python codec).
$(STAMP): pyproject.toml brokers/store/_codec.c
	@set -e; \
	if [ ! -x "$(PY)" ]; then \
		base=""; \
		for cand in python3 python3.13 python3.12 python3.11; do \
			if command -v $$cand >/dev/null 2>&1 && \
			   $$cand -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
				base=$$cand; break; \
			fi; \
		done; \
		if [ -z "$$base" ]; then echo "error: Python 3.11+ is required (python3 is too old or missing)" >&2; exit 1; fi; \
		echo "creating $(VENV) with $$(command -v $$base) ($$($$base --version))"; \
		$$base -m venv $(VENV); \
	fi
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[test]"
	@touch $(STAMP)

# System pieces pip cannot install (controlplane/doctor.py): listed, installed when possible (Debian's
# chromium and prometheus, as root: promtool tests the alert rules, the demo runs the server; the
# Node.js clients with npm ci into clients/nodejs and clients/remoting-node; the C++ remoting client with
# pip into its own virtualenv, clients/remoting-py/.venv), or the run stops at once with one line saying
# what to install.
doctor: venv
	$(PY) -m controlplane.doctor --for test

# --for demo installs Debian's prometheus when it can; without it the demo runs without a Prometheus.
demo: venv
	$(PY) -m controlplane.doctor --for demo
	$(PY) -m controlplane.launcher demo

# Two pytest-xdist workers, a test module at a time each (tests/lanes.py: the Spark audits as one, the
# e2e modules first); the 20 slowest tests are listed at the end, to see where the time goes.
TEST_WORKERS ?= 2
test: venv
	$(PY) -m controlplane.doctor --for test
	$(PY) -m controlplane.launcher test -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)

# The unit tier runs with PostgreSQL and Redis out of reach on purpose: a unit test that touches
# either fails instead of passing on a machine that happens to have them.
test-unit: venv
	DJANGO_SETTINGS_MODULE=controlplane.settings_test DATABASE_URL=postgres://postgres@127.0.0.1:1/unreachable \
	REDIS_URL=redis://127.0.0.1:1/0 $(PY) -m pytest -m unit -p no:cacheprovider $(PYTEST_ARGS)

# Only PostgreSQL + Redis (embedded unless DATABASE_URL/REDIS_URL are set), until Ctrl-C.
services: venv
	$(PY) -m controlplane.launcher services

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Caches and build leftovers only: the demo database and secrets in .data/ and the installed test
# clients survive.
clean:
	find . \( -path ./$(VENV) -o -path ./clients/nodejs/node_modules -o -path ./clients/remoting-node/node_modules \
		-o -path ./clients/remoting-py/.venv \) -prune -o -type d -name __pycache__ -print0 | xargs -0r rm -rf
	rm -rf .pytest_cache .ruff_cache test-artifacts build *.egg-info

# Everything generated, including the virtualenv, .data/ (embedded database, logs, passwords) and the
# test clients that make doctor installs (clients/nodejs/node_modules, clients/remoting-node/node_modules,
# clients/remoting-py/.venv).
distclean: clean
	rm -rf $(VENV) .data brokers/store/_codec.*.so clients/nodejs/node_modules clients/remoting-node/node_modules \
		clients/remoting-py/.venv
