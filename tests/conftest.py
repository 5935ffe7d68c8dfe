"""Shared fixtures, and the environment every test runs in (helpers that build tiny models: tests/tiny.py)."""

import os
import tempfile

# Triton kernels run under the interpreter on CPU. The flag must be set before anything imports
# triton (transformers does, indirectly), or kernels are defined for a GPU that is not there.
os.environ.setdefault("TRITON_INTERPRET", "1")
# What Jev measures per machine (verify profiles) goes to a folder of this run, not the user's cache.
os.environ["JEV_CACHE_DIR"] = tempfile.mkdtemp(prefix="jev-test-cache-")

import pytest
import torch

from jev.model import Model
from tests.tiny import random_model, tiny_config


@pytest.fixture
def tiny_model() -> Model:
    return random_model(tiny_config(index_topk=24))


@pytest.fixture
def one_thread():
    """One intra-op thread: on a shared 2-core machine, OpenMP waits cost more than they save."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
