"""Loading run folders for the notebooks, and the numbers each of the study's findings quotes.

The notebooks in ``notebooks/`` only read run folders: they find one (``resolve_run``),
load it (``load_run``: manifest, measured summary, events, monitor samples and, when the
folder holds the profile it was predicted with, the comparison with every model family),
plot it with ``testbed.plots`` (the report's own plots), and print the numbers behind each
finding of the reference study (``finding_numbers``). Nothing here starts Ray or writes into
a run folder.

Terms (as in ``testbed.compare``): a *group* is the configs of a run that differ only in
their worker count; a *sparse knee* is the first worker count of the sweep from which one
more sweep step gains less than half of the linear gain (None: no knee on the grid).
"""

from __future__ import annotations

import dataclasses
import io
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from testbed.errors import UserError
from testbed.rundir import RunFolder
from testbed.summary import summarize
from testbed.validation import Comparison

__all__ = ["RunData", "RUN_ENV", "PAPER_EXPERIMENTS", "find_runs", "newest_run", "resolve_run", "resolve_paper_runs",
           "load_run", "manifest_table", "summary_table", "utilisation_png", "figure_png", "show", "combine_runs",
           "InitScaling", "ServerSaturation", "Findings", "init_scaling", "server_saturation", "finding_numbers"]

RUN_ENV = "DDNN_RUN"  # names the run folder analysis.ipynb reads
# The reproduction experiments (experiments/<name>.yaml) and the variable naming each one's run folder.
PAPER_EXPERIMENTS = {"paper_cntk": "DDNN_PAPER_CNTK_RUN", "fix_parallel_io": "DDNN_FIX_PARALLEL_IO_RUN",
                     "fix_sharded_ps": "DDNN_FIX_SHARDED_PS_RUN"}


@dataclasses.dataclass
class RunData:
    """One run folder, loaded. ``comparison`` is None when the folder holds no ``profile.json``."""
    path: Path
    manifest: dict[str, Any]
    summary: pd.DataFrame                 # measured, one row per config and repeat, with its group
    events: pd.DataFrame
    resources: Optional[pd.DataFrame]     # node monitor samples; None when the run had no monitors
    comparison: Optional[Comparison]

    @property
    def experiment(self) -> str:
        return self.manifest.get("experiment", "")

    @property
    def compared(self) -> pd.DataFrame:
        """The summary with the prediction and error columns when there are predictions."""
        return self.comparison.compared if self.comparison is not None else self.summary

    @property
    def curves(self) -> Optional[pd.DataFrame]:
        """Each family's predictions at every worker count (for the plots' lines), or None."""
        return self.comparison.curves if self.comparison is not None else None

    @property
    def has_staleness(self) -> bool:
        return bool(((self.events["phase"] == "apply") & (self.events["staleness"] >= 0)).any())

    @property
    def has_resources(self) -> bool:
        return self.resources is not None and not self.resources.empty


# -- finding run folders -------------------------------------------------------------------
def _manifest(path: Path) -> Optional[dict[str, Any]]:
    try:
        return RunFolder.open(path).manifest
    except UserError:
        return None


def find_runs(experiment: Optional[str] = None, results_dir: str | Path = "results",
              statuses: Optional[tuple[str, ...]] = ("complete",)) -> list[Path]:
    """The run folders directly under ``results_dir``, oldest first (by start time), of
    ``experiment`` when given and with a status in ``statuses`` (None: any status)."""
    root = Path(results_dir)
    found = []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        manifest = _manifest(path) if path.is_dir() else None
        if manifest is None:
            continue
        if experiment is not None and manifest.get("experiment") != experiment:
            continue
        if statuses is not None and manifest.get("status") not in statuses:
            continue
        found.append((str(manifest.get("started") or ""), path.name, path))
    return [path for _, _, path in sorted(found)]


def newest_run(results_dir: str | Path = "results", experiment: Optional[str] = None) -> Path:
    """The most recently started complete run folder (of ``experiment`` when given)."""
    runs = find_runs(experiment, results_dir)
    if not runs:
        what = f"of experiment {experiment!r} " if experiment else ""
        hint = f"experiments/{experiment}.yaml" if experiment else "SPEC"
        raise UserError(f"no complete run folder {what}under {results_dir}; make one with "
                        f"`testbed validate {hint}` or name a folder")
    return runs[-1]


