"""Plots of a run, shared by the report and the notebooks: each function takes tables
(never files) and returns a matplotlib Figure; ``figure_png`` renders one as PNG bytes
(the report's writer puts them on disk).

Measured points carry their spread over repeats (mean with min-max bars); each model
family is a line from ``compare.curve_predictions``.
"""

from __future__ import annotations

import io
from typing import Any, Iterable, Optional

import numpy as np
import pandas as pd

# No pyplot: figures are plain objects with no GUI backend and no global state, so
# importing this module never changes the backend of a notebook that imports it.
from matplotlib.figure import Figure

from testbed.analysis.compare import MODELS, measured_column
from testbed.records.events import Phase, Role

__all__ = ["phase_vs_workers", "speedup_vs_workers", "phase_breakdown", "measured_vs_predicted",
           "staleness_histogram", "utilisation", "shaped_link_rate",
           "figure_png", "utilisation_png", "show"]

_SPAN_COLOURS = {Phase.SETUP.value: "tab:gray", Phase.INIT.value: "tab:orange", Phase.TRAIN.value: "tab:green"}
_STYLE = {"initial": ":", "updated": "--", "queueing": "-", "simulated": "-."}
_STEP_PHASES = ("read", "compute", "push", "pull", "barrier")


def _finish(fig: Figure, ax, xlabel: str, ylabel: str, title: str, legend_size: int = 7) -> Figure:
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
                     models: Iterable[str] = MODELS) -> Figure:
    """A phase's time (init, train or job) against workers: measured mean with its spread
    over repeats, and each family's predicted curve."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
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
                       models: Iterable[str] = MODELS) -> Figure:
    """Aggregate step rate relative to the group's smallest worker count, against linear."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
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


def phase_breakdown(compared: pd.DataFrame) -> Figure:
    """A stacked bar per config of the mean per-step worker phases (what a step is made of)."""
    means = compared.groupby("config_id", sort=False).mean(numeric_only=True)
    fig = Figure(figsize=(max(6.4, 0.5 * len(means) + 2), 4.2))
    ax = fig.subplots()
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
                          phases: Iterable[str] = ("init", "train", "job")) -> Figure:
    """Each config's measured time against each family's prediction, log-log, with y = x."""
    fig = Figure(figsize=(5.2, 5.2))
    ax = fig.subplots()
    lo, hi = np.inf, 0.0
    markers = {"init": "s", "train": "o", "job": "^"}
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


def staleness_histogram(events: pd.DataFrame) -> Figure:
    """The distribution of the staleness of applied updates, per config."""
    applies = events[(events["phase"] == "apply") & (events["staleness"] >= 0)]
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    for k, (config_id, sub) in enumerate(applies.groupby("config_id", sort=False)):
        values = sub["staleness"].to_numpy()
        bins = np.arange(values.max() + 2) - 0.5
        ax.hist(values, bins=bins, histtype="step", color=f"C{k % 10}", label=config_id, density=True)
    return _finish(fig, ax, "staleness (updates applied since the worker's pull)", "fraction of updates",
                   "staleness of applied updates", legend_size=6)


def _driver_spans(events: pd.DataFrame) -> pd.DataFrame:
    driver = events[(events["role"] == Role.DRIVER.value) & events["phase"].isin(list(_SPAN_COLOURS))]
    return driver[["config_id", "phase", "start_ns", "duration_ns"]]


def shaped_link_rate(times_ns: np.ndarray, events: pd.DataFrame, node: str) -> np.ndarray:
    """Bytes a second through the shaped links of ``node``'s shards between consecutive sample
    times (the first sample: 0): each ``link_in``/``link_out`` event's bytes spread evenly over
    its duration. Events and samples are both on the node's own clock. Zeros when unshaped."""
    rate = np.zeros(len(times_ns))
    mine = events[(events["node"] == node) & events["phase"].isin((Phase.LINK_IN.value, Phase.LINK_OUT.value))]
    if mine.empty or len(times_ns) < 2:
        return rate
    lo, hi = np.asarray(times_ns[:-1], dtype=float), np.asarray(times_ns[1:], dtype=float)
    for start, dur, nbytes in zip(mine["start_ns"], mine["duration_ns"], mine["bytes"]):
        end = start + max(int(dur), 1)
        overlap = np.clip(np.minimum(hi, end) - np.maximum(lo, start), 0, None)
        rate[1:] += nbytes * overlap / (end - start)
    widths_s = (hi - lo) / 1e9
    rate[1:] = np.divide(rate[1:], widths_s, out=np.zeros_like(widths_s), where=widths_s > 0)
    return rate


