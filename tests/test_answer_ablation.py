"""The ablation benchmark's paired interval, against the normal approximation it should agree with."""

import numpy as np

from benchmarks.answer_ablation import FieldScores, paired_interval, summarise


def test_paired_interval_matches_the_normal_approximation() -> None:
    rng = np.random.default_rng(1)
    baseline = rng.random(2000) < 0.9
    correct = np.where(rng.random(2000) < 0.1, ~baseline, baseline)
    diff = correct.astype(float) - baseline.astype(float)
    half = 1.96 * diff.std() / np.sqrt(len(diff))
    low, high = paired_interval(correct, baseline)
    assert abs(low - (diff.mean() - half)) < 0.003
    assert abs(high - (diff.mean() + half)) < 0.003


def test_identical_arms_differ_by_nothing() -> None:
    rows = np.array([True, False, True, True])
    scores = {"mail.kind": FieldScores(rows, 0.5)}
    results, table = summarise({"base": [scores, scores], "same": [scores]})
    assert results["same"]["mail.kind"]["difference"] == {"points": 0.0, "ci95": [0.0, 0.0]}
    assert results["base"]["mail.kind"]["seeds"] == [75.0, 75.0]
    assert "+0.0 [+0.0, +0.0]" in table


def test_answer_loss_is_the_mean_over_every_answer_token_of_the_split(tmp_path) -> None:
    """Batched and padded, against one row at a time in float64 (top-k wide enough to be dense)."""
    import torch

    from benchmarks.answer_ablation import ANSWER_BATCH, answer_loss
    from jev.engine.answer import AnswerTokens
    from jev.engine.decider import Decider
    from jev.train.examples import read_examples
    from jev.train.tokenizer import EOS_ID
    from schemas.mail import TASK as MAIL
    from tests.conftest import random_model, tiny_config, tiny_tokenizer, with_subjects
    from tests.test_train_decide import FIXTURES

    model = random_model(tiny_config(index_topk=4096, vocab_size=400, max_position_embeddings=128))
    with torch.no_grad():
        model.lm_head.weight.mul_(20)  # peaked predictions, so rows' losses differ and weighting shows
    decider = Decider.new(model, tiny_tokenizer(), {"schemas.mail:TASK": MAIL}, 32)
    path = with_subjects(FIXTURES / "train.jsonl", tmp_path / "rows.jsonl")  # answers of many lengths
    answer = AnswerTokens(MAIL.spec, decider.tokenizer, EOS_ID)
    examples, _ = read_examples(path, MAIL, lambda t, d: decider.encode(t, d).token_ids, answer=answer.encode)
    assert len(examples) > ANSWER_BATCH and len({len(e.answer_ids) for e in examples}) > 1
    total, tokens = 0.0, 0
    with torch.no_grad():
        for e in examples:
            logprobs = torch.log_softmax(model(torch.tensor([e.token_ids + e.answer_ids]))[0].double(), -1)
            for j, token in enumerate(e.answer_ids):
                total -= float(logprobs[len(e.token_ids) + j - 1, token])
            tokens += len(e.answer_ids)
    assert abs(answer_loss(decider, MAIL, path) - total / tokens) < 1e-4
