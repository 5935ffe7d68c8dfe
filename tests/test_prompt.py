"""Input framings (`jev.decide.prompt`): each frames as declared, the chat one as transformers' own
`apply_chat_template` does, and a folder keeps its tasks' framing."""

import json

import pytest
from pydantic import BaseModel
from transformers import PreTrainedTokenizerFast

from jev import Decider
from jev.decide.bundle import MANIFEST_FILE
from jev.decide.prompt import framed
from jev.model import CheckpointError
from jev.schema import JevError, Task, render_input
from tests.tiny import random_model, tiny_config, tiny_tokenizer

# SmolLM2-Instruct's own template: a default system turn when none is given
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class Note(BaseModel):
    text: str
    author: str


class Verdict(BaseModel):
    urgent: bool


DESCRIBED = Task(name="note", input_model=Note, decision_model=Verdict, description="Is the note urgent?")
BARE = Task(name="bare", input_model=Note, decision_model=Verdict)
NOTE = {"text": "the build is broken", "author": "ana"}


def chat_tokenizer():
    tokenizer = tiny_tokenizer()
    tokenizer.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    return tokenizer


def chat_decider(rendering: str, chat_template: str | None = CHATML) -> Decider:
    tokenizer = chat_tokenizer()
    model = random_model(tiny_config(vocab_size=410, max_position_embeddings=128))
    config = {"bos_token": "<bos>", **({"chat_template": chat_template} if chat_template else {})}
    tasks = {"tests.test_prompt:DESCRIBED": DESCRIBED, "tests.test_prompt:BARE": BARE}
    return Decider.new(model, tokenizer, tasks, 96, tokenizer_config=config, rendering=rendering)


@pytest.mark.parametrize("task", [DESCRIBED, BARE])
def test_chat_framing_is_transformers_apply_chat_template(task: Task):
    fields = render_input(task, NOTE)
    reference = PreTrainedTokenizerFast(tokenizer_object=chat_tokenizer(), chat_template=CHATML)
    messages = ([{"role": "system", "content": task.description}] if task.description else []) + [
        {"role": "user", "content": fields}
    ]
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert framed("chat", task, fields, CHATML) == (expected, False)
    assert expected.endswith("<|im_start|>assistant\n") and fields in expected


def test_fields_and_described_framings():
    fields = render_input(DESCRIBED, NOTE)
    assert framed("fields", DESCRIBED, fields, None) == (fields, True)
    assert framed("described", DESCRIBED, fields, None) == ("Is the note urgent?\n\n" + fields, True)
    assert framed("described", BARE, fields, None) == (fields, True), "no description: nothing to add"


def test_decider_encodes_each_framing():
    fields = render_input(DESCRIBED, NOTE)
    tokenizer = chat_tokenizer()
    bos = tokenizer.token_to_id("<bos>")
    plain = chat_decider("fields").encode(DESCRIBED, NOTE).token_ids
    assert plain == [bos, *tokenizer.encode(fields).ids]
    described = chat_decider("described").encode(DESCRIBED, NOTE).token_ids
    assert described == [bos, *tokenizer.encode("Is the note urgent?\n\n" + fields).ids]
    chat = chat_decider("chat").encode(DESCRIBED, NOTE).token_ids
    start, end = tokenizer.token_to_id("<|im_start|>"), tokenizer.token_to_id("<|im_end|>")
    assert chat[0] == start and bos not in chat, "the template writes the first token; no bos is added"
    assert chat.count(start) == 3 and chat.count(end) == 2, "system, user, then the assistant's prompt"
    assert tokenizer.decode(chat, skip_special_tokens=False).endswith("<|im_start|>assistant\n")


def test_a_truncated_chat_input_keeps_the_assistant_prompt():
    decider = chat_decider("chat")
    long = {"text": "broken " * 200, "author": "ana"}
    with pytest.raises(JevError, match="over the limit"):
        decider.encode(DESCRIBED, long)
    truncating = Task(name="note", input_model=Note, decision_model=Verdict, description="x", truncate=True)
    kept = decider.encode(truncating, long).token_ids
    suffix = decider.tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n").ids
    assert len(kept) == 96 and kept[-len(suffix):] == suffix


def test_a_folder_keeps_its_framing_and_older_folders_read_as_fields(tmp_path):
    decider = chat_decider("chat")
    decider.save(tmp_path / "chat")
    loaded = Decider.load(tmp_path / "chat")
    assert {name: entry.rendering for name, entry in loaded.manifest.tasks.items()} == {"note": "chat", "bare": "chat"}
    assert loaded.encode(DESCRIBED, NOTE).token_ids == decider.encode(DESCRIBED, NOTE).token_ids
    manifest = tmp_path / "chat" / MANIFEST_FILE
    raw = json.loads(manifest.read_text())
    for entry in raw["tasks"].values():
        del entry["rendering"]
    manifest.write_text(json.dumps(raw))
    assert {entry.rendering for entry in Decider.load(tmp_path / "chat").manifest.tasks.values()} == {"fields"}


def test_unknown_or_unframable_renderings_are_refused(tmp_path):
    with pytest.raises(JevError, match="needs a chat template"):
        chat_decider("chat", chat_template=None)
    with pytest.raises(JevError, match="unknown rendering 'yaml'"):
        chat_decider("yaml")
    chat_decider("fields").save(tmp_path / "folder")
    manifest = tmp_path / "folder" / MANIFEST_FILE
    raw = json.loads(manifest.read_text())
    raw["tasks"]["note"]["rendering"] = "yaml"
    manifest.write_text(json.dumps(raw))
    with pytest.raises((JevError, CheckpointError), match="unknown rendering 'yaml'"):
        Decider.load(tmp_path / "folder")
