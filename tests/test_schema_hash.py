"""The layout, its hash, and how a changed schema is described."""

import hashlib
import json
import os
import subprocess
import sys
from typing import Literal

import pytest
from pydantic import BaseModel, create_model

from jev.schema import SchemaMismatchError, check_layout, compile_decision, describe_changes, layout_hash
from schemas.mail import MailDecision

MAIL_LAYOUT_JSON = (
    '{"fields":['
    '{"kind":"categorical","name":"kind","nullable":false,"values":["easy_ham","hard_ham","spam"]},'
    '{"kind":"bool","name":"mailing_list","nullable":false,"values":[false,true]},'
    '{"kind":"bool","name":"reply","nullable":false,"values":[false,true]},'
    '{"kind":"text","max_tokens":32,"name":"subject","nullable":false,"values":[]}'
    '],"layout_version":1}'
)
MAIL_HASH = "fbe3a40a9f74fe9a3de3d85a11b67f1f2b02b9020ba19a052eb88f798a708771"


def test_layout_is_the_expected_canonical_json() -> None:
    layout = compile_decision(MailDecision).layout()
    assert json.dumps(layout, sort_keys=True, separators=(",", ":")) == MAIL_LAYOUT_JSON


def test_hash_is_sha256_of_the_canonical_layout() -> None:
    assert compile_decision(MailDecision).hash == hashlib.sha256(MAIL_LAYOUT_JSON.encode()).hexdigest()
    assert compile_decision(MailDecision).hash == MAIL_HASH


def test_hash_is_the_same_in_another_process_with_another_hash_seed() -> None:
    code = "from jev.schema import compile_decision; from schemas.mail import MailDecision; "
    code += "print(compile_decision(MailDecision).hash)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == MAIL_HASH


def test_hash_of_a_layout_read_back_from_json_is_unchanged() -> None:
    spec = compile_decision(MailDecision)
    assert layout_hash(json.loads(json.dumps(spec.layout()))) == spec.hash


def variant(kind: object, name: str = "kind") -> type[BaseModel]:
    return create_model("MailDecision", **{name: (kind, ...)}, mailing_list=(bool, ...), reply=(bool, ...))


BASE = variant(Literal["easy_ham", "hard_ham", "spam"])


@pytest.mark.parametrize(
    ("changed", "sentence"),
    [
        (variant(Literal["easy_ham", "hard_ham", "spam", "phish"]), "field 'kind' gained values [\"phish\"]"),
        (variant(Literal["easy_ham", "hard_ham", "junk"]), "field 'kind' lost values [\"spam\"]"),
        (
            variant(Literal["spam", "easy_ham", "hard_ham"]),
            'field \'kind\' values were reordered from ["easy_ham", "hard_ham", "spam"]',
        ),
        (variant(bool), "field 'kind' changed kind from categorical to bool"),
        (variant(Literal["easy_ham", "hard_ham", "spam"] | None), "field 'kind' became nullable"),
        (variant(Literal["easy_ham", "hard_ham", "spam"], name="category"), "field 'kind' was removed"),
        (variant(Literal["easy_ham", "hard_ham", "spam"], name="category"), "field 'category' was added"),
        (
            create_model(
                "M",
                reply=(bool, ...),
                kind=(BASE.model_fields["kind"].annotation, ...),
                mailing_list=(bool, ...),
            ),
            "fields were reordered",
        ),
    ],
)
def test_a_changed_schema_changes_the_hash_and_is_described(changed: type[BaseModel], sentence: str) -> None:
    old, new = compile_decision(BASE), compile_decision(changed)
    assert new.hash != old.hash
    changes = describe_changes(old.layout(), new.layout())
    assert any(sentence in change for change in changes), changes


def test_renaming_a_value_is_described_as_one_lost_and_one_gained() -> None:
    old = compile_decision(BASE).layout()
    new = compile_decision(variant(Literal["easy_ham", "hard_ham", "junk"])).layout()
    assert describe_changes(old, new) == [
        "field 'kind' gained values [\"junk\"]",
        "field 'kind' lost values [\"spam\"]",
    ]


def test_identical_layouts_have_no_changes() -> None:
    layout = compile_decision(BASE).layout()
    assert describe_changes(layout, json.loads(json.dumps(layout))) == []


def test_check_layout_passes_the_trained_layout_and_raises_naming_the_change() -> None:
    trained = json.loads(json.dumps(compile_decision(BASE).layout()))
    check_layout(compile_decision(BASE), trained, task="mail")
    with pytest.raises(SchemaMismatchError) as caught:
        check_layout(compile_decision(variant(Literal["easy_ham", "spam"])), trained, task="mail")
    assert caught.value.changes == ["field 'kind' lost values [\"hard_ham\"]"]
    assert "task 'mail'" in str(caught.value)
    assert "hard_ham" in str(caught.value)
