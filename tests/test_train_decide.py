"""Decision fine-tuning on a tiny fixture: the loop learns, the output folder serves, bad rows are named."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from jev import Decider
from jev.data.examples import InvalidRowsError
from jev.model import Model
from jev.schema import JevError
from jev.tokenizer import EOS_ID
from jev.train.decide import NEW_TASK_LAYERS, DecideSettings, TaskData, default_frozen_layers, train_decisions
from schemas.mail import TASK as MAIL
from schemas.mail import MailDecision
from tests.serving import tiny_decider
from tests.tiny import random_model, tiny_config, tiny_tokenizer, with_subjects

FIXTURES = Path(__file__).parent / "fixtures" / "decide"
OTHER = dataclasses.replace(MAIL, name="other")  # a second task, for per-task early stopping


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("base")
    model = random_model(tiny_config(index_topk=8, vocab_size=400, max_position_embeddings=128))
    for param in model.parameters():
        param.data.mul_(0.1)
    model.save_pretrained(folder)
    tiny_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def settings(base: Path, out: Path, train: Path = FIXTURES / "train.jsonl", **overrides) -> DecideSettings:
    data = TaskData("schemas.mail:TASK", MAIL, train, FIXTURES / "valid.jsonl")
    values = dict(epochs=8, batch_size=8, lr=1e-2, warmup_steps=4, max_input_tokens=32, seed=0, autocast=False)
    return DecideSettings(tasks=[data], base=base, out=out, **{**values, **overrides})


@pytest.mark.slow
def test_fine_tuning_learns_the_fixture_and_the_result_serves(base, tmp_path):
    out = train_decisions(settings(base, tmp_path / "out"))
    record = json.loads((out / "jev.json").read_text())["training"]
    first, last = record["epochs"][0]["mail"], record["epochs"][-1]["mail"]
    assert last["loss"] < 0.8 * first["loss"]
    majority = 13 / 24  # the validation fixture's most common kind
    assert max(e["mail"]["accuracy.kind"] for e in record["epochs"]) > majority + 0.15
    decider = Decider.load(out)
    result = decider.decide(MailDecision, {"body": "win a free cruise now"})
    assert isinstance(result.value, MailDecision) and result.model["model_id"] != "unsaved"


def test_same_seed_gives_the_same_model(base, tmp_path):
    one = train_decisions(settings(base, tmp_path / "one", epochs=1))
    two = train_decisions(settings(base, tmp_path / "two", epochs=1))
    assert (one / "heads.safetensors").read_bytes() == (two / "heads.safetensors").read_bytes()
    assert (one / "model.safetensors").read_bytes() == (two / "model.safetensors").read_bytes()


def test_invalid_rows_are_reported_with_line_numbers(base, tmp_path):
    bad = tmp_path / "bad.jsonl"
    rows = (FIXTURES / "train.jsonl").read_text().splitlines()
    rows[2] = rows[2].replace('"spam"', '"phishing"').replace('"easy_ham"', '"phishing"')
    rows[4] = "{not json"
    rows[6] = json.dumps({"input": {"text": "wrong key"}, "label": json.loads(rows[6])["label"]})
    bad.write_text("\n".join(rows) + "\n")
    with pytest.raises(InvalidRowsError) as error:
        train_decisions(settings(base, tmp_path / "out", train=bad, epochs=1))
    message = str(error.value)
    assert "bad.jsonl:3: kind" in message and "bad.jsonl:5: not JSON" in message and "bad.jsonl:7: body" in message
    out = train_decisions(settings(base, tmp_path / "out", train=bad, epochs=1, skip_invalid=True))
    assert json.loads((out / "jev.json").read_text())["training"]["skipped_rows"] == {"mail": 3}


@pytest.mark.slow
def test_two_ranks_fine_tune_the_same_weights(base, tmp_path):
    """DDP with two gloo processes: each rank trains on half of every batch and both end identical."""
    worker = Path(__file__).parent / "fixtures" / "train" / "ddp_decide_worker.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(worker),
               str(base), str(tmp_path), str(FIXTURES / "train.jsonl"), str(FIXTURES / "valid.jsonl")]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rank0, rank1 = (load_file(tmp_path / f"rank{r}.safetensors") for r in (0, 1))
    start = Decider.new(Model.from_pretrained(base), tiny_tokenizer(), {"schemas.mail:TASK": MAIL}, 32)
    assert any(not torch.equal(rank0[n], t) for n, t in start.decision_model.state_dict().items() if "heads" not in n)
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name


@pytest.mark.slow
def test_answer_objective_learns_the_json_and_continues_a_deciders_heads(base, tmp_path):
    from jev.data.examples import read_examples
    from jev.generate.answer import AnswerTokens

    train = with_subjects(FIXTURES / "train.jsonl", tmp_path / "train.jsonl")
    heads = train_decisions(settings(base, tmp_path / "heads", epochs=1))
    run = settings(heads, tmp_path / "answer", train=train, epochs=6, answer_weight=1.0)
    run.tasks[0].valid = with_subjects(FIXTURES / "valid.jsonl", tmp_path / "valid.jsonl")
    out = train_decisions(run)
    record = json.loads((out / "jev.json").read_text())["training"]
    losses = [epoch["mail"]["answer_loss"] for epoch in record["epochs"]]
    assert losses[-1] < 0.7 * losses[0]
    assert record["settings"]["answer_weight"] == 1.0 and record["base_training"]["steps"] > 0

    tokenizer = tiny_tokenizer()
    answer = AnswerTokens(MAIL.spec, tokenizer, EOS_ID)
    examples, _ = read_examples(train, MAIL, lambda t, d: [1], answer=answer.encode)
    first = json.loads(train.read_text().splitlines()[0])
    written = tokenizer.decode(examples[0].answer_ids)
    assert json.loads(written) == {**first["label"], "subject": first["subject"]}


def test_the_indexers_learn_from_the_decision_pass_only(base):
    """The answer pass adds its language-modelling loss and nothing to the indexers' KL loss, whose
    top-k selection the heads are served with."""
    decider = Decider.new(Model.from_pretrained(base), tiny_tokenizer(), {"schemas.mail:TASK": MAIL}, 32)
    network = decider.decision_model.train()
    ids, answers = [[5, 6, 7, 8, 9, 10], [11, 12, 13]], [[20, 21, 22], [23, 24]]
    plain = network("mail", ids, training=True)
    both = network("mail", ids, training=True, answers=answers)
    assert torch.equal(plain.indexer_loss, both.indexer_loss)
    assert both.answer_loss > 0


@pytest.mark.slow
@pytest.mark.parametrize(("run_weight", "task_weight"), [(1.0, 0.0), (0.0, 1.0)])
def test_a_task_may_set_its_own_answer_weight(base, tmp_path, run_weight, task_weight):
    run = settings(base, tmp_path / "out", train=with_subjects(FIXTURES / "train.jsonl", tmp_path / "train.jsonl"),
                   epochs=1, answer_weight=run_weight)
    run.tasks[0].valid = with_subjects(FIXTURES / "valid.jsonl", tmp_path / "valid.jsonl")
    run.tasks[0].answer_weight = task_weight
    record = json.loads((train_decisions(run) / "jev.json").read_text())["training"]
    assert record["settings"]["tasks"]["mail"]["answer_weight"] == task_weight
    assert ("answer_loss" in record["epochs"][0]["mail"]) == (task_weight > 0)


@pytest.mark.slow
def test_answer_frozen_layers_reach_the_answer_pass_and_are_recorded(base, tmp_path, monkeypatch):
    from jev.decide.decision import DecisionModel

    seen = []
    answer_loss = DecisionModel.answer_loss

    def spy(self, token_ids, answers, frozen_layers=0, lower_states=None):
        seen.append(frozen_layers)
        return answer_loss(self, token_ids, answers, frozen_layers, lower_states)

    monkeypatch.setattr(DecisionModel, "answer_loss", spy)
    run = settings(base, tmp_path / "out", epochs=1, answer_weight=1.0, answer_frozen_layers=1)
    record = json.loads((train_decisions(run) / "jev.json").read_text())["training"]
    assert record["settings"]["answer_frozen_layers"] == 1
    assert 1 in seen  # training passes; validation scores the answer loss without gradients


def test_more_answer_frozen_layers_than_the_base_has_are_refused(base, tmp_path, capsys):
    from jev.cli import main

    layers = Model.from_pretrained(base).config.num_hidden_layers
    with pytest.raises(JevError, match=rf"--answer-frozen-layers must be 0\.\.{layers}"):
        train_decisions(settings(base, tmp_path / "out", epochs=1, answer_weight=1.0, answer_frozen_layers=layers + 1))
    train = str(FIXTURES / "train.jsonl")
    code = main(["train", "decide", "--task", "schemas.mail:TASK", "--data", train, "--valid", train,
                 "--base", str(base), "--out", str(tmp_path / "cli"), "--answer-frozen-layers", "-1"])
    assert code != 0 and f"--answer-frozen-layers must be 0..{layers}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("entry", "message"),
    [("mail", "W a number"), ("mail=x", "W a number"), ("=0.1", "a task name"), ("mail=-1", "W >= 0"),
     ("chat=0.1", "does not train: ['chat']")],
)
def test_task_answer_weights_that_cannot_apply_are_refused(tmp_path, capsys, entry, message):
    from jev.cli import main

    train = str(FIXTURES / "train.jsonl")
    code = main(["train", "decide", "--task", "schemas.mail:TASK", "--data", train, "--valid", train,
                 "--out", str(tmp_path / "out"), "--task-answer-weight", entry])
    assert code != 0 and message in capsys.readouterr().err


@pytest.mark.slow
def test_frozen_layers_keep_the_base_below_the_query_layer_and_the_folder_serves_it(base, tmp_path):
    out = train_decisions(settings(base, tmp_path / "out", epochs=2, frozen_layers=1, answer_weight=0.3))
    before, after = load_file(base / "model.safetensors"), load_file(out / "model.safetensors")
    kept = [name for name in before if ".layers.0." in name or "embed_tokens" in name]
    assert kept and all(torch.equal(before[name], after[name]) for name in kept)
    upper = [name for name in before if ".layers.1." in name and name.endswith("mlp.up_proj.weight")]
    assert upper and not torch.equal(before[upper[0]], after[upper[0]])
    manifest = json.loads((out / "jev.json").read_text())
    assert manifest["query_layer"] == 1
    decider = Decider.load(out)
    assert decider.decision_model.query_layer == 1
    body = {"body": "win a free cruise now"}
    assert decider.decide(MailDecision, body).value.subject is not None
    continued = train_decisions(settings(out, tmp_path / "again", epochs=1))
    assert json.loads((continued / "jev.json").read_text())["query_layer"] == 1  # the base decider's


def test_frozen_layers_outside_the_base_are_refused(base, tmp_path):
    layers = Model.from_pretrained(base).config.num_hidden_layers
    with pytest.raises(JevError, match=rf"--frozen-layers must be 0\.\.{layers - 1}"):
        train_decisions(settings(base, tmp_path / "out", epochs=1, frozen_layers=layers))


@pytest.mark.slow
def test_a_task_stops_training_once_its_validation_loss_stops_improving(base, tmp_path, monkeypatch):
    import jev.train.decide as decide

    first = TaskData("schemas.mail:TASK", MAIL, FIXTURES / "train.jsonl", FIXTURES / "valid.jsonl")
    other = dataclasses.replace(first, reference="tests.test_train_decide:OTHER", task=OTHER)
    losses = {"mail": iter([1.0, 1.2, 0.5, 0.4]), "other": iter([1.0, 0.9, 0.8, 0.7])}
    evaluate = decide.evaluate

    def scripted(model, task, examples, batch_size):
        return {**evaluate(model, task, examples, batch_size), "loss": next(losses[task.name])}

    monkeypatch.setattr(decide, "evaluate", scripted)
    run = dataclasses.replace(settings(base, tmp_path / "out", epochs=4), tasks=[first, other])
    history = json.loads((train_decisions(run) / "jev.json").read_text())["training"]["epochs"]
    assert [epoch["trained"] for epoch in history] == [["mail", "other"], ["mail", "other"], ["other"], ["other"]]


def test_frozen_mlps_leave_every_mlp_as_the_base_has_it(base, tmp_path):
    out = train_decisions(settings(base, tmp_path / "out", epochs=1, frozen_layers=1, frozen_mlps=True))
    before, after = load_file(base / "model.safetensors"), load_file(out / "model.safetensors")
    mlps = [name for name in before if ".mlp." in name]
    assert mlps and all(torch.equal(before[name], after[name]) for name in mlps)
    attention = [name for name in before if ".layers.1.self_attn." in name]
    assert any(not torch.equal(before[name], after[name]) for name in attention)


@pytest.mark.slow
def test_bfloat16_autocast_trains_a_folder_that_serves(base, tmp_path):
    out = train_decisions(settings(base, tmp_path / "out", epochs=1, frozen_layers=1, autocast=True))
    record = json.loads((out / "jev.json").read_text())["training"]
    assert record["settings"]["autocast"] is True and record["epochs"][0]["mail"]["loss"] > 0
    assert isinstance(Decider.load(out).decide(MailDecision, {"body": "win a free cruise now"}).value, MailDecision)


def test_frozen_layers_default_to_the_base_query_layer_for_its_tasks_and_lower_for_a_new_one(base, tmp_path):
    folder = tmp_path / "decider"
    tiny_decider().save(folder)
    manifest = json.loads((folder / "jev.json").read_text())
    own = sorted(manifest["tasks"])
    manifest["query_layer"] = 5
    (folder / "jev.json").write_text(json.dumps(manifest))
    assert default_frozen_layers(folder, own) == 5  # the base's tasks: their heads continue at its layer
    assert default_frozen_layers(folder, [*own, "sotu"]) == 5 - NEW_TASK_LAYERS
    manifest["query_layer"] = 1
    (folder / "jev.json").write_text(json.dumps(manifest))
    assert default_frozen_layers(folder, ["sotu"]) == 0
    assert default_frozen_layers(base, ["sotu"]) == 0  # a plain backbone
