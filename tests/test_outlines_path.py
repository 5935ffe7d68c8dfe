"""The Outlines baseline on a tiny random model: valid closed-field JSON, Jev's prompt ids unchanged."""

import json
from collections.abc import Iterator

import pytest

pytest.importorskip("outlines")

import torch
import torch._dynamo
from outlines_core import Guide
from tokenizers import Tokenizer

from benchmarks.outlines_path import OutlinesDecider, closed_model
from jev.schema import Task, render_input
from jev.tokenizer import BOS_ID, save_tokenizer
from schemas.chat import TASK as CHAT
from schemas.mail import TASK as MAIL
from tests.tiny import random_model, tiny_config, tiny_tokenizer

INPUTS = {
    "mail": [{"body": "Win a free cruise now!"}, {"body": "Re: patch for the kernel build\nSee the agenda."}],
    "chat": [{"message": "Meeting moved to Tuesday"}, {"message": "¿Dónde está la biblioteca?"}],
}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def decider(tmp_path_factory, tokenizer) -> Iterator[OutlinesDecider]:
    folder = tmp_path_factory.mktemp("tiny_outlines")
    random_model(tiny_config(vocab_size=tokenizer.get_vocab_size())).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    # Outlines' masking kernel is torch.compile'd; compiling it costs ~20 s on a CPU. Eager runs the
    # same masking, so the test skips the compile.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch._dynamo.config, "disable", True)
        yield OutlinesDecider(folder, max_new_tokens=96)


def prompts(tokenizer: Tokenizer, task: Task) -> list[list[int]]:
    """Jev's prompt: `<bos>` then the rendered input's tokens."""
    return [[BOS_ID, *tokenizer.encode(render_input(task, x)).ids] for x in INPUTS[task.name]]


@pytest.mark.slow
@pytest.mark.parametrize("task", [MAIL, CHAT], ids=lambda t: t.name)
def test_answers_are_valid_closed_field_json(decider, tokenizer, task):
    results = decider.decide(task, prompts(tokenizer, task), batch_size=1)
    fields = [f.name for f in task.spec.closed_fields]
    for result in results:
        assert result.value is not None, result.text
        assert list(result.value) == fields
        closed_model(task).model_validate_json(result.text)
        assert result.forward_passes == result.new_tokens
    assert task.name in decider.first_call_seconds
    assert decider.compiled[task.name].compile_seconds > 0


def test_closed_model_keeps_only_the_closed_fields_in_order():
    for task in (MAIL, CHAT):
        assert list(closed_model(task).model_fields) == [f.name for f in task.spec.closed_fields]


@pytest.mark.slow
def test_prompt_ids_reach_the_model_unchanged_and_batching_agrees(decider, tokenizer):
    ids = prompts(tokenizer, MAIL)
    assert len(ids[0]) != len(ids[1]), "the batch must need padding"
    seen: list[dict] = []
    hook = decider.hf_model.register_forward_pre_hook(
        lambda _module, _args, kwargs: seen.append(kwargs) if not seen else None, with_kwargs=True
    )
    try:
        batched = decider.decide(MAIL, ids, batch_size=2)
    finally:
        hook.remove()
    prefill_ids, mask = seen[0]["input_ids"], seen[0]["attention_mask"]
    for row, row_mask, expected in zip(prefill_ids.tolist(), mask.tolist(), ids, strict=True):
        assert [t for t, m in zip(row, row_mask, strict=True) if m] == expected
        assert row[-len(expected) :] == expected, "padding goes on the left"
    singles = decider.decide(MAIL, ids, batch_size=1)
    assert [r.text for r in batched] == [r.text for r in singles]
    assert batched[0].forward_passes == max(r.new_tokens for r in batched)


@pytest.mark.parametrize(
    ("task", "answer"),
    [(MAIL, {"kind": "hard_ham", "mailing_list": True, "reply": False}), (CHAT, {"language": "dutch", "topic": "ai"})],
    ids=lambda x: getattr(x, "name", ""),
)
def test_the_trained_answer_format_is_admitted_token_by_token(decider, task, answer):
    """The model learns `json.dumps` text tokenised as one string; the grammar must allow exactly those tokens."""
    guide = Guide(decider.compile(task).generator.logits_processor.index)
    for token in decider.tokenizer(json.dumps(answer)).input_ids:
        assert token in guide.get_tokens()
        guide.advance(token_id=token, return_tokens=False)
    assert guide.get_tokens() == [decider.tokenizer.eos_token_id]
