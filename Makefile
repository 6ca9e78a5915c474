# attnexp — `make help` lists the targets.
PYTHON ?= python3
TORCH ?= torch==2.13.0
# e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu: PyPI's Linux torch is the CUDA build.
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: help setup quickstart test test-fast test-all test-min lint format sweep report tensorboard bench bench-gpu clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
# torch first and pinned, so that installing attnexp finds it there and pulls no other build.
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install torch, then attnexp with its dev extra

quickstart: setup  ## a real experiment offline on the embedded sample data (< 3 min on 2 cores)
	# One torch thread: on 2 busy cores the LSTM's per-time-step thread syncs made 2 threads >6x slower.
	OMP_NUM_THREADS=1 $(BIN)/python -m attnexp model=lstm_attn scorer=dot trainer=cpu trainer.max_epochs=3 data.batch_size=32

# The inner loop: unit tests of the building blocks, the data and the tasks, the configs and the
# layering; no command run end to end (tests/cli, tests/runner, tests/runs; the e2e marker).
FAST_TESTS := tests/modules tests/models tests/data tests/tasks tests/viz tests/test_configs.py \
	tests/test_architecture.py tests/test_errors.py tests/test_files.py tests/cli/test_overrides.py

test: setup  ## the test suite (excludes slow tests), with the 15 slowest listed
	$(BIN)/python -m pytest -q --durations=15

test-fast: setup  ## unit and config tests only, no end-to-end training (< 2 min on 2 cores)
	$(BIN)/python -m pytest -q --durations=5 -m "not slow and not e2e" $(FAST_TESTS)

test-all: setup  ## every test, slow ones too
	$(BIN)/python -m pytest -q -m ""

test-min:  ## the test suite on the lowest versions pyproject allows (.ci/min-versions.txt), in .venv-min
	test -d .venv-min || $(PYTHON) -m venv .venv-min
	.venv-min/bin/python -m pip install -q --upgrade pip
	.venv-min/bin/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	.venv-min/bin/python -m pip install -q -c .ci/min-versions.txt -e '.[dev]'
	.venv-min/bin/python -m pytest -q

lint: setup  ## ruff lint and format check
	$(BIN)/ruff check src tests bench docs
	$(BIN)/ruff format --check src tests bench docs

format: setup  ## ruff fix and format
	$(BIN)/ruff check --fix src tests bench docs
	$(BIN)/ruff format src tests bench docs

sweep: setup  ## the bag-of-digits comparison as one sweep
	$(BIN)/python -m attnexp -m model=bag_attn scorer=additive,dot,scaled_dot,bilinear

report: setup  ## report of the newest sweep under outputs/multiruns (or DIR=<dir>): report.md, .csv, plots
	$(BIN)/python -m attnexp.report $(or $(DIR),$(lastword $(sort $(wildcard outputs/multiruns/*))),outputs)

tensorboard: setup  ## serve outputs/ on http://127.0.0.1:6006
	$(BIN)/tensorboard --logdir outputs --host 127.0.0.1 --port 6006 --load_fast false

bench: setup  ## throughput benchmarks (runner vs plain PyTorch loop)
	$(BIN)/python bench/bench_overhead.py
	$(BIN)/python bench/bench_bag_mnist.py
	$(BIN)/python bench/bench_lcqmc.py $(if $(wildcard data/lcqmc/dev.tsv),--data-dir data)
	$(BIN)/python bench/bench_imdb.py $(if $(wildcard data/imdb/train.parquet),--data-dir data)
	$(BIN)/python bench/bench_translation.py $(if $(wildcard data/fra-eng/fra.txt),--data-dir data)

bench-gpu: setup  ## the GPU speed table, today's setup beside the new one (needs CUDA; OUT=outputs/gpu)
	PYTHON=$(BIN)/python bash bench/run_gpu.sh

clean:  ## remove caches (never outputs/)
	rm -rf .ruff_cache .pytest_cache build dist src/*.egg-info
