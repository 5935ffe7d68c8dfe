"""Text fields: the answer's JSON and tokens, and generation continuing the decision pass's cache."""

import json
import random

import pytest
import torch

from jev import Decider
from jev.generate.answer import AnswerTokens
from jev.generate.drafters.autoregressive import AutoregressiveDrafter
from jev.generate.drafters.eagle import EagleDrafter, EagleNet, eagle_config
from jev.generate.loop import generate
from jev.generate.scheduler import FixedLength, LoadAwareScheduler
from jev.generate.texts import TextSettings
from jev.schema import UnsupportedSchemaError, compile_decision
from jev.schema.answer import answer_segments, answer_text, parse_text, text_content
from jev.tokenizer import EOS_ID
from schemas.examples import TASK as EXAMPLE_TASK
from schemas.mail import TASK as MAIL_TASK
from tests.tiny import random_model, tiny_config, tiny_tokenizer

TICKETS = [
    {"subject": "refund", "body": "Win a free cruise now! refund please"},
    {"subject": "login", "body": "Meeting moved to Tuesday"},
    {"subject": "patch", "body": "Re: patch for the kernel build " * 3},
]
EXAMPLE_VALUES = {
    "priority": "urgent", "team": None, "severity": 3, "products": {"api", "web"}, "customer.plan": "pro",
    "customer.churn_risk": True, "summary": 'He said "refund" twice\\',
}


@pytest.fixture(scope="module")
def decider() -> Decider:
    model = random_model(tiny_config(index_topk=6, vocab_size=400, max_position_embeddings=256))
    return Decider.new(model, tiny_tokenizer(), {"schemas.examples:TASK": EXAMPLE_TASK}, max_input_tokens=48)


def _example_values() -> dict:
    spec = EXAMPLE_TASK.spec
    return {f.name: EXAMPLE_VALUES.get(f.name, f.values[0] if f.values else "") for f in spec.fields}


def test_answer_text_is_the_models_json_in_field_order() -> None:
    spec = EXAMPLE_TASK.spec
    values = _example_values()
    text = answer_text(spec, values)
    decision = EXAMPLE_TASK.decision_model.model_validate(json.loads(text))
    assert decision == spec.build(values)
    assert json.loads(text)["products"] == ["web", "api"], "labels in declaration order, never in set order"
    order = [s.field for s in answer_segments(spec, values) if s.field]
    assert order == [f.name for f in spec.closed_fields] + [f.name for f in spec.text_fields]
    assert parse_text(text_content('a "b" \\ c')) == 'a "b" \\ c'


def test_any_content_the_model_writes_parses_to_text_that_encodes() -> None:
    for text in ['a "b" \\ c', "tab\there\n", "\\\\", "😀 ü", "a\\u00e9"]:
        assert parse_text(text_content(text)) == text
    assert parse_text("C:\\Users\\ \\") == "C:\\Users\\ ", "invalid escapes kept, the dangling one dropped"
    assert parse_text("a\\\\\\") == "a\\", "an escaped backslash, then a dangling one"
    assert parse_text("line\nbreak") == "line\nbreak", "a raw control character passes"
    assert parse_text("x\\ud800y") == "x\ufffdy" and parse_text("\\ud83d\\ude00") == "😀"
    assert parse_text("\\u12") == "\\u12"
    rng, pieces = random.Random(0), ["\\", "u", "d", "8", "0", "n", "a", " ", "\n", "/"]
    for _ in range(3000):
        content = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        text = parse_text(content)
        text.encode("utf-8")
        if "\\" not in content:
            assert text == content


def test_text_inside_a_reopened_nested_model_is_refused() -> None:
    from typing import Literal

    from pydantic import BaseModel

    class Inner(BaseModel):
        note: str
        plan: Literal["a", "b"]

    class Outer(BaseModel):
        inner: Inner
        ok: bool

    with pytest.raises(UnsupportedSchemaError, match="top level"):
        answer_segments(compile_decision(Outer), {"inner.note": "x", "inner.plan": "a", "ok": True})


def test_answer_tokens_are_the_segments_tokenised_apart(decider: Decider) -> None:
    answer = AnswerTokens(EXAMPLE_TASK.spec, decider.tokenizer, EOS_ID)
    values = _example_values()
    tokenizer = decider.tokenizer
    expected = [i for s in answer_segments(EXAMPLE_TASK.spec, values)
                for i in tokenizer.encode(s.text, add_special_tokens=False).ids]
    assert answer.encode(values) == [*expected, answer.eos]
    assert len(answer.encode(values)) <= answer.max_tokens
    quote = tokenizer.encode('"', add_special_tokens=False).ids[0]
    assert quote in answer.text_end and answer.eos in answer.text_end
    assert all('"' in tokenizer.decode([t]) for t in answer.text_end - {answer.eos})
    prefix = answer.text_prefix(values)
    assert answer.encode(values)[: len(prefix)] == prefix
    assert tokenizer.decode(prefix).endswith('"summary": "')


