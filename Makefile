# Every target creates .venv when it is missing and installs the project into it; nothing is
# expected to be installed by hand. torch is pinned first so pip never pulls a multi-GB CUDA build.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
JOBS   ?= 2

.PHONY: test lint bench clean-venv

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/attention.py

clean-venv:
	rm -rf $(VENV)
