# Every target sets itself up: a fresh machine needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install services services-stop demo test wheel-test compat-test chaos bench clean

$(STAMP): pyproject.toml setup.py connectors-worker-startup.pth
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# drop an editable install from when the distribution was called `connectors` (an unrelated PyPI project)
	$(PY) -m pip uninstall -q -y connectors 2>/dev/null || true
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	# an editable install skips setup.py's copy of the startup hook (connectors/_worker_startup.py)
	$(PY) -c 'import shutil, sysconfig; shutil.copy("connectors-worker-startup.pth", sysconfig.get_paths()["purelib"])'
	touch $(STAMP)

install: $(STAMP)

services: install  ## start or reuse local Kafka, PostgreSQL and Schema Registry; prints `export ...` lines to eval
	@$(PY) -m connectors.testing.services start

services-stop: install
	@$(PY) -m connectors.testing.services stop

demo: install
	$(PY) examples/demo.py

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

wheel-test: install  ## build sdist and wheel, install the wheel in a fresh venv, smoke-test it from outside the tree
	$(PY) tests/wheel/run.py

# The older Spark lines: the tests marked `smoke` against the wheel on each (the newest runs everything).
COMPAT_SPARK ?= 4.1.4 4.2.1
compat-test: install  ## the smoke tests with the built wheel in a fresh venv per Spark line
	$(PY) tests/wheel/run.py $(addprefix --spark ,$(COMPAT_SPARK))

chaos: install  ## every exactly-once path and source SIGKILLed 20 times at random; prints a table
	$(PY) tests/chaos.py $(CHAOS_ARGS)

bench: install
	$(PY) -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info
