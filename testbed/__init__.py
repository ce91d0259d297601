"""ddnn-testbed: emulate parameter-server training on Ray, measure every phase,
predict every phase with an analytic model, and compare the two.

Terms used the same way everywhere in this package:

- *experiment*: one spec file (``ExperimentSpec``); expands into run configs.
- *config*: one point of the sweep (``RunConfig``), with a stable ``config_id``.
- *repeat*: one execution of a config; a config runs ``repeats`` times.
- *phase*: a timed interval of one actor (``Phase``): setup, init_read, init_wait,
  read, compute, push, pull, queue, apply, barrier.
- *event*: one ``TimingEvent``, the only thing that is recorded; all summaries
  are derived from events.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
