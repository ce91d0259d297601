"""The numbers behind each of the reference study's findings, computed from loaded runs.

(a) sequential initialization makes init grow with the workers; (b) a single server
saturates past a knee; the fixes (parallel I/O, sharded servers) flatten init and move the
knee right. Every sentence here is conditional on the data: the wording follows what was
measured, never the expected outcome. Used by ``notebooks/paper_reproduction.ipynb``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import pandas as pd

from testbed.analysis.notebook import PAPER_EXPERIMENTS, RunData
from testbed.config.errors import UserError

__all__ = ["InitScaling", "ServerSaturation", "Findings", "init_scaling", "server_saturation", "finding_numbers"]


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
    from testbed.analysis.compare import MODELS, sparse_knee
    from testbed.analysis.validation import init_fit
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
    from testbed.analysis.compare import sparse_knee
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