def resolve_run(path: str | Path | None = None, env: str = RUN_ENV, results_dir: str | Path = "results",
                experiment: Optional[str] = None) -> Path:
    """The folder to read: ``path`` when given, else the one the environment variable ``env``
    names, else the newest under ``results_dir``."""
    chosen = path or os.environ.get(env)
    if chosen:
        RunFolder.open(chosen)  # a clear error now rather than a KeyError later
        return Path(chosen)
    return newest_run(results_dir, experiment)


def resolve_paper_runs(paths: Optional[dict[str, str | Path | None]] = None,
                       results_dir: str | Path = "results") -> dict[str, Path]:
    """The run folder of each reproduction experiment (``PAPER_EXPERIMENTS``): from ``paths``,
    else its environment variable, else the newest of that experiment under ``results_dir``."""
    paths = paths or {}
    return {name: resolve_run(paths.get(name), env, results_dir, experiment=name)
            for name, env in PAPER_EXPERIMENTS.items()}


# -- loading -------------------------------------------------------------------------------
def load_run(path: str | Path) -> RunData:
    """Read a run folder; compare it with every model family when it holds ``profile.json``."""
    folder = RunFolder.open(path)
    events = folder.events()
    statuses = {(f["config_id"], f["repeat"]): f.get("status", "ok") for f in folder.manifest.get("finished", [])}
    summary = summarize(events, folder.manifest["configs"], statuses)
    comparison = None
    from testbed.rundir import PROFILE_FILE
    if (folder.path / PROFILE_FILE).is_file():
        from testbed.profile import load_profile
        from testbed.validation import compare_run
        comparison = compare_run(folder, load_profile(folder.path / PROFILE_FILE))
        summary = comparison.compared[["group", *summary.columns]]
    else:
        from testbed.compare import group_label
        labels = {c["config_id"]: group_label(c.get("sweep_values", {})) for c in folder.manifest["configs"]}
        summary.insert(2, "group", summary["config_id"].map(labels))
    return RunData(path=folder.path, manifest=folder.manifest, summary=summary, events=events,
                   resources=folder.resources(), comparison=comparison)


def manifest_table(manifest: dict[str, Any]) -> pd.DataFrame:
    """The manifest's headline fields as a two-column table (field, value)."""
    configs = manifest.get("configs", [])
    sweep = manifest.get("spec", {}).get("sweep", {})
    rows = [("experiment", manifest.get("experiment")), ("run id", manifest.get("run_id")),
            ("status", manifest.get("status")), ("started", manifest.get("started")),
            ("ended", manifest.get("ended")), ("host", manifest.get("host")),
            ("git commit", (manifest.get("git_commit") or "-")[:12]),
            ("configs x repeats", f"{len(configs)} x {manifest.get('repeats')}"),
            ("finished", len(manifest.get("finished", []))),
            ("sweep", ", ".join(f"{k}={v}" for k, v in sweep.items()) or "-"),
            ("nodes", len(manifest.get("cluster", [])) or len(manifest.get("nodes", {})) or 1),
            ("cache bypass", manifest.get("cache_bypass", "-")),
            ("versions", ", ".join(f"{k} {v}" for k, v in manifest.get("versions", {}).items()))]
    if manifest.get("error"):
        rows.append(("error", manifest["error"]))
    return pd.DataFrame(rows, columns=["field", "value"])


_SUMMARY_SHOWN = ["config_id", "repeat", "group", "workers", "servers", "sync", "init_io", "partition", "status",
                  "setup_s", "init_s", "train_s", "total_s", "steps_per_s", "read_mean_s", "compute_mean_s",
                  "push_mean_s", "pull_mean_s", "barrier_mean_s", "queue_mean_s", "apply_mean_s", "staleness_mean"]


def summary_table(run: RunData) -> pd.DataFrame:
    """The measured summary's main columns (the phases that were measured at all)."""
    shown = [c for c in _SUMMARY_SHOWN if c in run.summary and not run.summary[c].isna().all()]
    return run.summary[shown].reset_index(drop=True)


