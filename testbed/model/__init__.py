"""The analytic performance model: a run config and a hardware profile in, a prediction out.

Pure: numpy, SimPy and the standard library (plus ``testbed.model.profile`` and ``testbed.config.errors``,
which are pure too); importing it never imports Ray or pydantic. docs/model.md states
every symbol, equation and assumption.

- ``predict(config, profile, family)`` -> ``Prediction`` for one family;
  ``predict_all(config, profile, families)`` for several side by side.
- ``ModelFamily``: initial, updated, queueing, simulated (a SimPy simulation of the protocol,
  ``simulation.py``; SimPy is pure Python). ``Bound``: disk, server, network, compute.
- ``solve_mva`` and ``Centre``: the exact mean value analysis underneath the queueing family.
"""

from testbed.model.curves import CallCosts, SizeCurve
from testbed.model.families import Bound, ModelFamily, ScalingCurve, scaling_curve
from testbed.model.jitter import expected_max_factor
from testbed.model.knee import asymptotic_knee, marginal_knee
from testbed.model.mva import Centre, CentreKind, MvaResult, solve_mva, throughput_bounds
from testbed.model.prediction import PHASES, Prediction, predict, predict_all
from testbed.model.terms import StepTerms, extrapolated, init_seconds, step_terms, steps_per_worker

__all__ = [
    "predict", "predict_all", "Prediction", "PHASES", "ModelFamily", "Bound",
    "ScalingCurve", "scaling_curve", "StepTerms", "step_terms", "init_seconds", "steps_per_worker", "extrapolated",
    "SizeCurve", "CallCosts",
    "Centre", "CentreKind", "MvaResult", "solve_mva", "throughput_bounds",
    "asymptotic_knee", "marginal_knee", "expected_max_factor",
]
