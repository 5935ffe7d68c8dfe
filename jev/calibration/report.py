"""The calibration report: `report.html`, per-field PNGs and `metrics.json` with the same numbers.

The HTML is for a person deciding whether a field's probabilities can be trusted; the JSON is for
the API and for tests, and every number in the page is read from it, so the two cannot disagree.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from jev.calibration._validation import check_distribution, check_labels
from jev.calibration.metrics import METRICS, N_BINS, ConfidenceInterval, bootstrap_ci, field_report
from jev.calibration.plots import confidence_histogram, reliability_diagram, risk_coverage_plot
from jev.calibration.policies import ConformalPolicy

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

# What a baseline is compared on: the scores a reader knows, without the binning variants.
BASELINE_METRICS = ("accuracy", "nll", "brier", "ece")

# Top-level keys of metrics.json that the report writes itself; a header may not reuse them.
_RESERVED = frozenset({"title", "generated_at", "n_bins", "n_boot", "alpha", "seed", "fields"})

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0 1.6em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f2f2f2; }
.better { color: #0a6b2a; } .worse { color: #a11; }
.ci { color: #777; font-size: 0.85em; white-space: nowrap; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.3em 0; }
section { border-top: 2px solid #999; margin-top: 2em; }
table.meta td { text-align: left; font-family: ui-monospace, monospace; font-size: 0.9em; }
.note { color: #555; font-style: italic; }
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


def _flat(raw: dict[str, Any], calibrated: dict[str, Any]) -> dict[str, Any]:
    """Every metric as `name`, `name_ci`, `name_uncalibrated`, `name_uncalibrated_ci`, for quick reading."""
    flat: dict[str, Any] = {}
    for name in METRICS:
        after, before = calibrated["metrics"][name], raw["metrics"][name]
        flat[name], flat[f"{name}_ci"] = after["value"], [after["low"], after["high"]]
        flat[f"{name}_uncalibrated"], flat[f"{name}_uncalibrated_ci"] = before["value"], [before["low"], before["high"]]
    return flat


def _share_ci(hits: np.ndarray, n_boot: int, alpha: float, seed: int) -> ConfidenceInterval:
    """Bootstrap interval of a share of per-sample 0/1 outcomes, resampled like every other metric.

    The outcomes go through `bootstrap_ci` as a two-column distribution whose mean second column
    is the share, so the resamples are the very ones (same seed, same n) the field's metrics use.
    """
    share = hits.astype(np.float64)
    return bootstrap_ci(
        lambda dist, _y: float(dist[:, 1].mean()),
        np.column_stack([1.0 - share, share]),
        np.zeros(share.shape[0], dtype=np.int64),
        n_boot=n_boot,
        alpha=alpha,
        seed=seed,
    )


def _conformal_entry(
    policy: ConformalPolicy, calibrated: np.ndarray, y: np.ndarray, n_boot: int, alpha: float, seed: int
) -> dict[str, Any]:
    """How often the fitted prediction sets hold the true value on this split, against the promise.

    The sets are built from the calibrated probabilities as given, exactly as the Decider builds them.
    """
    sets = policy.predict_sets(calibrated)
    covered = sets[np.arange(y.shape[0]), y]
    interval = _share_ci(covered, n_boot, alpha, seed)
    sizes = sets.sum(axis=1)
    return {
        "coverage_promised": policy.coverage,
        "coverage_empirical": interval.value,
        "coverage_ci": [interval.low, interval.high],
        "mean_set_size": float(sizes.mean()),
        "empty_set_share": float(np.mean(sizes == 0)),
        "qhat": policy.qhat_,
        "n_calibration": policy.n_samples_,
    }


def _baseline_metrics(probs: np.ndarray, y: np.ndarray, n_boot: int, alpha: float, seed: int) -> dict[str, Any]:
    return {
        name: bootstrap_ci(METRICS[name], probs, y, n_boot=n_boot, alpha=alpha, seed=seed)._asdict()
        for name in BASELINE_METRICS
    }


def _baseline_entry(
    name: str, baseline: dict[str, Any], y: np.ndarray, n_values: int, n_boot: int, alpha: float, seed: int
) -> dict[str, Any]:
    """The baseline's metrics on the same rows and resamples as Jev's, raw and calibrated."""
    raw = check_distribution(baseline["raw"])
    calibrated = None if baseline.get("calibrated") is None else check_distribution(baseline["calibrated"])
    for stage, probs in (("raw", raw), ("calibrated", calibrated)):
        if probs is not None and probs.shape != (y.shape[0], n_values):
            raise ValueError(f"field {name!r}: baseline {stage} {probs.shape} must be [{y.shape[0]}, {n_values}]")
    return {
        "name": baseline.get("name", "baseline"),
        "calibration_method": baseline.get("method"),
        "note": baseline.get("note"),
        "raw": _baseline_metrics(raw, y, n_boot, alpha, seed),
        "calibrated": None if calibrated is None else _baseline_metrics(calibrated, y, n_boot, alpha, seed),
    }


def _field_entry(
    name: str, field: dict[str, Any], out_dir: Path, stem: str, n_boot: int, alpha: float, seed: int
) -> dict[str, Any]:
    raw, calibrated, y, values = _checked_field(name, field)
    figures = {
        "reliability": reliability_diagram(raw, calibrated, y, name, out_dir / f"{stem}_reliability.png"),
        "confidence": confidence_histogram(raw, calibrated, y, name, out_dir / f"{stem}_confidence.png"),
        "risk_coverage": risk_coverage_plot(raw, calibrated, y, name, out_dir / f"{stem}_risk_coverage.png"),
    }
    raw_report = field_report(raw, y, n_boot=n_boot, alpha=alpha, seed=seed)
    calibrated_report = field_report(calibrated, y, n_boot=n_boot, alpha=alpha, seed=seed)
    conformal = field.get("conformal")
    return {
        "values": values,
        "n": int(y.shape[0]),
        **_flat(raw_report, calibrated_report),
        "raw": raw_report,
        "calibrated": calibrated_report,
        "per_value": _per_value(raw, calibrated, y, values),
        "conformal": None if conformal is None else _conformal_entry(conformal, calibrated, y, n_boot, alpha, seed),
        "baselines": [
            _baseline_entry(name, baseline, y, len(values), n_boot, alpha, seed)
            for baseline in field.get("baselines", [])
        ],
        "figures": {kind: path.name for kind, path in figures.items()},
    }


def write_report(
    fields: dict[str, dict[str, Any]],
    out_dir: Path,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    header: Mapping[str, Any] | None = None,
    title: str = "Jev calibration report",
) -> Path:
    """Write report.html, metrics.json and three PNGs per field into `out_dir`; return the HTML path.

    Each field is `{"raw": [n, K], "calibrated": [n, K], "y": [n], "values": K names}`, optionally
    with `"conformal"`: a fitted `ConformalPolicy` whose sets are checked on these rows, and
    `"baselines"`: a list of `{"name", "raw": [n, K], "calibrated": [n, K] | None, "method", "note"}`,
    other models' probabilities on the same rows. Multi-label fields are reported one label at a time, as
    two-valued fields. `header` (which model, which data: plain JSON values) heads both the page and
    metrics.json, whose top level it joins. The page embeds its images, so it can be sent alone.
    """
    if not fields:
        raise ValueError("no fields to report")
    clashes = _RESERVED & set(header or {})
    if clashes:
        raise ValueError(f"header keys {sorted(clashes)} are the report's own; rename them")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    report = {
        "title": title,
        **(header or {}),
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
    path.write_text(render_html(report, out_dir), encoding="utf-8")
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


def _header_rows(value: Any, key: str = "") -> list[tuple[str, str]]:
    """Nested header values as (dotted key, text) rows, so any plain JSON header can be shown."""
    if isinstance(value, Mapping):
        return [row for k, v in value.items() for row in _header_rows(v, f"{key}.{k}" if key else str(k))]
    return [(key, "&mdash;" if value is None else html.escape(str(value)))]


def _header_table(report: dict[str, Any]) -> str:
    header = {k: v for k, v in report.items() if k not in _RESERVED}
    if not header:
        return ""
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in _header_rows(header))
    return f"<table class='meta'>{rows}</table>"


def _conformal_block(entry: dict[str, Any] | None, alpha: float) -> str:
    if entry is None:
        return ""
    level = round(100 * (1 - alpha))
    low, high = entry["coverage_ci"]
    return (
        "<h3>conformal prediction sets</h3><table><tr><th>promised coverage</th>"
        f"<th>empirical coverage [{level}% CI]</th><th>mean set size</th><th>empty sets</th>"
        f"<th>calibration samples</th></tr><tr><td>{_number(entry['coverage_promised'], True)}</td>"
        f"<td>{_cell({'value': entry['coverage_empirical'], 'low': low, 'high': high}, True)}</td>"
        f"<td>{entry['mean_set_size']:.3f}</td><td>{_number(entry['empty_set_share'], True)}</td>"
        f"<td>{entry['n_calibration']}</td></tr></table>"
    )


def _baseline_block(entry: dict[str, Any], baselines: list[dict[str, Any]], alpha: float) -> str:
    """Jev and each baseline side by side on the same rows, each before and after calibration."""
    if not baselines:
        return ""
    level = round(100 * (1 - alpha))
    columns = [("Jev raw", entry["raw"]["metrics"]), ("Jev calibrated", entry["calibrated"]["metrics"])]
    names, notes = [], []
    for i, baseline in enumerate(baselines, start=1):
        method = html.escape(str(baseline["calibration_method"]))
        columns += [
            (f"baseline {i} raw", baseline["raw"]),
            (f"baseline {i} calibrated ({method})", baseline["calibrated"]),
        ]
        names.append(f"<li>baseline {i}: {html.escape(baseline['name'])}</li>")
        if baseline["note"]:
            notes.append(f"<p class='note'>Calibrated baseline {i} not fitted: {html.escape(baseline['note'])}</p>")
    header = "".join(f"<th>{label} [{level}% CI]</th>" for label, _ in columns)
    rows = []
    for key in BASELINE_METRICS:
        label, percent, _ = _METRIC_LABELS[key]
        cells = "".join(f"<td>{'&mdash;' if m is None else _cell(m[key], percent)}</td>" for _, m in columns)
        rows.append(f"<tr><td>{label}</td>{cells}</tr>")
    return (
        f"<h3>baselines on the same rows</h3><ul>{''.join(names)}</ul>"
        f"<table><tr><th>metric</th>{header}</tr>{''.join(rows)}</table>{''.join(notes)}"
    )


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _field_section(index: int, name: str, entry: dict[str, Any], alpha: float, image_dir: Path) -> str:
    title = html.escape(name)
    images = "".join(
        f"<img src='{_data_uri(image_dir / file)}' alt='{title} {kind}'>" for kind, file in entry["figures"].items()
    )
    return (
        f"<section id='field-{index}'><h2>{title}</h2>"
        f"<p>{entry['n']} samples, {len(entry['values'])} values.</p>"
        f"{_metrics_table(entry, alpha)}{_conformal_block(entry['conformal'], alpha)}"
        f"{_baseline_block(entry, entry['baselines'], alpha)}"
        f"<h3>per value</h3>{_per_value_table(entry)}{images}</section>"
    )


def render_html(report: dict[str, Any], image_dir: Path) -> str:
    """The page for a `metrics.json` document, with the figures in `image_dir` embedded as data URIs.

    A header table, a summary table, then one section per field.
    """
    # Anchors are positions, not names: an HTML id may not contain the spaces a field name can.
    sections = "".join(
        _field_section(index, name, entry, report["alpha"], image_dir)
        for index, (name, entry) in enumerate(report["fields"].items())
    )
    title = html.escape(report["title"])
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{title}</h1>{_header_table(report)}"
        f"<p>Generated {report['generated_at']}. Intervals: percentile bootstrap, {report['n_boot']} "
        f"resamples, paired before/after. ECE and MCE are top-label; Brier is the scikit-learn binary "
        f"score for two-valued fields and the multiclass sum otherwise.</p>"
        f"{_summary_table(report)}{sections}</body></html>"
    )