def utilisation(resources: Optional[pd.DataFrame], events: pd.DataFrame,
                offsets: dict[str, Any]) -> Optional[Figure]:
    """One panel per node: CPU %, disk and network bytes/s over time, driver phases shaded; None without samples."""
    if resources is None or resources.empty:
        return None
    nodes = sorted(resources["node"].unique())
    origin = int(events["start_ns"].min()) if len(events) else int(resources["time_ns"].min())
    fig = Figure(figsize=(10, 2.2 * len(nodes) + 0.6), layout="constrained")
    axes = fig.subplots(len(nodes), 1, sharex=True, squeeze=False)[:, 0]
    spans = _driver_spans(events)
    for ax, node in zip(axes, nodes):
        s = resources[resources["node"] == node].sort_values("time_ns")
        shift = offsets.get(node, {}).get("offset_ns", 0)  # onto the driver's clock
        t = (s["time_ns"] - shift - origin) / 1e9
        ax.plot(t, s["cpu_percent"], color="tab:blue")
        ax.set_ylim(0, 105)
        ax.set_ylabel("cpu %")
        ax.set_title(f"node {node[:12]}", fontsize=9, loc="left")
        io = ax.twinx()
        io.plot(t, (s["disk_read_bytes_per_s"] + s["disk_write_bytes_per_s"]) / 2**20, color="tab:red")
        io.plot(t, (s["net_sent_bytes_per_s"] + s["net_recv_bytes_per_s"]) / 2**20, color="tab:purple")
        shaped = shaped_link_rate(s["time_ns"].to_numpy(), events, node)
        if shaped.any():  # what the shaped links carried (on one node no byte crosses the NIC)
            io.plot(t, shaped / 2**20, color="tab:purple", linestyle="--")
        io.set_ylabel("MiB/s")
        for _, span in spans.iterrows():
            x0 = (span["start_ns"] - origin) / 1e9
            ax.axvspan(x0, x0 + span["duration_ns"] / 1e9, color=_SPAN_COLOURS[span["phase"]], alpha=0.15, lw=0)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Line2D([], [], color=c, label=label) for c, label in
               (("tab:blue", "cpu %"), ("tab:red", "disk MiB/s"), ("tab:purple", "net MiB/s"))]
    if events["phase"].isin((Phase.LINK_IN.value, Phase.LINK_OUT.value)).any():
        handles.append(Line2D([], [], color="tab:purple", linestyle="--", label="shaped links MiB/s"))
    handles += [Patch(color=c, alpha=0.3, label=p) for p, c in _SPAN_COLOURS.items()]
    fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), fontsize=8)
    axes[-1].set_xlabel("seconds since the run's first event (driver clock)")
    return fig


def figure_png(fig: Figure, dpi: int = 90) -> bytes:
    """A figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def utilisation_png(run: Any) -> Optional[bytes]:
    """A run's utilisation plot (``utilisation``) as PNG bytes, for a notebook; None without
    monitor samples. ``run`` is ``testbed.analysis.RunData``."""
    fig = utilisation(run.resources, run.events, run.manifest.get("clock_offsets", {}))
    return None if fig is None else figure_png(fig)


def show(fig_or_png: Any):
    """For a notebook: an image of a figure (or PNG bytes), independent of the matplotlib backend."""
    from IPython.display import Image
    data = fig_or_png if isinstance(fig_or_png, bytes) else figure_png(fig_or_png)
    return Image(data=data, format="png")
