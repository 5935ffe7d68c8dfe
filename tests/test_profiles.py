"""The verify profile: measured once per model and machine, in the background, never inside a decision."""

import threading

import pytest

from jev import Decider
from jev.generate import profiles
from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.scheduler import LoadAwareScheduler, VerifyProfile
from schemas.examples import TASK as EXAMPLE_TASK
from tests.tiny import random_model, tiny_config, tiny_tokenizer

TICKET = {"subject": "refund", "body": "Win a free cruise now! refund please"}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A saved decider with a drafter, and a cache folder of its own."""
    monkeypatch.setenv("JEV_CACHE_DIR", str(tmp_path / "cache"))
    model = random_model(tiny_config(index_topk=6, vocab_size=400, max_position_embeddings=256))
    decider = Decider.new(model, tiny_tokenizer(), {"schemas.examples:TASK": EXAMPLE_TASK}, max_input_tokens=48)
    decider.save(tmp_path / "model")
    drafter = random_model(tiny_config(index_topk=6, vocab_size=400, num_hidden_layers=1), seed=4)
    drafter.save_pretrained(tmp_path / "model" / "drafter")
    return tmp_path / "model"


class GatedMeasure:
    """Stands in for `VerifyProfile.measure`: counts calls and finishes only when `release` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def __call__(self, model, **kwargs) -> VerifyProfile:
        self.calls += 1
        assert self.release.wait(30), "the test never released the profile"
        return VerifyProfile(rows=(1,), widths=(1, 8), seconds=((0.01, 0.011),))


@pytest.mark.slow
def test_a_decision_does_not_wait_for_the_profile_and_the_profile_is_stored(folder, monkeypatch) -> None:
    measure = GatedMeasure()
    monkeypatch.setattr(VerifyProfile, "measure", measure)
    decider = Decider.load(folder, tasks=[EXAMPLE_TASK])
    first = decider.decide(EXAMPLE_TASK.decision_model, TICKET)  # the profile is still being measured
    assert decider.policy is None and decider.drafter.passes == 0, "text was decoded plainly meanwhile"
    measure.release.set()
    assert decider.profiling.wait(30) is not None
    again = decider.decide(EXAMPLE_TASK.decision_model, TICKET)
    assert isinstance(decider.policy, LoadAwareScheduler) and decider.drafter.passes > 0
    assert again.value == first.value, "greedy text is the same, drafted or not"

    reloaded = Decider.load(folder, tasks=[EXAMPLE_TASK])
    assert measure.calls == 1 and reloaded.profiling is None, "the stored profile is read, not measured again"
    assert reloaded.policy.profile == decider.policy.profile


def test_another_machine_measures_its_own_profile(folder, monkeypatch) -> None:
    measure = GatedMeasure()
    measure.release.set()
    monkeypatch.setattr(VerifyProfile, "measure", measure)
    Decider.load(folder, tasks=[EXAMPLE_TASK]).profiling.wait(30)
    monkeypatch.setattr(profiles, "processor_name", lambda: "another CPU")
    other = Decider.load(folder, tasks=[EXAMPLE_TASK])
    assert other.profiling is not None and other.profiling.wait(30) is not None
    assert measure.calls == 2


def test_a_measurement_stores_where_the_cache_folder_was_when_it_started(folder, tmp_path, monkeypatch) -> None:
    """A measurement still running when the cache folder changes (as between two tests) stores its
    profile where it started, never in the new folder, where it would stand for an unmeasured machine."""
    measure = GatedMeasure()
    monkeypatch.setattr(VerifyProfile, "measure", measure)
    decider = Decider.load(folder, tasks=[EXAMPLE_TASK])
    started = profiles.cache_dir()
    monkeypatch.setenv("JEV_CACHE_DIR", str(tmp_path / "later"))
    measure.release.set()
    assert decider.profiling.wait(30) is not None
    assert len(list((started / "profiles").glob("*.json"))) == 1
    assert not (tmp_path / "later").exists()


def test_an_unreadable_stored_profile_is_measured_again(folder, monkeypatch) -> None:
    measure = GatedMeasure()
    measure.release.set()
    monkeypatch.setattr(VerifyProfile, "measure", measure)
    decider = Decider.load(folder, tasks=[EXAMPLE_TASK])
    decider.profiling.wait(30)
    context, width = decider._profile_shape()
    profiles.profile_file(decider.model_id, decider.model, context, width).write_text("{not json")
    again = Decider.load(folder, tasks=[EXAMPLE_TASK]).profiling
    # Waited for here: a thread left running could call the real measure once the monkeypatch is undone.
    assert again is not None and again.wait(30) is not None and measure.calls == 2


def test_a_failed_profile_leaves_text_fields_on_plain_decoding(folder, monkeypatch) -> None:
    def broken(model, **kwargs):
        raise RuntimeError("no timer")

    monkeypatch.setattr(VerifyProfile, "measure", broken)
    decider = Decider.load(folder, tasks=[EXAMPLE_TASK])
    assert decider.profiling.wait(30) is None and isinstance(decider.profiling.error, RuntimeError)
    decider.decide(EXAMPLE_TASK.decision_model, TICKET)
    assert decider.policy is None and decider.drafter.passes == 0


class RecordingLock:
    """A lock that remembers whether it is held."""

    def __init__(self) -> None:
        self.held = False
        self.entered = 0

    def __enter__(self) -> None:
        self.held = True
        self.entered += 1

    def __exit__(self, *exc) -> None:
        self.held = False


