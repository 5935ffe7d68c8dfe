"""A calibrated model: decisions name their calibration, and `/v1/models/calibration` serves its metrics."""

import numpy as np
from litestar.testing import TestClient

from jev.decide.bundle import MANIFEST_FILE
from jev.decide.calibration import fit_calibration
from jev.decide.decider import Decider
from jev.serve.app import create_app
from tests.serving import STRICT, tiny_decider, wait_ready


def test_calibrated_model_reports_its_calibration(tmp_path):
    decider = tiny_decider()
    rng = np.random.default_rng(0)
    raw = {f.name: rng.dirichlet(np.ones(f.n_values), size=200) for f in STRICT.spec.closed_fields}
    labels = {f.name: rng.integers(0, f.n_values, size=200) for f in STRICT.spec.closed_fields}
    decider.manifest.calibrations["strict"] = fit_calibration(STRICT, raw, labels)
    decider.save(tmp_path)
    assert "strict" in (tmp_path / MANIFEST_FILE).read_text()

    with TestClient(create_app(Decider.load(tmp_path))) as client:
        wait_ready(client.get)
        report = client.get("/v1/models/calibration").json()
        assert report["calibrated"] is True and report["model_id"] == client.get("/v1/models").json()["model_id"]
        strict = report["tasks"]["strict"]
        assert strict["calibrated"] is True and strict["calibrator_id"] and strict["calibration"]["method"]
        assert set(strict["metrics"]) == {"team", "escalate"} and "ece" in strict["metrics"]["team"]["after"]
        assert report["tasks"]["ticket"]["calibrated"] is False
        answer = client.post("/v1/decide/strict", json={"input": {"text": "refund"}}).json()
        assert answer["model"]["calibrated"] is True
        assert answer["model"]["calibrator_id"] == strict["calibrator_id"]
        assert answer["outcomes"]["team"]["confidence"] == max(answer["probs"]["team"].values())
