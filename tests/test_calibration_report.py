"""The report: files exist, metrics.json holds the numbers the metrics compute, the page names
every field."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jev.calibration import METRICS, TemperatureScaling, bootstrap_ci, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _field(n: int, values: list[str], seed: int) -> dict:
    """An over-confident head (softmax(2.5 z) against labels from softmax(z)) and its calibration."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, size=(n, len(values)))
    u = rng.random(n)[:, None]
    y = np.minimum((_softmax(z).cumsum(axis=1) < u).sum(axis=1), len(values) - 1)
    raw = _softmax(2.5 * z)
    return {"raw": raw, "calibrated": TemperatureScaling().fit(raw, y).predict_proba(raw), "y": y, "values": values}


@pytest.fixture(scope="module")
def fields() -> dict[str, dict]:
    return {
        "kind": _field(400, ["easy_ham", "hard_ham", "spam"], seed=0),
        "mailing list <odd/name>": _field(300, ["False", "True"], seed=1),
    }


@pytest.fixture(scope="module")
def report_dir(fields: dict[str, dict], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert write_report(fields, out, n_boot=25, seed=3) == out / "report.html"
    return out


@pytest.mark.slow
def test_report_writes_files_whose_numbers_equal_the_metrics(fields: dict[str, dict], report_dir: Path) -> None:
    tmp_path = report_dir
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert report["n_boot"] == 25 and report["n_bins"] == 15
    assert list(report["fields"]) == list(fields)
    for name, field in fields.items():
        entry = report["fields"][name]
        assert entry["values"] == field["values"] and entry["n"] == len(field["y"])
        for stage in ("raw", "calibrated"):
            for metric, fn in METRICS.items():
                got = entry[stage]["metrics"][metric]
                expected = bootstrap_ci(fn, field[stage], field["y"], n_boot=25, seed=3)._asdict()
                assert got == pytest.approx(expected, rel=1e-12, abs=1e-15), (name, stage, metric)
        assert entry["calibrated"]["metrics"]["ece"]["value"] < entry["raw"]["metrics"]["ece"]["value"]
        support = [v["support"] for v in entry["per_value"]]
        assert support == np.bincount(field["y"], minlength=len(field["values"])).tolist()
        for file in entry["figures"].values():
            assert (tmp_path / file).read_bytes()[:8] == PNG_MAGIC
            assert (tmp_path / file).stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        f"{stem}_{kind}.png"
        for stem in ("kind", "mailing_list__odd_name_")
        for kind in ("reliability", "confidence", "risk_coverage")
    )


def test_report_page_names_every_field_and_shows_its_numbers(report_dir: Path) -> None:
    text = (report_dir / "report.html").read_text()
    report = json.loads((report_dir / "metrics.json").read_text())
    for name, entry in report["fields"].items():
        assert f"<h2>{html.escape(name)}</h2>" in text
        assert f"{100 * entry['calibrated']['metrics']['ece']['value']:.2f}%" in text
        for file in entry["figures"].values():
            assert f"src='{file}'" not in text, "the page embeds its images instead of linking the files"
    assert text.count("<img src='data:image/png;base64,") == 3 * len(report["fields"])
    assert "<odd/name>" not in text
    for value in ("easy_ham", "hard_ham", "spam"):
        assert f"<td>{value}</td>" in text


def test_report_refuses_a_field_whose_shapes_disagree(fields: dict[str, dict], tmp_path: Path) -> None:
    bad = dict(fields["kind"], values=["a", "b"])
    with pytest.raises(
        ValueError, match=r"field 'kind': raw \(400, 3\) and calibrated \(400, 3\) must both be \[n, 2\]"
    ):
        write_report({"kind": bad}, tmp_path)
    with pytest.raises(ValueError, match=r"field 'kind': missing keys \['y'\]"):
        write_report({"kind": {k: v for k, v in fields["kind"].items() if k != "y"}}, tmp_path)


def test_calibration_package_imports_no_torch() -> None:
    """The folder rule: calibration must load where torch is absent (jev/__init__ is bypassed here)."""
    code = (
        "import importlib.abc, sys, types\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('torch imported')\n"
        "sys.meta_path.insert(0, Block())\n"
        "jev = types.ModuleType('jev'); jev.__path__ = [sys.argv[1]]; sys.modules['jev'] = jev\n"
        "import jev.calibration\n"
    )
    package_dir = Path(__file__).resolve().parents[1] / "jev"
    result = subprocess.run([sys.executable, "-c", code, str(package_dir)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
