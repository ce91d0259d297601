"""Helpers shared by the unit tests that drive the actors' plain classes."""

from testbed.config.spec import expand, parse_spec
from testbed.records.events import EventRecorder


def config(**fields):
    """A small validated run config (6 steps, 1 ms compute, 4 KiB gradients) with ``fields`` changed."""
    base = {"name": "t", "workload": {"steps": 6}, "compute": {"seconds": "1ms"}, "gradient_bytes": "4KiB"}
    base.update(fields)
    return expand(parse_spec(base))[0]


def rec(actor, role):
    """An event recorder for one actor of run r, config c."""
    return EventRecorder(run_id="r", config_id="c", repeat=0, actor=actor, role=role)
