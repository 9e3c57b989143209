# Two entry points: `make serve` and `make test`; each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: serve test bench protos fuzz clean image e2e-k8s

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

# The CPU image from the Dockerfile; where no registry can be reached, on a Python base made from Debian
# (deploy/image/build.sh: debootstrap once), with its size and start-to-ready time.
image:
	deploy/image/build.sh

# The image and the chart on a real single-node Kubernetes (../shared/k8s builds it once): install, the
# protocols with real clients, hot reload from the volume, upgrades and pod deletions under load. Not in `make test`.
e2e-k8s: $(VENV)/.dev
	deploy/e2e/k8s.sh
	deploy/e2e/k8s.sh --interface tfserving

# Coverage-guided fuzzing (tools/fuzz/fuzz.py): FUZZ_TARGET is all or one of graph_def, saved_model,
# tensor_bundle, example, tfrecord, v2_binary; crashes land in .fuzz/crashes/<target>/. atheris is no
# dependency of the package: installed here on first use.
FUZZ_TARGET ?= all
FUZZ_SECONDS ?= 60

fuzz: $(VENV)/.dev
	$(PY) -c "import atheris" 2>/dev/null || $(PY) -m pip install -q atheris
	$(PY) tools/fuzz/make_corpus.py
	$(PY) tools/fuzz/fuzz.py $(FUZZ_TARGET) --seconds $(FUZZ_SECONDS)

# The schemas' generated code (tools/gen_protos.py), made by grpcio-tools 1.72's protoc 30 in a venv of its own:
# protoc 30's code loads on every protobuf from 6.30 (pyproject.toml's floor is 6.31.1, ydf's) to 7.x, where a newer
# protoc's code refuses older runtimes; and grpcio-tools 1.72 needs protobuf < 7, which the dev venv must not get.
PROTO_VENV := .venv-protos

protos:
	test -x $(PROTO_VENV)/bin/python || $(PYTHON) -m venv $(PROTO_VENV)
	$(PROTO_VENV)/bin/python -m pip install -q 'grpcio-tools==1.72.*'
	$(PROTO_VENV)/bin/python tools/gen_protos.py

clean:
	rm -rf $(VENV) $(PROTO_VENV) build *.egg-info
