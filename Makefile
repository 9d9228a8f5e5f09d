# pyklog: the two commands of the README.  Both set up everything on a fresh machine.
#   make demo   ZooKeeper + a broker + a Spark streaming query through pyklog, end to end
#   make test   the whole test suite (unit, integration with real servers, Spark, notebooks)
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(VPY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(VPY))

.PHONY: demo test venv debian bench clean

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
	$(VPY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: debian venv
	$(VPY) -m pytest -q -ra --durations=25 $(PYTEST_ARGS)

demo: debian venv
	$(VPY) examples/demo.py

bench: venv
	@for b in bench/bench_*.py; do echo "== $$b"; $(VPY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
