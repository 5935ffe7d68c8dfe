"""The report's figures, drawn on matplotlib's Agg canvas.

Figures are built with `Figure` and `FigureCanvasAgg` directly rather than `pyplot`, so drawing
touches no global state (no current figure, no backend switch) and works on a headless server.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sklearn.calibration import calibration_curve

from jev.calibration.metrics import N_BINS, ece, equal_width_bins, risk_coverage

_BEFORE = ("before", "tab:red", "-")
_AFTER = ("after", "tab:blue", "--")


def _top_label(probs: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return probs.max(axis=1), (probs.argmax(axis=1) == y).astype(np.int64)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110)
    return path


def reliability_diagram(raw: np.ndarray, calibrated: np.ndarray, y: np.ndarray, title: str, path: Path) -> Path:
    """Top-label accuracy against confidence per equal-width bin, before and after calibration.

    Bars show the bin's accuracy; the gap to the diagonal is what ECE averages. Bar labels give
    the bin counts, because a large gap in a bin of three samples means little.
    """
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    for ax, probs, (label, color, _) in zip(axes, (raw, calibrated), (_BEFORE, _AFTER), strict=True):
        confidence, hits = _top_label(probs, y)
        stats = equal_width_bins(confidence, hits.astype(np.float64))
        filled = stats.count > 0
        accuracy_per_bin, confidence_per_bin = calibration_curve(hits, confidence, n_bins=N_BINS)
        bars = ax.bar(
            edges[:-1][filled],
            accuracy_per_bin,
            width=1.0 / N_BINS,
            align="edge",
            color=color,
            alpha=0.55,
            edgecolor="black",
            label="accuracy in bin",
        )
        ax.bar_label(bars, labels=[str(c) for c in stats.count[filled]], fontsize=7, padding=1)
        ax.plot(
            confidence_per_bin,
            accuracy_per_bin,
            "o",
            color="black",
            markersize=3,
            label="(mean confidence, accuracy)",
        )
        ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
        ax.set(
            xlim=(0, 1),
            ylim=(0, 1.08),
            xlabel="confidence of the top value",
            title=f"{label} calibration: ECE {100 * ece(probs, y):.2f}%",
        )
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("accuracy")
    fig.suptitle(f"{title}: reliability diagram ({N_BINS} equal-width bins, sample counts on bars)")
    return _save(fig, path)


def confidence_histogram(raw: np.ndarray, calibrated: np.ndarray, y: np.ndarray, title: str, path: Path) -> Path:
    """How many answers fall at each confidence, before and after: where the ECE bins get their weight."""
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    for probs, (label, color, style) in ((raw, _BEFORE), (calibrated, _AFTER)):
        ax.hist(
            probs.max(axis=1),
            bins=edges,
            histtype="step",
            linewidth=2,
            color=color,
            linestyle=style,
            label=label,
        )
    ax.set(
        xlim=(0, 1),
        xlabel="confidence of the top value",
        ylabel="samples",
        title=f"{title}: confidence histogram (n={y.shape[0]})",
    )
    ax.legend()
    return _save(fig, path)


def risk_coverage_plot(raw: np.ndarray, calibrated: np.ndarray, y: np.ndarray, title: str, path: Path) -> Path:
    """Error rate among the answers kept as coverage shrinks: what an abstain threshold buys."""
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    for probs, (label, color, style) in ((raw, _BEFORE), (calibrated, _AFTER)):
        coverage, risk = risk_coverage(probs, y)
        ax.plot(coverage, risk, color=color, linestyle=style, linewidth=1.5, label=label)
    ax.set(
        xlim=(0, 1),
        ylim=(0, None),
        xlabel="coverage (share answered, most confident first)",
        ylabel="error rate among answered",
        title=f"{title}: risk-coverage",
    )
    ax.legend()
    return _save(fig, path)