@pytest.mark.slow
def test_text_continues_the_decision_cache_exactly_as_a_fresh_prompt(decider: Decider) -> None:
    results = decider.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)
    answer = decider.answer_tokens(EXAMPLE_TASK)
    spec = EXAMPLE_TASK.spec
    for ticket, result in zip(TICKETS, results, strict=True):
        closed = {f.name: v for f, v in zip(spec.closed_fields, _closed_values(spec, result.value), strict=True)}
        prompt = [*decider.encode(EXAMPLE_TASK, ticket).token_ids, *answer.text_prefix(closed)]
        fresh = generate(decider.model, prompt, spec.field("summary").max_tokens + 1, temperature=0,
                         stop=answer.text_end, no_repeat_ngram=decider.text_settings.no_repeat_ngram).tokens[0]
        ended = fresh[-1] in answer.text_end
        text = decider.tokenizer.decode(fresh if ended else fresh[:-1]).split('"')[0]
        assert result.value.summary == parse_text(text)
        assert result.usage.generated_tokens == len(fresh)
        assert result.usage.decision_passes == 1 and result.usage.accepted_length == pytest.approx(1.0)
        assert result.usage.generation_passes == 1 + len(fresh), "a pass reads the prompt, then one per token"
        assert result.model["truncated_texts"] == ([] if ended else ["summary"])


@pytest.mark.slow
def test_one_by_one_equals_the_batch_and_speculative_equals_plain(decider: Decider) -> None:
    batch = decider.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)
    alone = [decider.decide(EXAMPLE_TASK.decision_model, t) for t in TICKETS]
    assert [r.value for r in batch] == [r.value for r in alone]
    drafter_model = random_model(tiny_config(index_topk=6, vocab_size=400, num_hidden_layers=1), seed=3)
    speculative = Decider(
        decider.model, decider.tokenizer, decider.tasks, decider.decision_model, decider.manifest,
        drafter=AutoregressiveDrafter(drafter_model), policy=FixedLength(), text_settings=TextSettings(draft_len=3),
    )
    drafted = speculative.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)
    assert [r.value for r in drafted] == [r.value for r in batch]
    assert [r.usage.generated_tokens for r in drafted] == [r.usage.generated_tokens for r in batch]
    assert speculative.drafter.passes > 0, "the drafter drafted"


def test_mail_task_writes_a_subject_after_its_closed_fields() -> None:
    spec = MAIL_TASK.spec
    assert [f.name for f in spec.text_fields] == ["subject"] and spec.field("subject").max_tokens == 32
    text = answer_text(spec, {"kind": "spam", "mailing_list": False, "reply": True, "subject": "Re: hi"})
    assert text == '{"kind": "spam", "mailing_list": false, "reply": true, "subject": "Re: hi"}'


def _closed_values(spec, decision) -> list:
    values = spec.values_of(decision)
    return [values[f.name] for f in spec.closed_fields]


@pytest.mark.slow
def test_sampled_texts_are_reproducible_with_a_seed(decider: Decider) -> None:
    sampled = Decider(
        decider.model, decider.tokenizer, decider.tasks, decider.decision_model, decider.manifest,
        text_settings=TextSettings(temperature=1.0, seed=5),
    )
    first = [r.value.summary for r in sampled.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)]
    again = [r.value.summary for r in sampled.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)]
    assert first == again


@pytest.mark.slow
def test_a_saved_drafter_loads_with_the_decider_and_changes_nothing_greedy(decider: Decider, tmp_path) -> None:
    decider.save(tmp_path)
    random_model(tiny_config(index_topk=6, vocab_size=400, num_hidden_layers=1), seed=4).save_pretrained(
        tmp_path / "drafter"
    )
    loaded = Decider.load(tmp_path, tasks=[EXAMPLE_TASK])
    assert isinstance(loaded.drafter, AutoregressiveDrafter) and loaded.profiling is not None
    plain = Decider.load(tmp_path, tasks=[EXAMPLE_TASK], speculative=False)
    assert plain.drafter is None and plain.profiling is None
    assert loaded.profiling.wait() is not None, "the verify profile is measured in the background at load"
    drafted = loaded.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)
    assert isinstance(loaded.policy, LoadAwareScheduler)
    assert [r.value for r in drafted] == [r.value for r in plain.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)]


class ObservedEagle(EagleDrafter):
    """Keeps the first `observe` of each generation: what the drafter starts drafting from."""

    def __init__(self, net: EagleNet, target) -> None:
        super().__init__(net, target)
        self.first: list[tuple[list[list[int]], torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.fresh = False

    def start(self, prompts, max_len):
        super().start(prompts, max_len)
        self.fresh, self.prompts = True, [list(prompt) for prompt in prompts]

    def observe(self, states, followers, counts):
        if self.fresh:
            self.first.append((self.prompts, states.clone(), followers.clone(), counts.clone()))
            self.fresh = False
        super().observe(states, followers, counts)


@torch.no_grad()
def test_a_state_reading_drafter_starts_from_the_whole_input_and_changes_nothing(decider: Decider) -> None:
    """The decision pass's input states join the answer prefix's: the drafter sees every cached position,
    each state the model's own final state there."""
    torch.manual_seed(4)
    net = EagleNet(eagle_config(decider.model.config, 400), torch.arange(400)).attach(decider.model)
    eagle = ObservedEagle(net.eval(), decider.model)
    speculative = Decider(
        decider.model, decider.tokenizer, decider.tasks, decider.decision_model, decider.manifest,
        drafter=eagle, policy=FixedLength(), text_settings=TextSettings(draft_len=3),
    )
    drafted = speculative.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)
    assert [r.value for r in drafted] == [r.value for r in decider.decide_batch(EXAMPLE_TASK.decision_model, TICKETS)]
    prompts, states, followers, counts = eagle.first[0]  # the first text field's generation
    assert counts.tolist() == [len(prompt) - 1 for prompt in prompts]
    for row, prompt in enumerate(prompts):
        assert followers[row, : counts[row]].tolist() == prompt[1:]
        fresh = decider.model.hidden_states(torch.tensor([prompt[:-1]]))[0]
        torch.testing.assert_close(states[row, : counts[row]], fresh, rtol=1e-4, atol=1e-4)
