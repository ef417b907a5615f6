# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo quickstart test test-fast test-gpu check format docs generate clean

setup:
	@./scripts/setup.sh

## Run the main job: the KV-cache avalanche drill (seed 000) on the default, then the tuned profile.
demo: setup
	$(VENV)/bin/kvscope drill kv-avalanche --profile both --report reports/demo

## The foundation's smoke test: vLLM's own server on the demo model, a few requests, its metrics.
quickstart: setup
	$(PY) -m drill.quickstart

## The whole suite, as CI runs it: unit tests and the integration tests that start no engine on every
## core (a module per worker: its Prometheus is set up once), then those with real engines one at a time.
test: setup
	$(PY) -m pytest tests/unit tests/gpu tests/integration -m "not integration or no_engine" -n auto --dist loadfile --durations=15
	$(PY) -m pytest tests/integration -m "integration and not no_engine" --durations=40

## Unit tests only, on every core: under a minute, no vLLM engine, no Prometheus (`slow` ones: `make test`).
test-fast: setup
	$(PY) -m pytest -m "not integration and not slow" -n auto

## Tests that need an NVIDIA GPU (real NVML, XID watcher).
test-gpu: setup
	$(PY) -m pytest tests/gpu -m gpu

## Lint, format, types, and the layering contract (scripts/check_layers.py).
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) scripts/check_layers.py

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## Regenerate committed artefacts from the catalog: docs/metrics.md, dashboards, alert rules, runbooks.
generate docs: setup
	$(PY) -m kvscope.docs
	$(VENV)/bin/kvscope dashboards build
	$(VENV)/bin/kvscope alerts build

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
