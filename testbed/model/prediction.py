"""One prediction: every phase, the totals, the binding resource and the knee.

``predict(config, profile, family)`` is the model's entry point; ``predict_all`` runs
the families side by side. The field names match the measured summary's columns
(``init_s``, ``train_s``, ``job_s``, ``total_s``, ``steps_per_s``, ``<phase>_mean_s``), so a
prediction and a measurement compare column by column. Pure: numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Optional

import numpy as np

from testbed.model.families import SATURATED, Bound, ModelFamily, scaling_curve
from testbed.model.knee import marginal_knee
from testbed.model.network import link_saturation_workers
from testbed.model.profile import HardwareProfile
from testbed.model.simfamily import simulated_prediction
from testbed.model.stragglers import straggler_compute_factor, straggler_extra_s
from testbed.model.terms import StepTerms, init_seconds, step_terms, steps_per_worker

__all__ = ["Prediction", "PHASES", "predict", "predict_all", "MAX_SEARCH_WORKERS"]

PHASES = ("read", "compute", "push", "pull", "queue", "apply")
MAX_SEARCH_WORKERS = 4097  # the spec allows 4096 workers; the knee search looks one further


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A family's prediction for one config.

    Phase times (``read_s`` ... ``apply_s``) are the mean duration of one event of that
    phase, as measured summaries report ``<phase>_mean_s``; ``step_s`` is one worker's
    step (a pull every ``pull_every`` steps). ``job_s = init_s + train_s`` is the emulated
    job, what the model is judged on; ``total_s`` adds the testbed's own actor start-up
    (``setup_s``), for deadlines and compatibility. ``knee_workers`` is the marginal knee of the
    whole job's rate (work per second of setup + init + train), ``knee_train_workers``
    that of the train phase alone; both None when no knee lies within ``knee_search_max``
    workers (or, for the initial family, ever). ``knee_asymptotic`` is N* (None when the
    family has no saturating resource).
    """
    config_id: str
    model: ModelFamily
    workers: int
    servers: int
    steps: int
    setup_s: float
    setup_modelled: bool
    init_s: float
    train_s: float
    total_s: float
    step_s: float
    steps_per_s: float
    read_s: float
    compute_s: float
    push_s: float
    pull_s: float
    queue_s: float
    apply_s: float
    server_utilization: Optional[float]
    bound: Bound
    knee_workers: Optional[int]
    knee_train_workers: Optional[int]
    knee_asymptotic: Optional[float]
    knee_search_max: int

    def __post_init__(self) -> None:
        for name in ("setup_s", "init_s", "train_s", "total_s", "step_s", "steps_per_s") + tuple(f"{p}_s" for p in PHASES):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"prediction {name} must be finite and >= 0, got {value}")

    @property
    def job_s(self) -> float:
        """The emulated job: init + train (derived, so it can't disagree with them)."""
        return self.init_s + self.train_s

    @property
    def phases(self) -> dict[str, float]:
        """Per-event phase means, keyed by phase name (read, compute, push, pull, queue, apply)."""
        return {p: getattr(self, f"{p}_s") for p in PHASES}

    def to_row(self) -> dict[str, Any]:
        """A flat row with the measured summary's column names (phases as ``<phase>_mean_s``)."""
        row: dict[str, Any] = {
            "config_id": self.config_id, "model": self.model.value, "workers": self.workers,
            "servers": self.servers, "steps": self.steps, "setup_s": self.setup_s if self.setup_modelled else None,
            "init_s": self.init_s, "train_s": self.train_s, "job_s": self.job_s, "total_s": self.total_s,
            "step_s": self.step_s,
            "steps_per_s": self.steps_per_s,
        }
        row.update({f"{p}_mean_s": v for p, v in self.phases.items()})
        row.update({
            "server_utilization": self.server_utilization, "bound": self.bound.value,
            "knee_workers": self.knee_workers, "knee_train_workers": self.knee_train_workers,
            "knee_asymptotic": self.knee_asymptotic, "knee_search_max": self.knee_search_max,
        })
        return row


def _search_limit(t: StepTerms, workers: int) -> int:
    """How far the knee search looks: four times a cheap estimate of N*, at least 64."""
    cycle = t.read_s + t.compute_s + t.worker_extra_s + t.transfer_s + t.server_demand_s + t.links.per_step_s
    bottleneck = max(t.server_demand_s, t.read_s / max(t.read_rate_multipliers),
                     t.cpu_demand_s / t.cores if t.has_cpu_centre else 0.0)
    n_star = cycle / bottleneck if bottleneck > 0 else math.inf
    n_star = min(n_star, link_saturation_workers(cycle, t.links))  # a shard's busier link (inf: unshaped)
    wanted = 64 if not math.isfinite(n_star) else max(64, math.ceil(4 * n_star) + 2)
    return max(workers + 1, min(MAX_SEARCH_WORKERS, wanted))


