"""Timing events: the one thing the testbed records.

``TimingEvent`` is the record type; ``EVENT_SCHEMA`` declares its columns once and
the Arrow schema, the table export and the Chrome-trace export are derived from it.
Actors record through ``EventRecorder``, which keeps the fields that are constant
for an actor (run, config, repeat, actor, role, node) once and the per-event fields
in compact typed arrays, so recording costs a few appends and about 48 bytes an
event. ``EventRecorder.timed`` is the one helper that times a phase.

Clocks: ``start_ns`` is wall-clock (``time.time_ns``) so that events of different
actors can be put on one time line; ``duration_ns`` comes from the monotonic
``perf_counter_ns`` so durations are immune to clock steps. Both clocks can be
passed in (tests use fake ones).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from array import array
from typing import Any, Callable

__all__ = [
    "DEFAULT_INTERVAL_S",
    "Phase", "Role", "TimingEvent", "EventRecorder", "EVENT_SCHEMA", "events_to_columns",
    "concat_columns", "columns_to_events", "RESOURCE_SCHEMA", "export_phases", "export_durations_ns",
]


class Phase(str, enum.Enum):
    """What an interval of an actor's time was spent on."""
    SETUP = "setup"          # driver: creating the actors until all are ready
    INIT = "init"            # driver: the whole initialization phase
    TRAIN = "train"          # driver: the whole training phase
    INIT_READ = "init_read"  # worker: reading its initial data
    INIT_WAIT = "init_wait"  # worker: waiting for the I/O gate's token
    READ = "read"            # worker: a step's input read
    COMPUTE = "compute"      # worker: a step's compute
    PUSH = "push"            # worker: pushing a gradient until every shard acknowledged
    PULL = "pull"            # worker: pulling the parameters from every shard
    BARRIER = "barrier"      # worker: waiting for other workers (sync, ssp)
    QUEUE = "queue"          # server: a push waiting for the shard to be free
    APPLY = "apply"          # server: applying one gradient in place
    CHECKPOINT = "checkpoint"  # server: writing its parameters and version to the run folder
    RESTART = "restart"      # worker or server: from its crash until the restarted actor resumed (lost time)
    # Shaped links only (docs/network.md); part of the worker's push and pull, as queue and apply are.
    LINK_IN = "link_in"      # server: a pushed slice crossing its inbound link (its share, then the latency)
    LINK_OUT = "link_out"    # server: a slice it serves to a pull crossing its outbound link
    # Of a step's read, the time the worker's thread waited for a core (``records.runqueue``;
    # Linux only, else not recorded): its start is the read's, its duration the wait.
    READ_RUNQ = "read_runq"  # worker


class Role(str, enum.Enum):
    DRIVER = "driver"
    WORKER = "worker"
    SERVER = "server"
    GATE = "gate"
    MONITOR = "monitor"


_PHASES = list(Phase)
_PHASE_CODE = {p: i for i, p in enumerate(_PHASES)}

# The schema, declared once: (column, arrow type name, python type). Constant columns first.
EVENT_SCHEMA: tuple[tuple[str, str, type], ...] = (
    ("run_id", "string", str),
    ("config_id", "string", str),
    ("repeat", "int32", int),
    ("actor", "string", str),
    ("role", "string", str),
    ("node", "string", str),
    ("phase", "string", str),
    ("step", "int64", int),
    ("start_ns", "int64", int),
    ("duration_ns", "int64", int),
    ("bytes", "int64", int),
    ("staleness", "int64", int),
)

# The node monitors' samples (actors.monitor), declared once like the events: (column, arrow type name).
# The run folder's resources.parquet has these columns.
# The node monitors' default sampling interval (the runner and the CLI share it).
DEFAULT_INTERVAL_S = 0.2

RESOURCE_SCHEMA: tuple[tuple[str, str], ...] = (
    ("node", "string"),
    ("config_id", "string"),
    ("repeat", "int32"),
    ("time_ns", "int64"),              # wall clock of the node (time.time_ns)
    ("cpu_percent", "float64"),        # all cores: 100 means every core busy
    ("memory_used_bytes", "int64"),
    ("memory_percent", "float64"),
    ("disk_read_bytes_per_s", "float64"),
    ("disk_write_bytes_per_s", "float64"),
    ("net_sent_bytes_per_s", "float64"),
    ("net_recv_bytes_per_s", "float64"),
    # All cores: the share of the interval the hypervisor ran something else while this node's
    # CPUs wanted to run (Linux "steal"); NaN where the source does not report it. Folders made
    # before it read NaN here.
    ("cpu_steal_percent", "float64"),
)

_CONSTANT = ("run_id", "config_id", "repeat", "actor", "role", "node")
_VARYING = ("phase", "step", "start_ns", "duration_ns", "bytes", "staleness")


@dataclasses.dataclass(frozen=True, slots=True)
class TimingEvent:
    """One timed interval of one actor. ``step`` is -1 outside the step loop; ``staleness``
    is -1 except on server ``apply`` events, where it is the server's version minus the
    version the pushing worker last pulled."""
    run_id: str
    config_id: str
    repeat: int
    actor: str
    role: str
    node: str
    phase: str
    step: int
    start_ns: int
    duration_ns: int
    bytes: int = 0
    staleness: int = -1

    def __post_init__(self) -> None:
        if self.duration_ns < 0:
            raise ValueError(f"duration_ns must be >= 0, got {self.duration_ns}")
        if self.bytes < 0:
            raise ValueError(f"bytes must be >= 0, got {self.bytes}")
        Phase(self.phase)
        Role(self.role)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


