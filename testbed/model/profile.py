"""The hardware profile: the figures calibration measures and the model consumes.

Pure dataclasses with JSON load/save (a versioned document). Calibration results
are ordinary records: every figure says where it came from (``source``).

Schema 2 replaced schema 1's free-form ``extra`` dict by typed fields and added the
per-call cost curves (``call_costs``, one ``CallCosts`` per calibrated shard count, and
``reference_curves``); ``HardwareProfile.from_dict`` still reads schema-1 files, moving
each ``extra`` figure to its field (``migrate_v1``). Optional figures added since
(``step_reads``, the paused-read curves; ``scheduler``, the scheduler under load) default to
None, so older schema-2 files load unchanged and the model falls back to what it read before
them.

The model writes no files itself: ``save_profile`` is handed the writer (the callers pass the
testbed's one atomic writer, ``testbed.records.atomic.atomic_write_text``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from testbed.config.errors import UserError
from testbed.model.curves import CallCosts, ReferenceCurves, SizeCurve, coerce_call_costs
from testbed.model.reads import StepReadCosts, coerce_step_reads
from testbed.model.scheduler import SchedulerCosts, coerce_scheduler

__all__ = ["DiskProfile", "HardwareProfile", "StepCpuLine", "interpolate_setup_s", "PROFILE_SCHEMA_VERSION",
           "load_profile", "save_profile", "profile_text", "check_profile_machine", "migrate_v1"]

PROFILE_SCHEMA_VERSION = 2


@dataclasses.dataclass(frozen=True)
class DiskProfile:
    """What the disk under the data directory delivers with the page cache bypassed.

    ``seq_read_bytes_per_s`` maps a number of concurrent sequential readers to the
    aggregate bandwidth they get together (1 -> single-stream bandwidth).
    """
    seq_read_bytes_per_s: dict[int, float]
    block_bytes: int
    rand_read_iops: dict[int, float] = dataclasses.field(default_factory=dict)  # block size -> IOPS
    latency_s: dict[str, float] = dataclasses.field(default_factory=dict)       # "p50", "p99", ...
    directory: str = ""
    fs_type: str = ""
    source: str = "fio"  # "fio", or "testbed-reader" when fio was not available
    # Random 4 KiB reads by k concurrent readers -> the IOPS they get together (empty: not
    # measured, profiles before it; random step reads then share the disk at rate 1).
    rand_read_iops_by_readers: dict[int, float] = dataclasses.field(default_factory=dict)
    # What a worker's init read costs beyond its bytes at the single reader's rate: the first
    # read of a new reader after its process sat idle (``diskio.first_read_times``, median of
    # 7 reads of 2 MiB after 0.1 s each, less their bytes at ``seq_read_bytes_per_s[1]``).
    # 0: not measured (profiles before calibration version 27).
    read_start_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.seq_read_bytes_per_s:
            raise ValueError("seq_read_bytes_per_s needs at least the single-reader figure")
        object.__setattr__(self, "seq_read_bytes_per_s",
                           _by_readers("seq_read_bytes_per_s", self.seq_read_bytes_per_s, "concurrency >= 1 and bandwidth > 0"))
        object.__setattr__(self, "rand_read_iops", {int(k): float(v) for k, v in self.rand_read_iops.items()})
        object.__setattr__(self, "rand_read_iops_by_readers",
                           _by_readers("rand_read_iops_by_readers", self.rand_read_iops_by_readers, "readers >= 1 and IOPS > 0"))
        if not self.read_start_s >= 0:
            raise ValueError(f"read_start_s must be >= 0, got {self.read_start_s!r}")
        object.__setattr__(self, "read_start_s", float(self.read_start_s))

    def aggregate_bandwidth(self, readers: int) -> float:
        """Aggregate bandwidth of ``readers`` concurrent readers, interpolated on the measured
        curve (linear between measured points, flat beyond the last one)."""
        return _at_readers(self.seq_read_bytes_per_s, readers)

    @property
    def single_stream_bytes_per_s(self) -> float:
        return self.aggregate_bandwidth(1)

    def random_rate_multipliers(self) -> tuple[float, ...]:
        """IOPS(j) / IOPS(1) of random reads for j = 1 ... the most readers measured, linear
        between the measured counts; (1.0,) when not measured (one reader's rate however many)."""
        curve = self.rand_read_iops_by_readers
        if 1 not in curve:
            return (1.0,)
        return tuple(_at_readers(curve, j) / curve[1] for j in range(1, max(curve) + 1))


def _by_readers(name: str, curve: dict, required: str) -> dict[int, float]:
    """A curve keyed by concurrent readers, checked and as ints and floats, by readers."""
    for k, v in curve.items():
        if int(k) < 1 or not v > 0:
            raise ValueError(f"{name}[{k}] = {v}: {required} required")
    return {int(k): float(v) for k, v in sorted(curve.items(), key=lambda kv: int(kv[0]))}


def _at_readers(curve: dict[int, float], readers: int) -> float:
    """``curve`` (by readers, ascending) at ``readers``: linear between its points, flat outside."""
    points = list(curve.items())
    if readers <= points[0][0]:
        return points[0][1]
    for (n0, v0), (n1, v1) in zip(points, points[1:]):
        if readers <= n1:
            return v0 + (v1 - v0) * (readers - n0) / (n1 - n0)
    return points[-1][1]


@dataclasses.dataclass(frozen=True)
class StepCpuLine:
    """CPU per step as one straight line in the gradient size (schema 1's figures, kept so
    that old profiles predict as they did; schema 2's ``call_costs`` supersede it).

    A worker's CPU per step is ``worker_per_step_s`` per shard called plus the gradient's
    bytes at ``worker_bytes_per_s`` (0: no per-byte part); the shards' likewise."""
    worker_per_step_s: float
    worker_bytes_per_s: float = 0.0
    server_per_step_s: Optional[float] = None
    server_bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and not (value >= 0 and value < float("inf")):
                raise ValueError(f"step_cpu.{f.name} must be finite and >= 0, got {value}")


# The optional scalar figures (None: not calibrated): each finite and >= 0 when set, and listed
# in profile tables (``HardwareProfile.scalar_figures``, with ``nodes``).
_OPTIONAL_SCALARS = ("object_store_call_s", "actor_call_latency_hot_s", "gradient_fill_bytes_per_s",
                     "server_copy_bytes_per_s", "actor_setup_s", "init_call_s", "actor_call_cpu_s",
                     "actor_call_cpu_busy_s", "actor_caller_cpu_s", "push_return_s")


@dataclasses.dataclass(frozen=True)
class HardwareProfile:
    """Calibrated figures of one machine or cluster (see docs/model.md for which term each feeds)."""
    identity: dict[str, Any]                 # what was measured: hosts, cores, cpu model, ray nodes
    cores_per_node: int
    server_apply_bytes_per_s: float          # in-place w -= lr * g, bytes of g per second
    server_call_overhead_s: float            # fixed cost of one push at the server, beyond the apply
    actor_call_latency_s: float              # round trip of an empty actor call
    transfer_bytes_per_s_local: float        # argument transfer between actors on one node
    flops_per_s: float = 0.0                 # numpy matmul rate (matmul compute mode)
    transfer_bytes_per_s_remote: Optional[float] = None  # between nodes, when there are several
    disk: Optional[DiskProfile] = None       # what the testbed's own reader gets: feeds the model
    disk_reference: Optional[DiskProfile] = None  # the same measurements by fio, for reference
    object_store_call_s: float = 0.0         # L_obj: a slice too large to go inline costs this more per call
    actor_call_latency_hot_s: Optional[float] = None  # L in a tight loop (reference: workers call after a pause)
    # The callee's CPU for one bare actor call: calls after a pause, as the step clock's ticks
    # come (its background included), and calls that queue behind each other (eight in flight)
    # (None: not calibrated; the simulated ssp clock is then a latency alone).
    actor_call_cpu_s: Optional[float] = None
    actor_call_cpu_busy_s: Optional[float] = None
    # The caller's CPU for the same bare calls after a pause (its background included): a
    # worker's side of its tick of the ssp step clock (None: not calibrated; the tick's way
    # there and back is then a wait that takes no core).
    actor_caller_cpu_s: Optional[float] = None
    gradient_fill_bytes_per_s: Optional[float] = None  # G: producing the gradient (untimed work per step)
    server_copy_bytes_per_s: Optional[float] = None    # C: a shard's parameter copy for a pull (None: A)
    step_cpu: Optional[StepCpuLine] = None   # schema 1's CPU per step (superseded by call_costs)
    nodes: Optional[int] = None              # nodes of the cluster (None: len(identity["nodes"]), else 1)
    actor_setup_s: Optional[float] = None    # starting one more actor (when no start-up curve is known)
    init_call_s: Optional[float] = None      # the driver's init call with nothing to read (None: L)
    # A push whose pull is not due (``async`` between pulls, every ``ssp`` step) is a call of its
    # own, timed until its small answer is back: it lasts this much longer than the push part
    # of a push that carries the pull, which ends where the shard was done with the push (None:
    # not calibrated, 0). The answer is an int, so it is one figure, not a curve.
    push_return_s: Optional[float] = None
    # CPU of Ray's own processes (raylet with its object store, GCS, agents) per worker step,
    # against the gradient size: nobody waits for it, but it takes the cores (None: not measured).
    ray_cpu_per_step_s: Optional[SizeCurve] = None
    # What Ray's own processes spend per worker step for each shard beyond the first, against one
    # shard's slice (``costs.ray_cpu_shard_step_from_points``; the raylet holds a slice past the
    # inline limit as an object). None (profiles before calibration version 21): 0.
    ray_cpu_shard_step_s: Optional[SizeCurve] = None
    # Per-call costs across gradient sizes, one record per calibrated shard count (curves.py).
    call_costs: tuple[CallCosts, ...] = ()
    # What a pull that is a call of its own (every ``ssp`` pull) adds per shard beyond the first
    # over the pull part of a push that carries it, against one shard's slice
    # (``costs.plain_pull_step_from_points``). None (profiles before calibration version 20): 0.
    plain_pull_step_s: Optional[SizeCurve] = None
    reference_curves: Optional[ReferenceCurves] = None  # microbenchmarks of the same paths, for reference
    # A step's read as workers do it: direct reads after a pause, over their size (reads.py).
    # None (profiles calibrated before it): the step read is predicted from ``disk``'s figures.
    step_reads: Optional[StepReadCosts] = None
    # Seconds to start k actors at once, for a few k: start-up is not linear in k (each new
    # process slows the others), so setup is interpolated on this curve (``interpolate_setup_s``).
    setup_s_by_actors: dict[int, float] = dataclasses.field(default_factory=dict)
    # Seconds for one call from the driver to k idle actors at once and the wait for all
    # answers, for a few k: the init phase with nothing to read is this call to the worker
    # processes (it grows ~0.6 ms a process here), read with ``interpolate_setup_s``.
    init_fanout_s_by_actors: dict[int, float] = dataclasses.field(default_factory=dict)
    # What a sequential init's I/O gate adds to that call with nothing to read, for a few counts
    # of workers taking the token in turn (each turn: a call that waits for the token, the gate's
    # threads woken, a call that hands it on), read with ``terms.init_gate_s``. Empty (profiles
    # before calibration version 19): two actor-call latencies a worker.
    init_gate_s_by_workers: dict[int, float] = dataclasses.field(default_factory=dict)
    # What hosting t workers in each worker process adds to that call, for a few t (the host
    # hands the call to a thread per worker and waits for them all; one worker runs inline):
    # measured with ``init_hosted_processes`` processes on one node, read with
    # ``terms.init_hosted_s``. Empty (profiles before calibration version 31): nothing.
    init_hosted_s_by_workers: dict[int, float] = dataclasses.field(default_factory=dict)
    init_hosted_processes: int = 0
    # The scheduler under load: how late a spin ends and how long a woken read waits for a core,
    # against CPU-bound processes per core (scheduler.py). None (profiles before it): not modelled.
    scheduler: Optional[SchedulerCosts] = None
    # The worker's figures at the smallest calibrated size at shard counts beyond the curves
    # ({shards: {"worker_push_s": ..., "worker_pull_s": ..., "worker_push_cpu_s": ...,
    # "worker_pull_cpu_s": ...}}): what one call more per shard adds (terms._worker_side).
    small_calls_by_shards: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    # The same figures at ``large_calls_bytes`` (a gradient whose slices go through the object
    # store at those shard counts: each slice's put and get is a call's fixed part again, which
    # the smallest size, all inline, does not hold). Empty (profiles before calibration version
    # 17): the step read at the smallest size serves every size.
    large_calls_by_shards: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    large_calls_bytes: int = 0
    # The same at ``larger_calls_bytes`` (16 MiB): the step past the inline limit grows with the
    # slice, so the terms read it linearly in bytes from the large size on. Empty (profiles
    # before calibration version 23): the large size's step serves every size past the limit.
    larger_calls_by_shards: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    larger_calls_bytes: int = 0
    created: str = ""
    # The 1-minute load average when calibration began (its end says little: its own probes load
    # the machine): figures measured on a busy machine come out slow (a calibration started while
    # another run's processes were exiting read 4 KiB calls 50 % longer than one on a quiet
    # machine a quarter of an hour before).
    load_average: tuple[float, ...] = ()
    # The per-call cost level of the session the runs were made in, against the calibration's
    # (testbed.calibration.level): the check's runs and the ratio each per-call curve was scaled
    # by. None: the curves are the calibration's as measured.
    call_level: Optional[dict[str, Any]] = None
    # The step reads' level of that session against the calibration's curves
    # (testbed.calibration.readlevel): the check's reads and how each order's curves were moved.
    # None: the step-read curves are the calibration's as measured.
    read_level: Optional[dict[str, Any]] = None
    schema_version: int = PROFILE_SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("server_apply_bytes_per_s", "transfer_bytes_per_s_local"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("server_call_overhead_s", "actor_call_latency_s", "flops_per_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.cores_per_node < 1:
            raise ValueError(f"cores_per_node must be >= 1, got {self.cores_per_node}")
        for name in _OPTIONAL_SCALARS:
            value = getattr(self, name)
            if value is not None and not (value >= 0 and value < float("inf")):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        for name in ("gradient_fill_bytes_per_s", "server_copy_bytes_per_s"):
            if getattr(self, name) == 0:  # a rate of 0 means "not measured"
                object.__setattr__(self, name, None)
        if self.nodes is not None:
            if int(self.nodes) < 1:
                raise ValueError(f"nodes must be >= 1, got {self.nodes}")
            object.__setattr__(self, "nodes", int(self.nodes))
        object.__setattr__(self, "setup_s_by_actors", {int(k): float(v) for k, v in self.setup_s_by_actors.items()})
        for name in ("init_fanout_s_by_actors", "init_gate_s_by_workers", "init_hosted_s_by_workers"):
            object.__setattr__(self, name, {int(k): float(v) for k, v in getattr(self, name).items()})
        for name in ("disk", "disk_reference"):
            if isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, DiskProfile(**getattr(self, name)))
        if isinstance(self.step_cpu, dict):
            object.__setattr__(self, "step_cpu", StepCpuLine(**self.step_cpu))
        if isinstance(self.reference_curves, dict):
            object.__setattr__(self, "reference_curves", ReferenceCurves(**self.reference_curves))
        object.__setattr__(self, "call_costs", coerce_call_costs(self.call_costs))
        object.__setattr__(self, "step_reads", coerce_step_reads(self.step_reads))
        object.__setattr__(self, "scheduler", coerce_scheduler(self.scheduler))
        object.__setattr__(self, "load_average", tuple(float(x) for x in self.load_average))
        for name in ("small_calls_by_shards", "large_calls_by_shards", "larger_calls_by_shards"):
            object.__setattr__(self, name, {int(k): {str(n): float(v) for n, v in figures.items()}
                                            for k, figures in getattr(self, name).items()})
        object.__setattr__(self, "large_calls_bytes", int(self.large_calls_bytes))
        object.__setattr__(self, "larger_calls_bytes", int(self.larger_calls_bytes))
        for name in ("ray_cpu_per_step_s", "ray_cpu_shard_step_s", "plain_pull_step_s"):
            if isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, SizeCurve(**getattr(self, name)))

    def scalar_figures(self) -> dict[str, float]:
        """The optional scalar figures that are set, by name (for profile tables)."""
        # ``nodes`` in its place among them, as the tables have always listed it
        names = (*_OPTIONAL_SCALARS[:4], "nodes", *_OPTIONAL_SCALARS[4:])
        out = {name: float(getattr(self, name)) for name in names if getattr(self, name) is not None}
        if self.step_cpu is not None:
            out.update({f"step_cpu.{f.name}": float(getattr(self.step_cpu, f.name))
                        for f in dataclasses.fields(self.step_cpu) if getattr(self.step_cpu, f.name) is not None})
        return out

    def call_costs_for(self, shards: int) -> Optional[CallCosts]:
        """The curves calibrated at the largest shard count not above ``shards`` (the
        smallest one when all are above); None when the profile has none."""
        if not self.call_costs:
            return None
        below = [c for c in self.call_costs if c.shards <= shards]
        return below[-1] if below else self.call_costs[0]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HardwareProfile":
        data = dict(data)
        version = data.get("schema_version", 1)
        if version > PROFILE_SCHEMA_VERSION:
            raise ValueError(f"profile schema version {version} is newer than this testbed understands "
                             f"({PROFILE_SCHEMA_VERSION}); upgrade ddnn-testbed")
        if version == 1:
            data = migrate_v1(data)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown profile fields: {', '.join(sorted(unknown))}")
        return cls(**data)


# Schema 1's ``extra`` keys and the schema-2 field each moved to.
_V1_EXTRA = {"object_store_call_s": "object_store_call_s", "actor_call_latency_hot_s": "actor_call_latency_hot_s",
             "gradient_fill_bytes_per_s": "gradient_fill_bytes_per_s",
             "server_copy_bytes_per_s": "server_copy_bytes_per_s", "nodes": "nodes", "actor_setup_s": "actor_setup_s"}
_V1_STEP_CPU = {"worker_cpu_per_step_s": "worker_per_step_s", "worker_cpu_bytes_per_s": "worker_bytes_per_s",
                "server_cpu_per_step_s": "server_per_step_s", "server_cpu_bytes_per_s": "server_bytes_per_s"}


def migrate_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 profile document as schema 2: each ``extra`` figure moves to its typed field
    (the four CPU-per-step figures to ``step_cpu``). An unknown ``extra`` key is an error
    naming it: a figure the model would silently stop reading."""
    data = dict(data)
    extra = dict(data.pop("extra", None) or {})
    unknown = set(extra) - set(_V1_EXTRA) - set(_V1_STEP_CPU)
    if unknown:
        raise ValueError(f"unknown figures in the schema-1 'extra': {', '.join(sorted(unknown))}")
    for key, field in _V1_EXTRA.items():
        if key in extra:
            data[field] = extra[key]
    step_cpu = {field: float(extra[key]) for key, field in _V1_STEP_CPU.items() if key in extra}
    if "worker_per_step_s" in step_cpu:
        data["step_cpu"] = step_cpu
    data["schema_version"] = PROFILE_SCHEMA_VERSION
    return data


def interpolate_setup_s(points: Sequence[tuple[int, float]], actors: int) -> Optional[float]:
    """Seconds to start ``actors`` actors on a measured (actors, seconds) curve: linear between
    the measured counts, extended beyond them along the nearest segment; None without points."""
    points = sorted(points)
    if not points:
        return None
    if len(points) == 1:
        k, t = points[0]
        return t * actors / k
    for (k0, t0), (k1, t1) in zip(points, points[1:]):
        if actors <= k1 or (k1, t1) == points[-1]:
            return max(0.0, t0 + (t1 - t0) * (actors - k0) / (k1 - k0))
    raise AssertionError("unreachable")


def profile_text(profile: HardwareProfile) -> str:
    """The profile as its JSON document."""
    return json.dumps(profile.to_dict(), indent=2, sort_keys=True) + "\n"


def save_profile(profile: HardwareProfile, path: str | Path, write: Callable[[Path, str], Any]) -> Path:
    """Write the profile to ``path`` with ``write(path, text)`` (the caller's atomic writer)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, profile_text(profile))
    return path


def load_profile(path: str | Path) -> HardwareProfile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such profile; make one with `testbed calibrate --out {path}`") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: the profile is not valid JSON ({err}); re-create it with `testbed calibrate --recalibrate`") from None
    try:
        return HardwareProfile.from_dict(data)
    except (TypeError, ValueError) as err:
        raise UserError(f"{path}: not a usable hardware profile ({err}); re-create it with `testbed calibrate --recalibrate`") from None


def check_profile_machine(profile: HardwareProfile, path: str | Path, host: str, cpu_model: Optional[str],
                          where: str) -> None:
    """Refuse a profile measured on another machine than ``host`` (and ``cpu_model``, when
    given): its figures would predict the wrong hardware. A profile without an identity passes."""
    theirs_host = profile.identity.get("host")
    theirs_cpu = profile.identity.get("cpu_model")
    if theirs_host is None:
        return
    if theirs_host != host or (cpu_model is not None and theirs_cpu not in (None, cpu_model)):
        raise UserError(f"{path}: this profile was measured on host {theirs_host!r} ({theirs_cpu}), not on {where} "
                        f"(host {host!r}{f', {cpu_model}' if cpu_model else ''}); calibrate there with "
                        f"`testbed calibrate`, or leave out --profile")