def _bound(share: dict[Bound, float], utilization: dict[Bound, float], init_s: float) -> Bound:
    """The train phase's binding resource is its most utilised saturated centre, else its
    largest share of the step; the init phase is all disk; the job's is the larger of the two."""
    saturated = {b: u for b, u in utilization.items() if u >= SATURATED}
    train_bound = max(saturated, key=saturated.get) if saturated else max(share, key=share.get)
    job = {train_bound: sum(share.values())}
    job[Bound.DISK] = job.get(Bound.DISK, 0.0) + init_s
    return max(job, key=job.get)


def predict(config: Any, profile: HardwareProfile, family: ModelFamily | str = ModelFamily.QUEUEING,
            *, knee_search_max: Optional[int] = None) -> Prediction:
    """Predict one config (a ``RunConfig`` or ``ConfigFields``) on one profile with one family.

    Raises ``UserError`` when the profile lacks a figure the config needs (disk figures
    for a data set, flops_per_s for matmul).
    """
    family = ModelFamily(family)
    t = step_terms(config, profile)
    big_n = config.workers
    n_max = knee_search_max or _search_limit(t, big_n)
    if n_max <= big_n:
        raise ValueError(f"knee_search_max must exceed the config's workers ({big_n}), got {n_max}")
    if family is ModelFamily.SIMULATED:
        fields = simulated_prediction(config, profile, t, n_max)
        share, utilization = fields.pop("share"), fields.pop("utilization")
        return Prediction(**fields, bound=_bound(share, utilization, fields["init_s"]))
    curve = scaling_curve(family, t, n_max)
    n = np.arange(1, n_max + 1)
    ideal = family is ModelFamily.INITIAL
    init = np.array([init_seconds(config, profile, int(k), ideal=ideal) for k in n])
    setup = np.array([t.setup_s(int(k)) for k in n])
    steps_frac = np.array([steps_per_worker(config, int(k)) for k in n])
    job_rate = n * steps_frac / (setup + init + steps_frac * curve.step_s)
    i = big_n - 1
    steps = int(config.steps)
    # Stragglers (testbed/model/stragglers.py) lengthen the train phase, not the others' steps.
    late = straggler_extra_s(config, t.compute_s, steps, t.sync)
    train = steps * float(curve.step_s[i]) + late
    share = {b: steps * float(v[i]) for b, v in curve.share.items()}
    utilization = {b: float(v[i]) for b, v in curve.utilization.items()}
    modelled_setup = t.setup_per_actor_s is not None or bool(t.setup_points)
    linear = family is ModelFamily.INITIAL and not modelled_setup
    return Prediction(
        config_id=str(getattr(config, "config_id", "")), model=family, workers=big_n, servers=t.servers,
        steps=steps, setup_s=float(setup[i]), setup_modelled=modelled_setup,
        init_s=float(init[i]), train_s=train, total_s=float(setup[i] + init[i]) + train,
        step_s=float(curve.step_s[i]), steps_per_s=big_n / float(curve.step_s[i]),
        read_s=float(curve.read_s[i]),
        compute_s=float(curve.compute_s[i]) * straggler_compute_factor(config, steps, big_n),
        push_s=float(curve.push_s[i]),
        pull_s=float(curve.pull_s[i]), queue_s=float(curve.queue_s[i]), apply_s=float(curve.apply_s[i]),
        server_utilization=utilization.get(Bound.SERVER),
        bound=_bound(share, utilization, float(init[i])),
        # The initial family scales linearly by construction: no knee, whatever rounding says.
        knee_workers=None if linear else marginal_knee(job_rate),
        knee_train_workers=None if family is ModelFamily.INITIAL else marginal_knee(curve.throughput_per_s),
        knee_asymptotic=curve.knee_asymptotic, knee_search_max=n_max,
    )


def predict_all(config: Any, profile: HardwareProfile,
                families: Iterable[ModelFamily | str] = tuple(ModelFamily)) -> list[Prediction]:
    """One prediction per family, in the order given."""
    return [predict(config, profile, f) for f in families]
