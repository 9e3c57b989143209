# Two entry points: `make serve` and `make test`; each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: serve test bench protos clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.base
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

serve: $(VENV)/.base
	$(VENV)/bin/tensorgate serve --model-repository models

test: $(VENV)/.dev
	$(PY) -m pytest -q

bench: $(VENV)/.base
	$(PY) bench/engine_bench.py
	$(PY) bench/optimizer_bench.py

protos:
	$(PY) -m pip install -q -e '.[proto]'
	$(PY) tools/gen_protos.py

clean:
	rm -rf $(VENV) build *.egg-info