def test_every_timed_pass_holds_the_compute_lock() -> None:
    model = random_model(tiny_config(index_topk=6, vocab_size=400))
    lock = RecordingLock()
    forward = model.forward

    def checked(*args, **kwargs):
        assert lock.held, "a profile pass ran outside the lock"
        return forward(*args, **kwargs)

    model.forward = checked
    profile = VerifyProfile.measure(model, rows=(1, 4), context=8, width=3, repeats=2, lock=lock)
    assert lock.entered == 2 * 3 * 2 and profile.rows == (1, 4) and profile.widths == (1, 2, 3)
    assert all(t > 0 for row in profile.seconds for t in row)


def test_an_unsaved_decider_measures_without_storing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("JEV_CACHE_DIR", str(tmp_path))
    model = random_model(tiny_config(index_topk=6, vocab_size=400, max_position_embeddings=256))
    drafter = AutoregressiveDrafter(random_model(tiny_config(index_topk=6, vocab_size=400, num_hidden_layers=1)))
    base = Decider.new(model, tiny_tokenizer(), {"schemas.examples:TASK": EXAMPLE_TASK}, max_input_tokens=48)
    decider = Decider(base.model, base.tokenizer, base.tasks, base.decision_model, base.manifest, drafter=drafter)
    decider.decide(EXAMPLE_TASK.decision_model, TICKET)
    assert decider.profiling.wait(60) is not None
    assert not (tmp_path / "profiles").exists()


def test_the_service_is_ready_and_answers_while_the_profile_is_measured(folder, monkeypatch) -> None:
    from litestar.testing import TestClient

    from jev.serve.app import create_app
    from jev.serve.engine import Engine
    from tests.serving import wait_ready

    measure = GatedMeasure()
    monkeypatch.setattr(VerifyProfile, "measure", measure)
    engine = Engine.load(folder)
    with TestClient(create_app(engine)) as client:
        wait_ready(client.get)
        response = client.post("/v1/decide/ticket", json={"input": TICKET})
        assert response.status_code == 200, response.text
        assert engine.decider.profiling.profile is None, "answered before the profile was done"
    measure.release.set()
    assert Engine.load(folder, speculative=False).decider.profiling is None


@pytest.mark.slow
def test_texts_through_the_batcher_at_mixed_batch_sizes_equal_plain_decoding(folder) -> None:
    """Batches of 4, 1 and 3 share one load-aware scheduler, which keeps learning across them."""
    import asyncio
    import time

    from jev.serve.batcher import Batcher

    plain = Decider.load(folder, tasks=[EXAMPLE_TASK], speculative=False)
    drafting = Decider.load(folder, tasks=[EXAMPLE_TASK])
    drafting.profiling.wait(60)
    task = drafting.tasks["ticket"]
    bodies = [f"{word} please, order {i}" for i, word in enumerate(["refund", "login", "patch", "cruise"] * 2)]
    inputs = [drafting.encode(task, {"subject": "help", "body": body}) for body in bodies]
    sizes = []

    def run(task, batch):
        sizes.append(len(batch))
        return drafting.decide_encoded(task, batch)

    batcher = Batcher(run, max_batch=4, max_wait_ms=20, max_queue=64)
    batcher.start()
    assert batcher.ready.wait(30)

    async def waves():
        answers = []
        for wave in (inputs[:4], inputs[4:5], inputs[5:8]):
            futures = batcher.submit(task, wave, time.perf_counter() + 120)
            answers += [value for value, _ in await asyncio.gather(*futures)]
        return answers

    try:
        served = asyncio.run(waves())
    finally:
        batcher.close(30)
    assert sizes == [4, 1, 3]
    assert isinstance(drafting.policy, LoadAwareScheduler) and drafting.drafter.passes > 0
    expected = plain.decide_batch(EXAMPLE_TASK.decision_model, [{"subject": "help", "body": b} for b in bodies])
    assert [r.value for r in served] == [r.value for r in expected]


def test_stopping_ends_the_measurement_after_its_pass_and_stores_nothing(folder, monkeypatch) -> None:
    passes = []

    def endless(model, lock, **kwargs):
        while True:
            with lock:
                passes.append(1)

    monkeypatch.setattr(VerifyProfile, "measure", endless)
    decider = Decider.load(folder, tasks=[EXAMPLE_TASK])
    while not passes:
        threading.Event().wait(0.01)
    decider.profiling.stop()
    assert not decider.profiling._thread.is_alive()
    assert decider.profiling.profile is None and decider.profiling.error is None
    assert not any((profiles.cache_dir() / "profiles").glob("*.json"))


EXIT_WHILE_MEASURING = """
import sys, torch
from jev import Decider
from jev.generate.scheduler import VerifyProfile
def endless(model, lock, **kwargs):
    while True:
        with lock:
            torch.randn(256, 256) @ torch.randn(256, 256)
VerifyProfile.measure = endless
Decider.load(sys.argv[1])
"""


@pytest.mark.slow
def test_a_process_that_exits_while_measuring_exits_cleanly(folder, tmp_path) -> None:
    """Torch running on the profile's thread at interpreter shutdown aborts the process; stop() at exit prevents it."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", EXIT_WHILE_MEASURING, str(folder)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_jev_profile_measures_once_per_machine(folder, monkeypatch, capsys) -> None:
    from jev.cli import main

    measure = GatedMeasure()
    measure.release.set()
    monkeypatch.setattr(VerifyProfile, "measure", measure)
    assert main(["profile", "--model", str(folder)]) == 0
    assert "stored the verify profile" in capsys.readouterr().out
    assert main(["profile", "--model", str(folder)]) == 0
    assert "stored already" in capsys.readouterr().out and measure.calls == 1
