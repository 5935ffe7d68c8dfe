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

from jev.generate.profiles import ProfileMeasurement
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


# Every verify profile this test process starts measuring in the background.
_MEASUREMENTS: list[ProfileMeasurement] = []


@pytest.fixture(scope="session", autouse=True)
def measurements_recorded():
    """Record every measurement the session starts, for the module fixture below to stop."""
    start = ProfileMeasurement.__init__

    def recorded(self, *args, **kwargs) -> None:
        start(self, *args, **kwargs)
        _MEASUREMENTS.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ProfileMeasurement, "__init__", recorded)
        yield


@pytest.fixture(scope="module", autouse=True)
def no_measurement_outlives_its_module(measurements_recorded):
    """Stop, when a test module ends, every measurement started in it. Left running, a measurement
    went on through later modules, taking a core from their tests; and while a test forces the Triton
    kernels through the environment (`tests/test_kernels_dispatch.py`), its passes would run through
    the interpreter, whose patching of `triton.language` is process-wide, beside the next test's
    interpreted kernels: a full `make test` failed so once (a Triton decode test: "Did you forget to
    add @triton.jit ?")."""
    yield
    while _MEASUREMENTS:
        _MEASUREMENTS.pop().stop()
