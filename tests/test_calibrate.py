"""`jev calibrate` on a tiny decider: stored calibrators, calibrated decisions and policy outcomes."""

from pathlib import Path

import numpy as np
import pytest
import torch

from jev import Decider
from jev.cli import main
from jev.evaluate.calibrate import calibrate
from jev.schema import FieldPolicy, JevError, Task
from schemas.mail import TASK as MAIL
from schemas.mail import MailDecision, MailInput
from tests.tiny import random_model, tiny_config, tiny_tokenizer

VALID = Path(__file__).parent / "fixtures" / "decide" / "valid.jsonl"
STRICT = Task(
    name="mail", input_model=MailInput, decision_model=MailDecision, truncate=True,
    policies={"kind": FieldPolicy(abstain_below=0.6, conformal_coverage=0.8)},
)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    decider = Decider.new(random_model(tiny_config(index_topk=8, vocab_size=400, max_position_embeddings=128)),
                          tiny_tokenizer(), {"schemas.mail:TASK": MAIL}, max_input_tokens=32)
    torch.manual_seed(0)
    with torch.no_grad():
        for param in decider.decision_model.heads.parameters():
            param.normal_(std=2.0)
    decider.save(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_calibrate_command_stores_calibrators_that_every_decision_uses(model_dir, capsys):
    before = Decider.load(model_dir).decide(MailDecision, {"body": "win a free cruise"})
    assert before.model["calibrated"] is False and before.model["calibration"] is None
    assert main(["calibrate", "--model", str(model_dir), "--task", "mail", "--data", str(VALID)]) == 0
    assert "ECE" in capsys.readouterr().out
    after = Decider.load(model_dir).decide(MailDecision, {"body": "win a free cruise"})
    assert after.model["calibrated"] is True and after.model["calibration"]["method"] == "vector"  # the default
    assert after.probs["kind"] != before.probs["kind"], "calibration must move the probabilities"
    assert sum(after.probs["kind"].values()) == pytest.approx(1.0, abs=1e-6)
    assert main(["calibrate", "--model", str(model_dir), "--task", "mail", "--data", str(VALID),
                 "--method", "temperature"]) == 0
    tempered = Decider.load(model_dir).decide(MailDecision, {"body": "win a free cruise"})
    assert tempered.model["calibration"]["method"] == "temperature"
    assert tempered.value == before.value, "temperature scaling never changes the argmax"


@pytest.mark.slow
def test_policies_abstain_below_threshold_and_return_conformal_sets(model_dir):
    uncalibrated = Decider.load(model_dir, tasks=[STRICT]).decide("mail", {"body": "x"})
    assert uncalibrated.outcomes["kind"].prediction_set is None and uncalibrated.model["calibrated"] is False
    calibrate(model_dir, "mail", VALID)
    with pytest.raises(JevError, match=r"coverage 0\.95"):
        Decider.load(model_dir, tasks=[STRICT])
    calibrate(model_dir, "mail", VALID, tasks=[STRICT])
    decider = Decider.load(model_dir, tasks=[STRICT])
    qhat = decider.calibrations["mail"].conformal["kind"].qhat_
    for body in ["win a free cruise", "meeting moved", "re: patch", "cheap pills now", "lunch"]:
        result = decider.decide("mail", {"body": body})
        outcome, table = result.outcomes["kind"], result.probs["kind"]
        assert outcome.confidence == pytest.approx(max(table.values()))
        assert outcome.abstained == (outcome.confidence < 0.6)
        assert outcome.prediction_set == [v for v, p in table.items() if 1 - p <= qhat]
        assert outcome.coverage == 0.8
        assert result.outcomes["reply"].prediction_set is None and not result.outcomes["reply"].abstained


def test_platt_and_isotonic_apply_to_binary_fields_only(model_dir):
    calibration = calibrate(model_dir, "mail", VALID, method="isotonic", target_precision=0.5)
    assert calibration.calibrators["kind"].name == "temperature"
    assert calibration.calibrators["reply"].name == "isotonic"
    assert set(calibration.thresholds) == {"kind", "mailing_list", "reply"}
    probs = Decider.load(model_dir).decide(MailDecision, {"body": "x"}).probs["reply"]
    assert np.isclose(sum(probs.values()), 1.0)


def test_vector_scaling_applies_to_every_field_and_a_decision_follows_it(model_dir):
    calibration = calibrate(model_dir, "mail", VALID, method="vector")
    assert {calibration.calibrators[name].name for name in ("kind", "mailing_list", "reply")} == {"vector"}
    decider = Decider.load(model_dir)
    result = decider.decide(MailDecision, {"body": "win a free cruise now"})
    table = result.probs["kind"]
    assert np.isclose(sum(table.values()), 1.0)
    assert result.value.kind == max(table, key=table.get)  # the answer is the calibrated argmax
