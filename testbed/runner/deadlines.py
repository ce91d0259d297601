"""Default deadlines: how long a config may run before it is stopped as ``timed_out``.

A config's ``deadline_s`` wins. Otherwise, when a hardware profile is at hand (``testbed
validate`` has one), the deadline is ``deadline_margin`` times the queueing model's
predicted time of the config (setup is not modelled; the slack covers it and restarts)
plus ``DEADLINE_SLACK_S``. Without a profile (plain ``testbed run``) there is no default
deadline: only barrier waits time out (docs/reliability.md).
"""

from __future__ import annotations

import math
from typing import Sequence

from testbed.config.spec import DEADLINE_SLACK_S, RunConfig
from testbed.model.profile import HardwareProfile

__all__ = ["default_deadlines", "deadline_from_prediction"]


def deadline_from_prediction(predicted_s: float, margin: float) -> float:
    """``margin`` x the prediction + the slack; just the slack when the model has no finite answer."""
    if not math.isfinite(predicted_s) or predicted_s < 0:
        return DEADLINE_SLACK_S
    return margin * predicted_s + DEADLINE_SLACK_S


def default_deadlines(configs: Sequence[RunConfig], profile: HardwareProfile) -> dict[str, float]:
    """Config id -> default deadline in seconds, for the configs that set no ``deadline_s``."""
    from testbed.model.sweep import predict_configs
    todo = [c for c in configs if c.deadline_s is None]
    if not todo:
        return {}
    frame = predict_configs(todo, profile, "queueing")
    predicted = dict(zip(frame["config_id"], frame["total_s"].astype(float)))
    return {c.config_id: deadline_from_prediction(predicted.get(c.config_id, math.nan), c.deadline_margin)
            for c in todo}