# -- figures -------------------------------------------------------------------------------
def utilisation_png(run: RunData) -> Optional[bytes]:
    """The report's utilisation plot of the run (``report.plot_utilisation``) as PNG bytes,
    drawn into a temporary file, never into the run folder; None without monitor samples."""
    if not run.has_resources:
        return None
    from testbed.report import plot_utilisation
    with tempfile.TemporaryDirectory() as tmp:
        path = plot_utilisation(run.resources, run.events, run.manifest.get("clock_offsets", {}),
                                Path(tmp) / "utilisation.png")
        return path.read_bytes() if path is not None else None


def figure_png(fig, dpi: int = 90) -> bytes:
    """A matplotlib figure as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def show(fig_or_png):
    """For a notebook: an image of a figure (or PNG bytes), independent of the matplotlib backend."""
    from IPython.display import Image
    data = fig_or_png if isinstance(fig_or_png, bytes) else figure_png(fig_or_png)
    return Image(data=data, format="png")


def combine_runs(runs: dict[str, RunData]) -> tuple[pd.DataFrame, Optional[pd.DataFrame]]:
    """Several runs' compared tables and curves as one, each group relabelled ``<label>: <group>``
    (``<label>`` alone for a run of one group), so one plot shows them side by side."""
    compared, curves = [], []
    for label, run in runs.items():
        single = run.compared["group"].nunique() == 1

        def relabel(group: pd.Series) -> pd.Series:
            return group.map(lambda g: label if single else f"{label}: {g}")
        compared.append(run.compared.assign(group=relabel(run.compared["group"])))
        if run.curves is not None and len(run.curves):
            curves.append(run.curves.assign(group=relabel(run.curves["group"])))
    return (pd.concat(compared, ignore_index=True),
            pd.concat(curves, ignore_index=True) if curves else None)


# -- the study's findings ------------------------------------------------------------------
def _workers(n: int) -> str:
    return f"{n} worker{'s' * (n != 1)}"


def _knee_text(knee: Optional[int], grid: tuple[int, ...]) -> str:
    return f"none up to {_workers(grid[-1])}" if knee is None else _workers(knee)


def _slope(v: float) -> str:
    """A slope in s per worker; round-off (|v| < 1 ns) prints as 0."""
    return "0" if abs(v) < 1e-9 else f"{v:+.3g}"


def _means(sub: pd.DataFrame) -> pd.DataFrame:
    return sub.groupby("workers", sort=True).mean(numeric_only=True)


@dataclasses.dataclass(frozen=True)
class InitScaling:
    """Init time against workers in one group of a run (finding (a), and the parallel-I/O fix)."""
    experiment: str
    group: str
    init_io: str
    partition: str
    workers: tuple[int, ...]
    init_s: tuple[float, ...]                     # mean over repeats, per worker count
    slope_s_per_worker: float                     # least squares over every repeat
    r2: float
    predicted_slope_s_per_worker: dict[str, float]  # each family's predictions, fitted the same way
    init_share_at_max: float                      # init / total at the largest worker count
    job_knee: Optional[int]                       # measured sparse knee of the whole job's rate

    @property
    def trend(self) -> str:
        """'grows', 'falls' or 'is flat' (the fitted change over the sweep within 10 % of the mean)."""
        change = self.slope_s_per_worker * (self.workers[-1] - self.workers[0])
        mean = sum(self.init_s) / len(self.init_s)
        return "is flat" if abs(change) <= 0.1 * mean else ("grows" if change > 0 else "falls")

    def describe(self) -> str:
        points = ", ".join(f"{t:.3g} s at {n}" for n, t in zip(self.workers, self.init_s))
        lines = [f"{self.experiment} ({self.group}; {self.init_io} init reads, partition {self.partition}): "
                 f"init time {self.trend} with the worker count: slope {_slope(self.slope_s_per_worker)} s per worker, "
                 f"R^2 = {self.r2:.2f}{' (two worker counts only)' * (len(self.workers) < 3)} ({points} workers).",
                 f"At {self.workers[-1]} workers init is {self.init_share_at_max:.1%} of the job; the job's measured "
                 f"knee: {_knee_text(self.job_knee, self.workers)}."]
        if self.predicted_slope_s_per_worker:
            lines.append("Predicted slopes: " + ", ".join(f"{m} {_slope(s)} s per worker"
                                                          for m, s in self.predicted_slope_s_per_worker.items()) + ".")
        return "\n".join(lines)


def init_scaling(run: RunData) -> list[InitScaling]:
    """Finding (a)'s numbers for every group of ``run`` with at least two worker counts."""
    from testbed.compare import MODELS, sparse_knee
    from testbed.validation import init_fit
    c = run.compared
    out = []
    for _, fit in init_fit(c).iterrows():
        sub = c[c["group"] == fit["group"]]
        means = _means(sub)
        predicted = {}
        for model in MODELS:
            col = f"init_s_pred_{model}"
            if col in sub:
                predicted[model] = float(init_fit(sub.assign(init_s=sub[col])).iloc[0]["slope_s_per_worker"])
        job_rate = (means.index * means["steps"] / means["total_s"]).tolist()
        out.append(InitScaling(
            experiment=run.experiment, group=fit["group"], init_io=str(sub["init_io"].iloc[0]),
            partition=str(sub["partition"].iloc[0]), workers=tuple(int(n) for n in means.index),
            init_s=tuple(means["init_s"].tolist()), slope_s_per_worker=float(fit["slope_s_per_worker"]),
            r2=float(fit["r2"]), predicted_slope_s_per_worker=predicted,
            init_share_at_max=float(means["init_s"].iloc[-1] / means["total_s"].iloc[-1]),
            job_knee=sparse_knee(list(means.index), job_rate)))
    return out


