"""How long a sweep will take at least, and the limit above which it must be asked for.

A sweep is a Cartesian product: one more key of ten values makes ten times the runs, and a
typo in a list (``range`` pasted as a thousand seeds) turns a coffee break into a week. Above
``LARGE_SWEEP_RUNS`` config runs (configs x repeats) the CLI refuses unless ``--large-sweep``
says it is meant, and prints the estimate either way.

The estimate is a lower bound read off the spec alone, with no hardware profile: per step,
the longer of a worker's compute (``compute.seconds``; matmul's duration depends on the
hardware and is not counted) and a shard's applies (each of the N workers' slices costs
``apply_seconds / servers``, one after another). Actor start-up, data preparation and
transfers come on top. Pure: the spec module only.
"""

from __future__ import annotations

from typing import Sequence

from testbed.config.errors import UserError
from testbed.config.spec import ComputeMode, ConfigFields, ExperimentSpec, expand, sweep_configs
from testbed.config.units import format_seconds

__all__ = ["LARGE_SWEEP_RUNS", "config_runs", "lower_bound_run_s", "check_sweep_size", "describe_estimate"]

# About a working day of runs for configs of a few seconds each.
LARGE_SWEEP_RUNS = 500


def config_runs(spec: ExperimentSpec) -> int:
    """Config repeats the spec asks for: configs x repeats (counted without expanding)."""
    return sweep_configs(spec.sweep) * spec.repeats


def _step_lower_bound_s(cfg: ConfigFields) -> float:
    compute_s = cfg.compute.seconds if cfg.compute.mode is not ComputeMode.MATMUL else 0.0
    applies_s = cfg.workers * cfg.apply_seconds / cfg.servers
    return max(compute_s, applies_s)


def lower_bound_run_s(configs: Sequence[ConfigFields], repeats: int) -> float:
    """The least time the configs' training steps take, ``repeats`` times each."""
    return repeats * sum(cfg.steps * _step_lower_bound_s(cfg) for cfg in configs)


def describe_estimate(spec: ExperimentSpec) -> str:
    """'N config runs (C configs x R repeats), at least T of training steps (...)'."""
    configs = expand(spec)
    seconds = lower_bound_run_s(configs, spec.repeats)
    return (f"{len(configs) * spec.repeats} config runs ({len(configs)} configs x {spec.repeats} repeats), "
            f"estimated at least {format_seconds(seconds)} ({seconds / 3600:.1f} h) of training steps "
            f"(steps x compute.seconds or the shards' applies; start-up and data preparation come on top)")


def check_sweep_size(spec: ExperimentSpec, large_sweep: bool) -> str:
    """Refuse a spec of more than ``LARGE_SWEEP_RUNS`` config runs unless ``large_sweep``;
    returns the estimate to show (empty for a spec within the limit)."""
    if config_runs(spec) <= LARGE_SWEEP_RUNS:
        return ""
    estimate = describe_estimate(spec)
    if not large_sweep:
        raise UserError(f"the spec asks for {estimate}: more than {LARGE_SWEEP_RUNS} config runs; pass --large-sweep "
                        f"to run it all the same, or sweep fewer values or repeats")
    return estimate
