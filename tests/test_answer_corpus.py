"""The drafter's training text from a task's rows: the labelled answers, or the target's own."""

import json
from pathlib import Path

import pytest

from jev import Decider
from jev.cli import main
from jev.schema import render_input
from jev.schema.answer import answer_text
from jev.train.answer_corpus import OwnAnswers
from schemas.examples import TASK
from tests.tiny import random_model, tiny_config, tiny_tokenizer

REFERENCE = "schemas.examples:TASK"
TICKETS = [
    {"subject": "refund", "body": "Win a free cruise now! refund please"},
    {"subject": "login", "body": "I cannot log in to the mobile app since Tuesday."},
    {"subject": "api down", "body": "Every call to the API returns 500."},
    {"subject": "invoice", "body": "The invoice lists the web plan twice."},
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved decider of the example task (a text field, `summary`) and its rows, inputs alone."""
    tmp_path = tmp_path_factory.mktemp("own_answers")
    model = random_model(tiny_config(index_topk=6, vocab_size=400, max_position_embeddings=256))
    Decider.new(model, tiny_tokenizer(), {REFERENCE: TASK}, max_input_tokens=96).save(tmp_path / "model")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"input": ticket}) + "\n" for ticket in TICKETS))
    return tmp_path


def test_own_answers_are_what_the_target_decides_for_each_of_the_first_rows(folder: Path) -> None:
    documents = OwnAnswers(REFERENCE, [folder / "rows.jsonl"], folder / "model", rows=3, weights="float32")()
    decider = Decider.load(folder / "model", tasks=[TASK], check_policies=False, speculative=False)
    expected = []
    for ticket in TICKETS[:3]:  # one decision at a time, where the source decides them as one batch
        value = decider.decide(TASK.decision_model, ticket).value
        expected.append(render_input(TASK, ticket) + answer_text(TASK.spec, TASK.spec.values_of(value)))
    assert documents == expected


@pytest.mark.slow
def test_the_drafter_command_trains_on_the_own_answers_and_records_them(folder: Path) -> None:
    argv = ["train", "drafter", "--target", str(folder / "model"), "--task", REFERENCE, "--own-answers", "4",
            "--corpus", str(folder / "rows.jsonl"), "--out", str(folder / "drafter"), "--steps", "2",
            "--batch-size", "2", "--block-size", "16", "--hidden-size", "64", "--positions", "4",
            "--markov-rank", "16", "--anchors", "4", "--weights", "float32"]
    assert main(argv) == 0
    texts = json.loads((folder / "drafter" / "drafter.json").read_text())["texts"]
    assert texts.startswith(f"{folder / 'model'}'s own answers to the first 4 rows of {REFERENCE}"), texts


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--own-answers", "2"], "name the task with --task"),
        (["--own-answers", "-1", "--task", REFERENCE], "a number of rows, 0 or more"),
    ],
)
def test_own_answers_without_a_task_or_below_zero_is_refused(
    folder: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "drafter", "--target", str(folder / "model"), "--corpus", str(folder / "rows.jsonl"),
            "--out", str(folder / "never"), *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err and not (folder / "never").exists()