@dataclasses.dataclass(frozen=True)
class ServerSaturation:
    """The train phase against workers in one group of a run (finding (b), and the sharding fix)."""
    experiment: str
    group: str
    servers: int
    workers: tuple[int, ...]
    steps_per_s: tuple[float, ...]        # aggregate, mean over repeats
    step_ms: tuple[float, ...]            # one worker's time per step: workers / steps_per_s
    compute_ms: tuple[float, ...]
    push_ms: tuple[float, ...]            # a push waits for the server's queue and apply (async)
    queue_ms: tuple[float, ...]
    train_knee: Optional[int]             # measured sparse knee of the step rate
    model: str                            # the family whose knees are quoted
    predicted_train_knee: Optional[int]   # that family's knee on the same worker counts
    model_knee: Optional[int]             # that family's own knee (every worker count), at the largest config
    server_utilization: Optional[float]   # that family's server utilisation at the largest worker count

    @property
    def speedup(self) -> float:
        return self.steps_per_s[-1] / self.steps_per_s[0]

    def describe(self) -> str:
        n0, n1 = self.workers[0], self.workers[-1]
        ms = lambda v: f"{v[0]:.3g} ms at {n0} -> {v[-1]:.3g} ms at {n1}"
        lines = [f"{self.experiment} ({self.group}, {self.servers} server shard{'s' * (self.servers != 1)}): "
                 f"{self.steps_per_s[0]:.4g} steps/s at {_workers(n0)}, {self.steps_per_s[-1]:.4g} at {n1}: "
                 f"speedup {self.speedup:.2f} of a linear {n1 / n0:.2g}.",
                 f"Per worker and step: time {ms(self.step_ms)}; compute {ms(self.compute_ms)}; "
                 f"push {ms(self.push_ms)}; server queue {ms(self.queue_ms)}.",
                 f"Measured train knee: {_knee_text(self.train_knee, self.workers)}; the {self.model} model's on the "
                 f"same worker counts: {_knee_text(self.predicted_train_knee, self.workers)}"]
        if self.model_knee is not None:
            lines[-1] += f", its own knee: {self.model_knee} workers"
        if self.server_utilization is not None:
            lines[-1] += f", its server utilisation at {n1}: {self.server_utilization:.0%}"
        lines[-1] += "."
        return "\n".join(lines)


