"""`jev report` on a tiny calibrated decider: files, header, numbers equal to direct metrics, embedded images."""

import hashlib
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from jev import Decider
from jev.calibration import METRICS, bootstrap_ci
from jev.cli import build_parser
from jev.data.examples import read_examples
from jev.decide.calibration import fit_calibration, label_arrays
from jev.evaluate.calibrate import raw_probabilities
from jev.evaluate.report import ReportSettings, build_report
from jev.schema import JevError
from schemas.mail import TASK as MAIL
from tests.tiny import random_model, tiny_config, tiny_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "decide"
TRAIN, VALID = FIXTURES / "train.jsonl", FIXTURES / "valid.jsonl"
N_BOOT = 20
FIELDS = ("kind", "mailing_list", "reply")
KINDS = ("reliability", "confidence", "risk_coverage")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random decider whose calibration was fitted on the train fixture, so VALID is held out."""
    decider = Decider.new(
        random_model(tiny_config(index_topk=8, vocab_size=400, max_position_embeddings=128)),
        tiny_tokenizer(),
        {"schemas.mail:TASK": MAIL},
        max_input_tokens=32,
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for param in decider.decision_model.heads.parameters():
            param.normal_(std=2.0)
    examples, _ = read_examples(TRAIN, MAIL, lambda t, d: decider.encode(t, d).token_ids)
    raw = raw_probabilities(decider, MAIL, examples)
    calibration = fit_calibration(MAIL, raw, label_arrays(MAIL.spec.closed_fields, [e.label for e in examples]))
    calibration.data = {"sha256": hashlib.sha256(TRAIN.read_bytes()).hexdigest()}
    decider.manifest.calibrations["mail"] = calibration
    folder = tmp_path_factory.mktemp("model")
    decider.save(folder)
    return folder


@pytest.fixture(scope="module")
def report_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    settings = ReportSettings(model=model_dir, task="mail", data=VALID, out=out, n_boot=N_BOOT, seed=7)
    assert build_report(settings) == out / "report.html"
    return out


@pytest.mark.slow
def test_metrics_json_names_model_data_and_calibration(model_dir: Path, report_dir: Path) -> None:
    report = json.loads((report_dir / "metrics.json").read_text())
    decider = Decider.load(model_dir)
    assert report["model"] == decider.model_id and report["task"] == "mail"
    assert report["schema_hash"] == MAIL.spec.hash
    data = VALID.read_bytes()
    assert report["data"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert report["data"]["bytes"] == len(data) and report["data"]["rows"] == 24
    assert report["calibration"]["method"] == "vector"  # fit_calibration's default
    assert report["calibration"]["data_sha256"] == hashlib.sha256(TRAIN.read_bytes()).hexdigest()
    assert list(report["fields"]) == list(FIELDS)
    assert report["baselines"] == [] and all(entry["baselines"] == [] for entry in report["fields"].values())


def test_metrics_json_numbers_equal_the_metrics_computed_directly(model_dir: Path, report_dir: Path) -> None:
    report = json.loads((report_dir / "metrics.json").read_text())
    decider = Decider.load(model_dir)
    examples, _ = read_examples(VALID, MAIL, lambda t, d: decider.encode(t, d).token_ids)
    raw = raw_probabilities(decider, MAIL, examples)
    calibrated = decider.calibrated(MAIL, raw)
    for name in FIELDS:
        entry, y = report["fields"][name], np.array([e.label[name] for e in examples])
        for metric, fn in METRICS.items():
            after = bootstrap_ci(fn, calibrated[name], y, n_boot=N_BOOT, seed=7)
            before = bootstrap_ci(fn, raw[name], y, n_boot=N_BOOT, seed=7)
            assert entry[metric] == pytest.approx(after.value, rel=1e-12, abs=1e-15), (name, metric)
            assert entry[f"{metric}_ci"] == pytest.approx([after.low, after.high], rel=1e-12, abs=1e-15)
            assert entry[f"{metric}_uncalibrated"] == pytest.approx(before.value, rel=1e-12, abs=1e-15)
        policy = decider.calibrations["mail"].conformal[name]
        sets = 1.0 - calibrated[name] <= policy.qhat_
        conformal = entry["conformal"]
        declared = MAIL.policies.get(name)
        assert conformal["coverage_promised"] == policy.coverage == (declared.conformal_coverage if declared else 0.9)
        assert conformal["coverage_empirical"] == pytest.approx(np.mean(sets[np.arange(len(y)), y]))
        assert conformal["coverage_ci"][0] <= conformal["coverage_empirical"] <= conformal["coverage_ci"][1]
        assert conformal["mean_set_size"] == pytest.approx(sets.sum(axis=1).mean())


def test_page_names_every_field_and_embeds_every_image(report_dir: Path) -> None:
    text = (report_dir / "report.html").read_text()
    report = json.loads((report_dir / "metrics.json").read_text())
    sources = re.findall(r"<img src='([^']*)'", text)
    assert len(sources) == len(FIELDS) * len(KINDS)
    assert all(src.startswith("data:image/png;base64,") for src in sources)
    assert ".png'" not in text and 'src="' not in text
    for name, entry in report["fields"].items():
        assert f"<h2>{html.escape(name)}</h2>" in text
        for kind, file in entry["figures"].items():
            assert (report_dir / file).is_file() and kind in file
    for needle in (report["model"], report["schema_hash"], report["data"]["sha256"], "conformal prediction sets"):
        assert needle in text
    assert "baselines on the same rows" not in text


@pytest.mark.slow
def test_command_with_baseline_writes_it_beside_jev(model_dir: Path, tmp_path: Path) -> None:
    parser = build_parser()
    argv = ["report", "--model", str(model_dir), "--task", "mail", "--data", str(VALID), "--out", str(tmp_path)]
    args = parser.parse_args([*argv, "--baseline-train", str(TRAIN), "--baseline-calib", str(VALID), "--n-boot", "5"])
    assert args.func(args) == 0
    report = json.loads((tmp_path / "metrics.json").read_text())
    [header] = report["baselines"]
    assert header["train"]["sha256"] == hashlib.sha256(TRAIN.read_bytes()).hexdigest()
    for name in FIELDS:
        [baseline] = report["fields"][name]["baselines"]
        assert baseline["name"] == "TF-IDF + LogisticRegression (C=10)"
        assert set(baseline["raw"]) == {"accuracy", "nll", "brier", "ece"}
        assert 0.0 <= baseline["raw"]["accuracy"]["value"] <= 1.0
    assert report["fields"]["kind"]["baselines"][0]["calibration_method"] == "temperature"
    assert report["fields"]["reply"]["baselines"][0]["calibrated"] is not None
    # The fixtures never label a mail as from a mailing list: nothing to calibrate, and the page says why.
    assert report["fields"]["mailing_list"]["baselines"][0]["calibrated"] is None
    text = (tmp_path / "report.html").read_text()
    assert text.count("baselines on the same rows") == len(FIELDS) and "Calibrated baseline 1 not fitted" in text
    with pytest.raises(JevError, match="both --baseline-train and --baseline-calib"):
        build_report(ReportSettings(model=model_dir, task="mail", data=VALID, out=tmp_path, baseline_train=TRAIN))
