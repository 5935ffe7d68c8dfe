"""Two-process DDP on CPU (gloo): ranks end with identical weights and see disjoint halves of each batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from jev.train.lm import LMSettings, pretrain
from jev.train.presets import TINY_TEST_CONFIG

CORPUS = Path("tests/fixtures/train/corpus").resolve()
WORKER = Path("tests/fixtures/train/ddp_worker.py").resolve()


@pytest.mark.slow
def test_two_ranks_train_the_same_model_on_disjoint_shards(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(WORKER),
        str(tmp_path / "ddp"),
        str(CORPUS),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]

    rank0, rank1 = (load_file(tmp_path / "ddp" / f"rank{r}.safetensors") for r in (0, 1))
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name
    report = json.loads((tmp_path / "ddp" / "train_lm.json").read_text())
    assert report["world_size"] == 2 and report["final_loss"] < report["first_loss"]
    assert report["evals"][-1]["val_loss"] < report["evals"][0]["val_loss"]

    # The ranks' mean first-step loss is the single-process loss of the whole global batch, so
    # the two shards together are exactly that batch.
    single = pretrain(
        LMSettings(
            model=TINY_TEST_CONFIG,
            texts=[CORPUS],
            out=tmp_path / "single",
            block_size=32,
            batch_size=4,
            steps=1,
            lr=1e-2,
            warmup=1,
            eval_every=0,
            held_out_fraction=0.1,
        )
    )
    single_first = json.loads((single / "train_lm.json").read_text())["first_loss"]
    assert abs(report["first_loss"] - single_first) <= 1e-5 * single_first