class EventRecorder:
    """Buffers one actor's events in memory until the driver collects them."""

    def __init__(self, *, run_id: str, config_id: str, repeat: int, actor: str, role: Role | str,
                 node: str = "", wall_ns: Callable[[], int] = time.time_ns,
                 mono_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.constants = {"run_id": run_id, "config_id": config_id, "repeat": int(repeat),
                          "actor": actor, "role": Role(role).value, "node": node}
        self._wall_ns = wall_ns
        self._mono_ns = mono_ns
        self._phase = array("b")
        self._step = array("q")
        self._start = array("q")
        self._dur = array("q")
        self._bytes = array("q")
        self._stale = array("q")

    def __len__(self) -> int:
        return len(self._phase)

    def record(self, phase: Phase, step: int, start_ns: int, duration_ns: int,
               nbytes: int = 0, staleness: int = -1) -> None:
        """Record an interval measured by the caller (e.g. a server's queue wait)."""
        self._phase.append(_PHASE_CODE[phase])
        self._step.append(step)
        self._start.append(start_ns)
        self._dur.append(duration_ns)
        self._bytes.append(nbytes)
        self._stale.append(staleness)

    def timed(self, phase: Phase, step: int = -1, nbytes: int = 0) -> "_Timed":
        """Time the body (``with rec.timed(...):``) as one event of ``phase``; the event is
        recorded even if the body raises."""
        return _Timed(self, phase, step, nbytes)

    def now(self) -> tuple[int, int]:
        """(wall-clock ns, monotonic ns), for callers that time an interval by hand."""
        return self._wall_ns(), self._mono_ns()

    def mono_ns(self) -> int:
        return self._mono_ns()

    def export(self) -> dict[str, Any]:
        """The events as columns (constants once, varying fields as arrays); cheap to ship.

        Safe while another thread records (a deadline asks a worker for its events mid-step):
        ``record`` appends the staleness last, so the first ``len(staleness)`` entries of every
        column are complete events, and slicing an array is atomic under the GIL."""
        n = len(self._stale)
        return {"constants": dict(self.constants), "phase": self._phase[:n].tobytes(), "step": self._step[:n],
                "start_ns": self._start[:n], "duration_ns": self._dur[:n], "bytes": self._bytes[:n],
                "staleness": self._stale[:n]}

    def restore(self, exported: dict[str, Any]) -> None:
        """Put back events exported earlier (by the process of this actor that crashed) before any new ones."""
        for name, arr in (("phase", self._phase), ("step", self._step), ("start_ns", self._start),
                          ("duration_ns", self._dur), ("bytes", self._bytes), ("staleness", self._stale)):
            old = array(arr.typecode)
            if name == "phase":
                old.frombytes(exported[name])
            else:
                old.extend(exported[name])
            arr[:0] = old

    def clear(self) -> None:
        for a in (self._phase, self._step, self._start, self._dur, self._bytes, self._stale):
            del a[:]

    def events(self) -> list[TimingEvent]:
        return columns_to_events(events_to_columns([self.export()]))


class _Timed:
    """The context manager behind ``EventRecorder.timed``: a plain class, not a generator
    (``contextlib.contextmanager`` costs ~1 us more per event, on the worker's hot path)."""
    __slots__ = ("_rec", "_phase", "_step", "_nbytes", "_start", "_t0")

    def __init__(self, rec: EventRecorder, phase: Phase, step: int, nbytes: int) -> None:
        self._rec, self._phase, self._step, self._nbytes = rec, phase, step, nbytes

    def __enter__(self) -> None:
        self._start = self._rec._wall_ns()
        self._t0 = self._rec._mono_ns()

    def __exit__(self, *exc: object) -> bool:
        rec = self._rec
        rec.record(self._phase, self._step, self._start, rec._mono_ns() - self._t0, self._nbytes)
        return False


def export_phases(export: dict[str, Any]) -> list[Phase]:
    """The phase of each event of one recorder export (the one decoder of its phase codes)."""
    return [_PHASES[c] for c in array("b", export["phase"])]


def export_durations_ns(export: dict[str, Any], phase: Phase) -> list[int]:
    """The durations of one recorder export's events of ``phase``, in recording order."""
    return [d for p, d in zip(export_phases(export), export["duration_ns"]) if p is phase]


def events_to_columns(exports: list[dict[str, Any]]) -> dict[str, list]:
    """Merge recorder exports into plain columns named as in ``EVENT_SCHEMA``."""
    cols: dict[str, list] = {name: [] for name, _, _ in EVENT_SCHEMA}
    for ex in exports:
        n = len(ex["step"])
        for key in _CONSTANT:
            cols[key].extend([ex["constants"][key]] * n)
        cols["phase"].extend(p.value for p in export_phases(ex))
        for key in _VARYING[1:]:
            cols[key].extend(ex[key])
    return cols


def concat_columns(parts: list[dict[str, list]]) -> dict[str, list]:
    out: dict[str, list] = {name: [] for name, _, _ in EVENT_SCHEMA}
    for part in parts:
        for name in out:
            out[name].extend(part[name])
    return out


def columns_to_events(cols: dict[str, list]) -> list[TimingEvent]:
    names = [name for name, _, _ in EVENT_SCHEMA]
    return [TimingEvent(*row) for row in zip(*(cols[n] for n in names))]
