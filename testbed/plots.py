"""Plots of a run, shared by the report and the notebooks: each function takes tables
(never files) and returns a matplotlib Figure; ``save`` writes it as PNG.

Measured points carry their spread over repeats (mean with min-max bars); each model
family is a line from ``compare.curve_predictions``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import matplotlib

matplotlib.use("Agg")  # no display: reports and tests render to files

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from testbed.compare import MODELS, measured_column  # noqa: E402

__all__ = ["phase_vs_workers", "speedup_vs_workers", "phase_breakdown", "measured_vs_predicted", "save",
           "staleness_histogram"]

_STYLE = {"initial": ":", "updated": "--", "queueing": "-"}
_STEP_PHASES = ("read", "compute", "push", "pull", "barrier")


def _finish(fig: plt.Figure, ax, xlabel: str, ylabel: str, title: str, legend_size: int = 7) -> plt.Figure:
    """Labels, grid, legend and layout shared by every plot."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


def _groups(compared: pd.DataFrame) -> Iterable[tuple[str, pd.DataFrame]]:
    if "group" not in compared:
        compared = compared.assign(group="all")
    return compared.groupby("group", sort=False)


def phase_vs_workers(compared: pd.DataFrame, curves: Optional[pd.DataFrame], phase: str,
                     models: Iterable[str] = MODELS) -> plt.Figure:
    """A phase's time (init, train or total) against workers: measured mean with its spread
    over repeats, and each family's predicted curve."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    col = measured_column(phase)
    for k, (label, sub) in enumerate(_groups(compared)):
        color = f"C{k}"
        stats = sub.groupby("workers")[col].agg(["mean", "min", "max"]).reset_index()
        ax.errorbar(stats["workers"], stats["mean"], yerr=[stats["mean"] - stats["min"], stats["max"] - stats["mean"]],
                    fmt="o", color=color, capsize=3, label=f"measured ({label})")
        if curves is not None and len(curves):
            for model in models:
                c = curves[(curves["group"] == label) & (curves["model"] == model)]
                if len(c):
                    ax.plot(c["workers"], c[col], _STYLE.get(model, "-"), color=color, alpha=0.8,
                            label=f"{model} ({label})")
    ax.set_xscale("log", base=2)
    return _finish(fig, ax, "workers", f"{phase} time (s)", f"{phase} phase vs workers")


def speedup_vs_workers(compared: pd.DataFrame, curves: Optional[pd.DataFrame],
                       models: Iterable[str] = MODELS) -> plt.Figure:
    """Aggregate step rate relative to the group's smallest worker count, against linear."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    top = 1
    for k, (label, sub) in enumerate(_groups(compared)):
        color = f"C{k}"
        rate = sub.groupby("workers")["steps_per_s"].mean()
        n0 = rate.index.min()
        base = rate.loc[n0] / n0
        ax.plot(rate.index, rate / base, "o", color=color, label=f"measured ({label})")
        top = max(top, rate.index.max())
        if curves is not None and len(curves):
            for model in models:
                c = curves[(curves["group"] == label) & (curves["model"] == model)]
                if len(c):
                    c0 = c.iloc[0]
                    ax.plot(c["workers"], c["steps_per_s"] / (c0["steps_per_s"] / c0["workers"]),
                            _STYLE.get(model, "-"), color=color, alpha=0.8, label=f"{model} ({label})")
    ax.plot([1, top], [1, top], color="grey", lw=1, label="linear")
    return _finish(fig, ax, "workers", "speedup (steps/s over one worker's)", "train-phase speedup vs workers")


def phase_breakdown(compared: pd.DataFrame) -> plt.Figure:
    """A stacked bar per config of the mean per-step worker phases (what a step is made of)."""
    means = compared.groupby("config_id", sort=False).mean(numeric_only=True)
    fig, ax = plt.subplots(figsize=(max(6.4, 0.5 * len(means) + 2), 4.2))
    bottom = np.zeros(len(means))
    x = np.arange(len(means))
    for k, phase in enumerate(_STEP_PHASES):
        col = f"{phase}_mean_s"
        if col not in means:
            continue
        values = means[col].fillna(0.0).to_numpy() * 1e3
        if not values.any():
            continue
        ax.bar(x, values, bottom=bottom, color=f"C{k}", label=phase)
        bottom += values
    labels = [f"N={int(w)} S={int(s)}" for w, s in zip(means["workers"], means["servers"])]
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    fig = _finish(fig, ax, "", "mean time per step (ms)", "per-step phases per config (measured)")
    ax.grid(False)
    return fig


def measured_vs_predicted(compared: pd.DataFrame, models: Iterable[str] = MODELS,
                          phases: Iterable[str] = ("init", "train", "total")) -> plt.Figure:
    """Each config's measured time against each family's prediction, log-log, with y = x."""
    fig, ax = plt.subplots(figsize=(5.2, 5.2))
    lo, hi = np.inf, 0.0
    markers = {"init": "s", "train": "o", "total": "^"}
    for k, model in enumerate(models):
        for phase in phases:
            pred = f"{phase}_s_pred_{model}"
            if pred not in compared:
                continue
            sub = compared[[measured_column(phase), pred]].dropna()
            sub = sub[(sub > 0).all(axis=1)]
            if not len(sub):
                continue
            ax.scatter(sub.iloc[:, 0], sub.iloc[:, 1], marker=markers.get(phase, "o"), color=f"C{k}", alpha=0.7,
                       label=f"{model} {phase}")
            lo, hi = min(lo, sub.min().min()), max(hi, sub.max().max())
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
    return _finish(fig, ax, "measured (s)", "predicted (s)", "measured vs predicted", legend_size=6)


def staleness_histogram(events: pd.DataFrame) -> plt.Figure:
    """The distribution of the staleness of applied updates, per config."""
    applies = events[(events["phase"] == "apply") & (events["staleness"] >= 0)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k, (config_id, sub) in enumerate(applies.groupby("config_id", sort=False)):
        values = sub["staleness"].to_numpy()
        bins = np.arange(values.max() + 2) - 0.5
        ax.hist(values, bins=bins, histtype="step", color=f"C{k % 10}", label=config_id, density=True)
    return _finish(fig, ax, "staleness (updates applied since the worker's pull)", "fraction of updates",
                   "staleness of applied updates", legend_size=6)


def save(fig: plt.Figure, path: Path) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
