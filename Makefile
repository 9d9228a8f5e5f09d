# pyklog: the two commands of the README.  Both set up everything on a fresh machine.
#   make demo   ZooKeeper + a broker + a Spark streaming query through pyklog, end to end
#   make check  `make lint`, then the whole test suite: `make test` (tests/unit and tests/integration:
#               real servers, stock clients, Spark, notebooks) then `make test-faults` (tests/faults)
#   make unit   tests/unit alone: no server, JRE, root or network, under a minute
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
# The install is editable in setuptools' strict mode: a tree of links to the sources, so that
# Spark's data source lookup (installed modules named pyspark_*) finds pyspark_pyklog as it does in
# a normal install.  A new or removed source file needs a re-install: the stamp carries a hash of
# the list of package files, so `make` re-installs when it changes.
SRC_HASH := $(shell find src broker connector -name '*.py' 2>/dev/null | sort | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(SRC_HASH)

.PHONY: demo unit integration test test-faults lint check venv debian bench clean

debian:
	@command -v kcat >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y kcat >/dev/null 2>&1 || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat; }; }
	@command -v java >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -qq openjdk-17-jre-headless || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }; }

$(STAMP): setup.cfg pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	rm -rf build/__editable__* $(VENV)/.installed*
	$(VPY) -m pip install -q -e '.[test]' --config-settings editable_mode=strict
	touch $(STAMP)

venv: $(STAMP)

# The directory is the tier (tests/conftest.py marks each test by it): tests/unit needs no server,
# JRE, root or network; tests/integration starts real ZooKeeper, brokers, stock clients and Spark;
# tests/faults holds the slow fault scenarios (a minute or more of broker or driver SIGKILLs each).
# `make check` runs `make lint`, `make test` (unit + integration) then `make test-faults`: what CI runs.
unit: venv
	$(VPY) -m pytest -q -ra -n 2 tests/unit $(PYTEST_ARGS)

# The integration tier runs on both cores too, a test file per worker at a time (--dist loadfile:
# a file's module fixtures and its servers stay on one worker); each worker has its own ZooKeeper
# and SparkSession.  Most of its time is spent waiting on real servers, so two workers halve it.
integration: debian venv
	$(VPY) -m pytest -q -ra -n 2 --dist loadfile --durations=25 tests/integration $(PYTEST_ARGS)

test: debian venv
	$(VPY) -m pytest -q -ra -n 2 tests/unit $(PYTEST_ARGS)
	$(VPY) -m pytest -q -ra -n 2 --dist loadfile --durations=25 tests/integration $(PYTEST_ARGS)

test-faults: debian venv
	$(VPY) -m pytest -q -ra --durations=10 tests/faults $(PYTEST_ARGS)

check: lint test test-faults

# `make lint`: ruff (lint rules, then the formatter's check) over the package, the tests, the benchmarks
# and the examples, then mypy over the packages listed in pyproject.toml ([tool.mypy] packages).
# mypy sees the sources under their import names (pyklog.broker...) through build/typecheck, a tree
# of three links laid here: the repository's directories are not named as the package is.
LINT_PATHS := broker connector src tests bench examples
TYPECHECK := build/typecheck/pyklog
lint: venv
	mkdir -p $(TYPECHECK)
	ln -sfn ../../../src/pyklog/__init__.py $(TYPECHECK)/__init__.py
	ln -sfn ../../../broker $(TYPECHECK)/broker
	ln -sfn ../../../connector $(TYPECHECK)/connector
	@rc=0; \
	$(VPY) -m ruff check $(LINT_PATHS) || rc=1; \
	$(VPY) -m ruff format --check $(LINT_PATHS) || rc=1; \
	$(VPY) -m mypy || rc=1; \
	exit $$rc

demo: debian venv
	$(VPY) examples/demo.py

bench: venv
	@for b in bench/bench_*.py; do echo "== $$b"; $(VPY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