def server_saturation(run: RunData, model: str = "queueing") -> list[ServerSaturation]:
    """Finding (b)'s numbers for every group of ``run`` with at least two worker counts."""
    from testbed.compare import sparse_knee
    c = run.compared
    out = []
    for group, sub in c.groupby("group", sort=False):
        means = _means(sub)
        if len(means) < 2:
            continue
        grid = [int(n) for n in means.index]
        predicted = model_knee = util = None
        if run.comparison is not None and f"train_s_pred_{model}" in sub:
            job = means.index * means["steps"]
            predicted = sparse_knee(grid, (job / means[f"train_s_pred_{model}"]).tolist())
            preds = run.comparison.predictions
            largest = sub.loc[sub["workers"].idxmax(), "config_id"]
            row = preds[(preds["config_id"] == largest) & (preds["model"] == model)]
            if len(row):
                model_knee = None if pd.isna(row["knee_train_workers"].iloc[0]) else int(row["knee_train_workers"].iloc[0])
                util = None if pd.isna(row["server_utilization"].iloc[0]) else float(row["server_utilization"].iloc[0])
        ms = lambda col: tuple((means[col].fillna(0.0) * 1e3).tolist())
        out.append(ServerSaturation(
            experiment=run.experiment, group=group, servers=int(sub["servers"].iloc[0]), workers=tuple(grid),
            steps_per_s=tuple(means["steps_per_s"].tolist()),
            step_ms=tuple((means.index / means["steps_per_s"] * 1e3).tolist()),
            compute_ms=ms("compute_mean_s"), push_ms=ms("push_mean_s"), queue_ms=ms("queue_mean_s"),
            train_knee=sparse_knee(grid, means["steps_per_s"].tolist()), model=model,
            predicted_train_knee=predicted, model_knee=model_knee, server_utilization=util))
    return sorted(out, key=lambda s: s.servers)


def _knee_shift(sharded: list[ServerSaturation], attr: str) -> str:
    """How a knee moves with the shard count, in words ('none' counts as past the grid)."""
    knees = [getattr(s, attr) for s in sharded]
    pos = [float("inf") if k is None else k for k in knees]
    listed = "; ".join(f"S={s.servers}: {_knee_text(k, s.workers)}" for s, k in zip(sharded, knees))
    if all(k is None for k in knees):
        return f"no knee for any shard count ({listed})"
    if all(p == pos[0] for p in pos):
        return f"does not move ({listed})"
    if all(a <= b for a, b in zip(pos, pos[1:])):
        return f"moves right with more shards ({listed})"
    if all(a >= b for a, b in zip(pos, pos[1:])):
        return f"moves left with more shards ({listed})"
    return f"moves both ways ({listed})"


@dataclasses.dataclass(frozen=True)
class Findings:
    """The numbers behind the study's three findings, from the reproduction experiments' runs."""
    sequential_io: list[InitScaling]      # (a): paper_cntk
    saturation: list[ServerSaturation]    # (b): paper_cntk
    parallel_io: list[InitScaling]        # (c), first fix: fix_parallel_io
    sharded: list[ServerSaturation]       # (c), second fix: fix_sharded_ps

    def parallel_io_text(self) -> str:
        """The first fix against the sequential runs, worker count by worker count."""
        lines = [f.describe() for f in self.parallel_io]
        if self.sequential_io and self.parallel_io:
            seq, par = self.sequential_io[0], self.parallel_io[0]
            common = [n for n in par.workers if n in seq.workers]
            lines.append("Init time, sequential full reads vs parallel sharded reads: " + "; ".join(
                f"{_workers(n)}: {seq.init_s[seq.workers.index(n)]:.3g} s vs {par.init_s[par.workers.index(n)]:.3g} s"
                for n in common) + ".")
        return "\n".join(lines)

    def sharded_text(self) -> str:
        """The second fix: each shard count's numbers and how the knees move."""
        lines = [s.describe() for s in self.sharded]
        lines.append(f"The measured train knee {_knee_shift(self.sharded, 'train_knee')}.")
        if any(s.model_knee is not None for s in self.sharded):
            lines.append(f"The {self.sharded[0].model} model's own knee {_knee_shift(self.sharded, 'model_knee')}.")
        return "\n".join(lines)


def finding_numbers(runs: dict[str, RunData], model: str = "queueing") -> Findings:
    """``runs``: the loaded run of each of ``PAPER_EXPERIMENTS`` (by experiment name)."""
    missing = [name for name in PAPER_EXPERIMENTS if name not in runs]
    if missing:
        raise UserError(f"finding_numbers needs a run of {', '.join(missing)}")
    return Findings(sequential_io=init_scaling(runs["paper_cntk"]),
                    saturation=server_saturation(runs["paper_cntk"], model),
                    parallel_io=init_scaling(runs["fix_parallel_io"]),
                    sharded=server_saturation(runs["fix_sharded_ps"], model))
