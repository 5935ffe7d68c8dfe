"""The calibration report: `report.html`, per-field PNGs and `metrics.json` with the same numbers.

The HTML is for a person deciding whether a field's probabilities can be trusted; the JSON is for
the API and for tests, and every number in the page is read from it, so the two cannot disagree.
"""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from jev.calibration._validation import check_distribution, check_labels
from jev.calibration.metrics import N_BINS, field_report
from jev.calibration.plots import confidence_histogram, reliability_diagram, risk_coverage_plot

# (label, shown as percent, higher is better)
_METRIC_LABELS: dict[str, tuple[str, bool, bool]] = {
    "accuracy": ("accuracy", True, True),
    "macro_f1": ("macro-F1", True, True),
    "nll": ("NLL (log-loss)", False, False),
    "brier": ("Brier", False, False),
    "ece": (f"ECE, {N_BINS} equal-width bins", True, False),
    "ece_equal_mass": (f"ECE, {N_BINS} equal-mass bins", True, False),
    "mce": ("MCE", True, False),
    "classwise_ece": ("classwise ECE", True, False),
}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0 1.6em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f2f2f2; }
.better { color: #0a6b2a; } .worse { color: #a11; }
.ci { color: #777; font-size: 0.85em; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.3em 0; }
section { border-top: 2px solid #999; margin-top: 2em; }
"""


def _checked_field(name: str, field: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    missing = {"raw", "calibrated", "y", "values"} - field.keys()
    if missing:
        raise ValueError(f"field {name!r}: missing keys {sorted(missing)}; need raw, calibrated, y, values")
    raw, calibrated = check_distribution(field["raw"]), check_distribution(field["calibrated"])
    values = [str(v) for v in field["values"]]
    if raw.shape != calibrated.shape or raw.shape[1] != len(values):
        raise ValueError(
            f"field {name!r}: raw {raw.shape} and calibrated {calibrated.shape} must both be "
            f"[n, {len(values)}] (one column per value name)"
        )
    return raw, calibrated, check_labels(field["y"], raw.shape[0], raw.shape[1]), values


def _file_stem(name: str, used: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "field"
    if stem in used:
        raise ValueError(f"field {name!r}: its file name {stem!r} clashes with another field's")
    used.add(stem)
    return stem


def _per_value(raw: np.ndarray, calibrated: np.ndarray, y: np.ndarray, values: list[str]) -> list[dict]:
    """Observed frequency of each value next to its mean predicted probability, before and after."""
    counts = np.bincount(y, minlength=len(values))
    return [
        {
            "value": value,
            "support": int(counts[k]),
            "frequency": float(counts[k] / y.shape[0]),
            "mean_prob_raw": float(raw[:, k].mean()),
            "mean_prob_calibrated": float(calibrated[:, k].mean()),
        }
        for k, value in enumerate(values)
    ]


def _field_entry(
    name: str, field: dict[str, Any], out_dir: Path, stem: str, n_boot: int, alpha: float, seed: int
) -> dict[str, Any]:
    raw, calibrated, y, values = _checked_field(name, field)
    figures = {
        "reliability": reliability_diagram(raw, calibrated, y, name, out_dir / f"{stem}_reliability.png"),
        "confidence": confidence_histogram(raw, calibrated, y, name, out_dir / f"{stem}_confidence.png"),
        "risk_coverage": risk_coverage_plot(raw, calibrated, y, name, out_dir / f"{stem}_risk_coverage.png"),
    }
    return {
        "values": values,
        "n": int(y.shape[0]),
        "raw": field_report(raw, y, n_boot=n_boot, alpha=alpha, seed=seed),
        "calibrated": field_report(calibrated, y, n_boot=n_boot, alpha=alpha, seed=seed),
        "per_value": _per_value(raw, calibrated, y, values),
        "figures": {kind: path.name for kind, path in figures.items()},
    }


def write_report(
    fields: dict[str, dict[str, Any]], out_dir: Path, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> Path:
    """Write report.html, metrics.json and three PNGs per field into `out_dir`; return the HTML path.

    Each field is `{"raw": [n, K], "calibrated": [n, K], "y": [n], "values": K names}`. Multi-label
    fields are reported one label at a time, as two-valued fields.
    """
    if not fields:
        raise ValueError("no fields to report")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "n_bins": N_BINS,
        "n_boot": n_boot,
        "alpha": alpha,
        "seed": seed,
        "fields": {
            name: _field_entry(name, field, out_dir, _file_stem(name, used), n_boot, alpha, seed)
            for name, field in fields.items()
        },
    }
    (out_dir / "metrics.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    path = out_dir / "report.html"
    path.write_text(render_html(report), encoding="utf-8")
    return path


def _number(value: float, percent: bool) -> str:
    return f"{100 * value:.2f}%" if percent else f"{value:.4f}"


def _cell(entry: dict[str, float], percent: bool) -> str:
    low, high = _number(entry["low"], percent), _number(entry["high"], percent)
    return f"{_number(entry['value'], percent)} <span class='ci'>[{low}, {high}]</span>"


def _change(before: float, after: float, percent: bool, higher_is_better: bool) -> str:
    delta = after - before
    if delta == 0:
        return "0"
    improved = (delta > 0) == higher_is_better
    sign = "+" if delta > 0 else "-"
    return f"<span class='{'better' if improved else 'worse'}'>{sign}{_number(abs(delta), percent)}</span>"


def _metrics_table(entry: dict[str, Any], alpha: float) -> str:
    level = round(100 * (1 - alpha))
    rows = []
    for key, (label, percent, higher_is_better) in _METRIC_LABELS.items():
        before, after = entry["raw"]["metrics"][key], entry["calibrated"]["metrics"][key]
        rows.append(
            f"<tr><td>{label}</td><td>{_cell(before, percent)}</td><td>{_cell(after, percent)}</td>"
            f"<td>{_change(before['value'], after['value'], percent, higher_is_better)}</td></tr>"
        )
    header = f"<tr><th>metric</th><th>before [{level}% CI]</th><th>after [{level}% CI]</th><th>change</th></tr>"
    return f"<table>{header}{''.join(rows)}</table>"


def _per_value_table(entry: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(v['value'])}</td><td>{v['support']}</td><td>{100 * v['frequency']:.2f}%</td>"
        f"<td>{100 * v['mean_prob_raw']:.2f}%</td><td>{100 * v['mean_prob_calibrated']:.2f}%</td></tr>"
        for v in entry["per_value"]
    )
    header = "<tr><th>value</th><th>support</th><th>observed share</th><th>mean p before</th><th>mean p after</th></tr>"
    return f"<table>{header}{rows}</table>"


def _before_after(before: dict[str, Any], after: dict[str, Any], key: str, percent: bool) -> str:
    return f"{_number(before[key]['value'], percent)} &rarr; {_number(after[key]['value'], percent)}"


def _summary_table(report: dict[str, Any]) -> str:
    rows = []
    for index, (name, entry) in enumerate(report["fields"].items()):
        before, after = entry["raw"]["metrics"], entry["calibrated"]["metrics"]
        rows.append(
            f"<tr><td><a href='#field-{index}'>{html.escape(name)}</a></td>"
            f"<td>{entry['n']}</td><td>{len(entry['values'])}</td>"
            f"<td>{_number(after['accuracy']['value'], True)}</td>"
            f"<td>{_before_after(before, after, 'nll', False)}</td>"
            f"<td>{_before_after(before, after, 'ece', True)}</td></tr>"
        )
    header = "<tr><th>field</th><th>n</th><th>values</th><th>accuracy</th><th>NLL</th><th>ECE</th></tr>"
    return f"<table>{header}{''.join(rows)}</table>"


def _field_section(index: int, name: str, entry: dict[str, Any], alpha: float) -> str:
    title = html.escape(name)
    images = "".join(
        f"<img src='{html.escape(file, quote=True)}' alt='{title} {kind}'>" for kind, file in entry["figures"].items()
    )
    return (
        f"<section id='field-{index}'><h2>{title}</h2>"
        f"<p>{entry['n']} samples, {len(entry['values'])} values.</p>"
        f"{_metrics_table(entry, alpha)}<h3>per value</h3>{_per_value_table(entry)}{images}</section>"
    )


def render_html(report: dict[str, Any]) -> str:
    """The page for a `metrics.json` document: a summary table, then one section per field."""
    # Anchors are positions, not names: an HTML id may not contain the spaces a field name can.
    sections = "".join(
        _field_section(index, name, entry, report["alpha"])
        for index, (name, entry) in enumerate(report["fields"].items())
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Jev calibration report</title>"
        f"<style>{_STYLE}</style></head><body><h1>Jev calibration report</h1>"
        f"<p>Generated {report['generated_at']}. Intervals: percentile bootstrap, {report['n_boot']} "
        f"resamples, paired before/after. ECE and MCE are top-label; Brier is the scikit-learn binary "
        f"score for two-valued fields and the multiclass sum otherwise.</p>"
        f"{_summary_table(report)}{sections}</body></html>"
    )
