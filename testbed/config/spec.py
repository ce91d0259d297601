"""Experiment specs: load a YAML file, validate it, expand its sweep into run configs.

Pure: pydantic, PyYAML and the standard library; no Ray, no file system beyond
reading the file handed in. Every choice is a string enum, every size accepts
units (``64KiB``), every duration too (``50ms``). Unknown fields and impossible
values raise ``UserError`` naming the field, the value and what is allowed.

An ``ExperimentSpec`` holds the knobs of one run config plus ``name``,
``repeats`` and ``sweep``; ``expand(spec)`` returns one validated ``RunConfig``
per point of the Cartesian product of the sweep lists, each with a stable id.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Annotated, Any, Optional

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from testbed.config.choices import ComputeMode, InitIO, JitterDist, Partition, PlacementStrategy, StepReads, SyncMode
from testbed.config.errors import UserError
from testbed.config.faults import Fault, check_faults
from testbed.config.presets import fill_from_preset
from testbed.config.units import format_bytes, not_a_boolean, parse_bits_per_s, parse_bytes, parse_seconds
from testbed.config.yaml_budget import MAX_SPEC_BYTES, YamlTooLarge, safe_load

__all__ = [
    "ComputeMode", "SyncMode", "InitIO", "Partition", "StepReads", "JitterDist", "PlacementStrategy",
    "Jitter", "Compute", "Workload", "Data", "Placement", "LinkShape", "Network", "ConfigFields", "ExperimentSpec",
    "RunConfig",
    "load_spec", "parse_spec", "expand", "apply_overrides", "DEFAULT_DATA_DIR", "DEFAULT_BARRIER_TIMEOUT_S",
    "DEADLINE_SLACK_S", "spec_diff", "with_reliability_defaults", "MAX_STEPS", "MAX_FLOPS", "MAX_SWEEP_CONFIGS",
    "MIN_DEADLINE_S", "sweep_configs", "field_at",
]

DEFAULT_DATA_DIR = "~/.cache/ddnn-testbed/data"

# How long a worker may wait at a barrier (sync, ssp) when the config sets no deadline:
# long enough for any laptop-sized step, short enough that a lost worker ends the run.
DEFAULT_BARRIER_TIMEOUT_S = 300.0

# Added to margin x predicted time for a config's default deadline: actor start-up, restarts.
DEADLINE_SLACK_S = 60.0

# Fields added after the first ids were issued (reliability, network, virtual workers), left out of a config's id
# while they hold their defaults, so configs that don't use them keep the ids they had before
# these fields existed; a resumed run folder's older spec gets them filled in (preset too).
_UNSHAPED = {"bandwidth": None, "latency": 0.0}
_ID_OMITS_DEFAULTS = {"faults": [], "checkpoint_every": 0, "restarts": 1, "deadline_margin": 10.0,
                      "network": {**_UNSHAPED, "same_node": _UNSHAPED}, "preset": None, "preset_scale": 1.0,
                      "workers_per_process": None}

# The most steps a worker may run, whether given as workload.steps or derived from epochs.
MAX_STEPS = 10_000_000

# The most FLOPs one matmul step may ask for: its three n x n float32 buffers are then 3.5 GB
# per worker (n = 17,100), and a step takes minutes on one core.
MAX_FLOPS = 1e13

# The most configs a sweep may expand to, whatever --large-sweep says: expanding and
# validating them is itself work and memory (the run-time limit is testbed.config.sweep_size's).
MAX_SWEEP_CONFIGS = 10_000

# Deadlines (and the monitors' interval) below this are typos: nothing the testbed times is shorter.
MIN_DEADLINE_S = 1e-3

# Numbers that refuse booleans (workers: true is not 1). Otherwise pydantic's usual reading:
# 4.0 is the int 4, 4.5 is no int, and '2e8' is a float (YAML 1.1 reads 2e8 without a dot as a string).
Int = Annotated[int, BeforeValidator(not_a_boolean)]
Float = Annotated[float, BeforeValidator(not_a_boolean)]
Bytes = Annotated[int, BeforeValidator(parse_bytes)]
Seconds = Annotated[float, BeforeValidator(parse_seconds)]
BitsPerSecond = Annotated[float, BeforeValidator(parse_bits_per_s)]


class _Strict(BaseModel):
    # Numbers must be finite: an infinite or NaN value passes every bound check silently.
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, allow_inf_nan=False)


class Jitter(_Strict):
    """Multiplicative noise on each step's compute time, drawn from the worker's seeded generator.

    ``cv`` is the coefficient of variation (standard deviation over mean); the mean stays 1.
    """
    distribution: JitterDist = JitterDist.NONE
    cv: Float = Field(0.0, ge=0.0, le=5.0)


class Compute(_Strict):
    mode: ComputeMode = ComputeMode.SLEEP
    seconds: Seconds = Field(0.01, ge=0.0, le=3600.0, description="per-step compute time (sleep, spin)")
    flops: Float = Field(0.0, ge=0.0, le=MAX_FLOPS, description="per-step floating-point operations (matmul)")
    jitter: Jitter = Jitter()

    @model_validator(mode="after")
    def _mode_needs_its_amount(self) -> "Compute":
        if self.mode is ComputeMode.MATMUL and self.flops <= 0:
            raise ValueError("compute.mode 'matmul' needs compute.flops > 0 (e.g. flops: 2e8)")
        return self


class Workload(_Strict):
    """How much work a worker does.

    Weak scaling: ``steps`` per worker, whatever the worker count. Strong scaling:
    ``epochs`` over a data set of ``dataset_bytes``, split over the workers, so a
    worker runs ceil(epochs * dataset_bytes / (minibatch * sample_bytes) / workers) steps.
    """
    steps: Optional[Int] = Field(None, ge=1, le=MAX_STEPS)
    epochs: Optional[Float] = Field(None, gt=0.0, le=10_000.0)
    dataset_bytes: Bytes = Field(0, ge=0, le=2**50)
    sample_bytes: Bytes = Field(4096, ge=1, le=2**34)
    minibatch: Int = Field(32, ge=1, le=10_000_000)

    @model_validator(mode="after")
    def _one_of_steps_or_epochs(self) -> "Workload":
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of workload.steps (weak scaling) or workload.epochs (strong scaling)")
        if self.epochs is not None and self.dataset_bytes <= 0:
            raise ValueError("workload.epochs needs workload.dataset_bytes > 0")
        return self

    def steps_per_worker(self, workers: int) -> int:
        if self.steps is not None:
            return self.steps
        samples = self.epochs * self.dataset_bytes / self.sample_bytes
        return max(1, math.ceil(samples / self.minibatch / workers))


class Data(_Strict):
    """The synthetic data set that workers read (nothing is read when ``workload.dataset_bytes`` is 0)."""
    dir: str = DEFAULT_DATA_DIR
    file_bytes: Bytes = Field(16 * 2**20, ge=4096, le=2**40)
    block_bytes: Bytes = Field(2**20, ge=4096, le=2**30)
    init_io: InitIO = InitIO.PARALLEL
    partition: Partition = Partition.SHARD
    step_reads: StepReads = StepReads.NONE
    allow_cached: bool = False
    shared: bool = False
    # One untimed pass over the node's data set before each config repeat's timed phases, so
    # every run finds the storage under the page cache (a virtual disk's host cache) in one
    # state, the one calibration measured; false for a data set too large to read twice
    # (docs/model.md, "The disk in the state calibration measured": a data set not read for a
    # while read at 1.3-1.4 GB/s on the 2-core VM, the same files read again at 2.3-3.0).
    warm_pass: bool = True

    @field_validator("dir")
    @classmethod
    def _names_a_directory(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(f"must name a directory; leave data.dir out for the default {DEFAULT_DATA_DIR}")
        return value

    @model_validator(mode="after")
    def _aligned(self) -> "Data":
        if self.block_bytes % 4096:
            raise ValueError(f"data.block_bytes must be a multiple of 4096 (direct I/O), got {self.block_bytes}")
        return self


class Placement(_Strict):
    strategy: PlacementStrategy = PlacementStrategy.PACK
    servers_own_node: bool = False


class LinkShape(_Strict):
    """The figures of a shaped link: ``bandwidth`` in bits a second (``10Gbit``; None: unshaped)
    and ``latency``, added to every transfer."""
    bandwidth: Optional[BitsPerSecond] = Field(None, gt=0.0, le=1e15)
    latency: Seconds = Field(0.0, ge=0.0, le=60.0)

    @property
    def bandwidth_bytes_per_s(self) -> Optional[float]:
        return None if self.bandwidth is None else self.bandwidth / 8.0

    @property
    def shaped(self) -> bool:
        return self.bandwidth is not None or self.latency > 0


class Network(LinkShape):
    """Each worker's and each shard's link, shaped in user space (docs/network.md). The top-level
    figures apply between nodes; ``same_node`` between a worker and a shard on one node.
    Default: unshaped (transfers go as fast as Ray moves them)."""
    same_node: LinkShape = LinkShape()

    @property
    def shapes_anything(self) -> bool:
        """Some transfer is shaped: between nodes or on one node."""
        return self.shaped or self.same_node.shaped


class ConfigFields(_Strict):
    """The knobs of one run config; an experiment spec holds these plus name, repeats and sweep."""
    seed: Int = Field(0, ge=0, le=2**32 - 1)
    workers: Int = Field(1, ge=1, le=4096)
    workers_per_process: Optional[Int] = Field(
        None, ge=1, le=4096, description="virtual workers one worker process hosts (none: chosen per node)")
    servers: Int = Field(1, ge=1, le=256)
    sync: SyncMode = SyncMode.ASYNC
    staleness: Int = Field(0, ge=0, le=1_000_000, description="ssp only: steps a worker may run ahead")
    pull_every: Int = Field(1, ge=1, le=10_000_000)
    learning_rate: Float = Field(0.01, gt=0.0, le=1e6)
    apply_seconds: Seconds = Field(0.0, ge=0.0, le=3600.0,
                                   description="emulated extra service time of one update of the whole model")
    gradient_bytes: Bytes = Field(64 * 1024, ge=4, le=2**40)
    workload: Workload = Workload(steps=20)
    compute: Compute = Compute()
    data: Data = Data()
    placement: Placement = Placement()
    network: Network = Network()
    deadline_s: Optional[Seconds] = Field(None, ge=MIN_DEADLINE_S, le=30 * 86400.0)
    deadline_margin: Float = Field(10.0, ge=1.0, le=1000.0,
                                   description="default deadline: this x the queueing model's time + 60 s")
    faults: list[Fault] = Field(default_factory=list)
    checkpoint_every: Int = Field(0, ge=0, le=10**9, description="shards checkpoint every this many updates")
    restarts: Int = Field(1, ge=0, le=100, description="how often Ray restarts a crashed actor")

    @model_validator(mode="after")
    def _faults_fit(self) -> "ConfigFields":
        check_faults(self)
        return self

    @model_validator(mode="after")
    def _steps_bounded(self) -> "ConfigFields":
        check_steps(self)
        return self

    @model_validator(mode="after")
    def _gradient_fits_shards(self) -> "ConfigFields":
        if self.gradient_bytes % 4:
            raise ValueError(f"gradient_bytes must be a multiple of 4 (float32), got {self.gradient_bytes}")
        if self.gradient_bytes // 4 < self.servers:
            raise ValueError(
                f"gradient_bytes {self.gradient_bytes} holds {self.gradient_bytes // 4} float32 values, "
                f"fewer than servers={self.servers}; each shard needs at least one")
        if self.sync is SyncMode.SYNC and self.pull_every != 1:
            raise ValueError(f"sync 'sync' pulls after every step (the barrier is the pull), so pull_every must be 1, "
                             f"got {self.pull_every}")
        return self

    @property
    def barrier_timeout_s(self) -> float:
        """The longest a worker waits at a barrier before the run fails (the deadline, if set)."""
        return self.deadline_s if self.deadline_s is not None else DEFAULT_BARRIER_TIMEOUT_S

    @property
    def staleness_bound(self) -> Optional[int]:
        """The largest staleness an applied update can have under this config's consistency
        mode, or None when nothing bounds it (``async``).

        Between a worker's pull and a push it makes before its next pull, it has pushed at
        most p - 1 times itself (p = ``pull_every``) and each other worker at most 2 s + p
        times (``sync`` behaves as s = 0, p = 1), so the bound is (p - 1) + (N - 1)(2 s + p);
        docs/consistency.md has the argument.
        """
        p = self.pull_every
        if self.sync is SyncMode.ASYNC:
            return p - 1 if self.workers == 1 else None
        s = 0 if self.sync is SyncMode.SYNC else self.staleness
        return (p - 1) + (self.workers - 1) * (2 * s + p)

    @property
    def gradient_elements(self) -> int:
        return self.gradient_bytes // 4

    @property
    def steps(self) -> int:
        """Steps each worker runs in this config."""
        return self.workload.steps_per_worker(self.workers)

    def shard_bounds(self) -> list[tuple[int, int]]:
        """Element ranges [lo, hi) of the S contiguous, nearly equal gradient slices."""
        n, s = self.gradient_elements, self.servers
        edges = [(n * i) // s for i in range(s + 1)]
        return [(edges[i], edges[i + 1]) for i in range(s)]


class ExperimentSpec(ConfigFields):
    name: str = Field(..., min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    repeats: Int = Field(1, ge=1, le=1000)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    preset: Optional[str] = Field(None, description="a model preset (`testbed presets`): fills gradient_bytes, "
                                  "compute.seconds, workload.sample_bytes and minibatch where the spec gives none")
    preset_scale: float = Field(1.0, gt=0.0, description="multiplies the preset's gradient and compute time")

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        # On the raw data, so fields the spec (or --set) gives win, and the dumped spec records
        # the values the preset supplied: re-validating a dump changes nothing.
        if not isinstance(data, dict):
            return data
        sweep = data.get("sweep")
        if isinstance(sweep, dict) and {"preset", "preset_scale"} & set(sweep):
            raise ValueError("preset and preset_scale apply to the whole spec and cannot be swept; write one spec "
                             "per preset, or sweep gradient_bytes and compute.seconds")
        return fill_from_preset(data, ConfigFields.model_fields["workload"].default.model_dump(mode="json"))

    @model_validator(mode="after")
    def _faults_fit(self) -> "ExperimentSpec":
        # With a sweep the base values may not be a config that runs (workers: 1, sweeping 2
        # and 4): the faults, the steps and the knobs are checked on the expanded configs instead.
        if not self.sweep:
            check_faults(self)
            check_knobs_take_effect([self])
        return self

    @model_validator(mode="after")
    def _steps_bounded(self) -> "ExperimentSpec":
        if not self.sweep:
            check_steps(self)
        return self

    @model_validator(mode="after")
    def _sweep_names_knobs(self) -> "ExperimentSpec":
        for key, values in self.sweep.items():
            _check_path(key)
            if not isinstance(values, list) or not values:
                raise ValueError(f"sweep.{key} must be a non-empty list, got {values!r}")
            seen: set[str] = set()
            for value in values:
                token = json.dumps(value, sort_keys=True, default=str)
                if token in seen:
                    raise ValueError(f"sweep.{key} lists {value!r} twice; give each value once")
                seen.add(token)
        n = sweep_configs(self.sweep)
        if n > MAX_SWEEP_CONFIGS:
            sizes = " x ".join(str(len(v)) for v in self.sweep.values())
            raise ValueError(f"sweep: {n} configs ({sizes} values), at most {MAX_SWEEP_CONFIGS}; sweep fewer values "
                             f"or split the experiment")
        return self

    def config_fields(self) -> dict[str, Any]:
        """The base config as plain data (JSON types), without name, repeats and sweep."""
        return self.model_dump(mode="json", exclude={"name", "description", "repeats", "sweep", "preset",
                                                     "preset_scale"})


class RunConfig(ConfigFields):
    """One validated point of an experiment's sweep."""
    experiment: str
    config_id: str
    index: int = Field(ge=0)
    sweep_values: dict[str, Any] = Field(default_factory=dict)


def sweep_configs(sweep: dict[str, list[Any]]) -> int:
    """How many configs a sweep expands to (the product of its lists' lengths), without expanding it."""
    return math.prod(len(v) for v in sweep.values()) if sweep else 1


def check_steps(cfg: "ConfigFields") -> None:
    """Steps derived from epochs obey the same cap as ``workload.steps``."""
    w = cfg.workload
    if w.epochs is None:
        return
    steps = w.steps_per_worker(cfg.workers)
    if steps > MAX_STEPS:
        raise ValueError(
            f"workload.epochs: {w.epochs:g} epochs of {format_bytes(w.dataset_bytes)} in samples of "
            f"{format_bytes(w.sample_bytes)}, minibatch {w.minibatch}, make {steps} steps per worker with "
            f"workers={cfg.workers}; at most {MAX_STEPS}: lower workload.epochs or raise workload.minibatch or "
            f"workload.sample_bytes")


def _ineffective_knobs(cfg: "ConfigFields") -> tuple[dict[str, str], set[str]]:
    """The knobs ``cfg`` sets away from their defaults (name -> why it would have no effect
    here, or '' when it has one)."""
    out: dict[str, str] = {}
    if cfg.staleness != 0:
        out["staleness"] = "" if cfg.sync is SyncMode.SSP else (
            f"staleness applies to sync 'ssp' only (got staleness: {cfg.staleness} with sync '{cfg.sync.value}'); "
            f"set sync: ssp, or leave staleness out")
    no_data = cfg.workload.dataset_bytes <= 0
    if cfg.data.step_reads is not StepReads.NONE:
        out["data.step_reads"] = "" if not no_data else (
            f"data.step_reads '{cfg.data.step_reads.value}' reads the data set every step, but there is none: "
            f"set workload.dataset_bytes, or leave data.step_reads out")
    if cfg.data.init_io is InitIO.SEQUENTIAL:
        out["data.init_io"] = "" if not no_data else (
            "data.init_io 'sequential' orders the reads of the data set, but there is none: "
            "set workload.dataset_bytes, or leave data.init_io out")
    return out, {k for k, why in out.items() if not why}


def check_knobs_take_effect(configs: list["ConfigFields"]) -> None:
    """Refuse a knob set where it would be ignored: set in some config and taking effect in
    none (a sweep over ``sync`` with ``staleness: 2`` is fine: it applies to the ssp points)."""
    reasons: dict[str, str] = {}
    effective: set[str] = set()
    for cfg in configs:
        why, works = _ineffective_knobs(cfg)
        for knob, reason in why.items():
            reasons.setdefault(knob, reason)
        effective |= works
    for knob, reason in reasons.items():
        if knob not in effective:
            raise ValueError(reason)


def field_at(path: str) -> Any:
    """The pydantic field (``FieldInfo``) a dotted config path names (``compute.seconds``);
    ``ValueError`` naming the allowed fields where a part is not one, or has no sub-fields."""
    model: type[BaseModel] = ConfigFields
    parts = path.split(".")
    for i, part in enumerate(parts):
        fields = model.model_fields
        if part not in fields:
            where = ".".join(parts[:i]) or "the top level"
            raise ValueError(f"{part!r} is not a field of {where}; allowed: {', '.join(fields)}")
        info = fields[part]
        if i == len(parts) - 1:
            return info
        if not (isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)):
            raise ValueError(f"{part!r} has no sub-fields")
        model = info.annotation


def _check_path(path: str) -> None:
    try:
        field_at(path)
    except ValueError as err:
        raise ValueError(f"sweep key {path!r}: {err}") from None


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise UserError(f"cannot set {path!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def _format_validation_error(err: ValidationError, source: str) -> UserError:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            parent = e["loc"][:-1]
            model: type[BaseModel] = ExperimentSpec
            for p in parent:
                ann = model.model_fields.get(str(p))
                if ann is None or not (isinstance(ann.annotation, type) and issubclass(ann.annotation, BaseModel)):
                    break
                model = ann.annotation
            msg = f"unknown field; allowed here: {', '.join(model.model_fields)}"
            lines.append(f"{loc}: {msg}")
            continue
        if e["type"] == "enum":
            msg = f"must be one of {e.get('ctx', {}).get('expected', '')}"
        value = e.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        # A check across fields (loc empty) names its fields in its message.
        lines.append(f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}")
    return UserError(f"{source}: invalid spec: " + "; ".join(lines))


def parse_spec(data: Any, source: str = "spec", overrides: list[str] | None = None) -> ExperimentSpec:
    """Validate a spec given as plain data (e.g. parsed YAML), after applying ``key=value`` overrides."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: a spec must be a YAML mapping of fields (name:, workers:, ...), got {type(data).__name__}")
    data = apply_overrides(data, overrides or [])
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as err:
        raise _format_validation_error(err, source) from None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``dotted.key=value`` strings (values parsed as YAML) to a copy of ``data``."""
    data = json.loads(json.dumps(data, default=str))
    for item in overrides:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected key=value, e.g. --set workers=4 or --set compute.seconds=20ms")
        key, _, raw = item.partition("=")
        try:
            value = safe_load(raw)
        except yaml.YAMLError as err:
            raise UserError(f"--set {item!r}: the value is not valid YAML ({err})") from None
        except YamlTooLarge as err:
            raise UserError(f"--set {key.strip()}: {err}") from None
        _set_path(data, key.strip(), value)
    return data


def load_spec(path: str | Path, overrides: list[str] | None = None) -> ExperimentSpec:
    """Read and validate a YAML spec file."""
    path = Path(path)
    try:
        size = path.stat().st_size if path.is_file() else 0
        if size > MAX_SPEC_BYTES:
            raise UserError(f"{path}: {format_bytes(size)}, but a spec file may be at most {format_bytes(MAX_SPEC_BYTES)}; "
                            f"is it the right file?")
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such spec file; the experiments/ folder has examples") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read the spec ({err.__class__.__name__}: {err})") from None
    try:
        data = safe_load(text)
    except YamlTooLarge as err:
        raise UserError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise UserError(f"{path}: not valid YAML{where}: {problem}") from None
    return parse_spec(data, source=str(path), overrides=overrides)


def _config_id(index: int, fields: dict[str, Any]) -> str:
    fields = {k: v for k, v in fields.items() if k not in _ID_OMITS_DEFAULTS or v != _ID_OMITS_DEFAULTS[k]}
    data = fields.get("data")
    if isinstance(data, dict) and data.get("warm_pass", True) is True:  # as the fields above
        fields["data"] = {k: v for k, v in data.items() if k != "warm_pass"}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
    return f"c{index:03d}-{digest}"


def expand(spec: ExperimentSpec) -> list[RunConfig]:
    """The Cartesian product of the sweep lists, as validated run configs in sweep order.

    A config's id is its index and a hash of its resolved fields, so the same spec
    always gives the same ids (resume relies on it).
    """
    base = spec.config_fields()
    keys = list(spec.sweep)
    configs = []
    points: dict[str, str] = {}  # resolved fields -> the sweep point that gave them
    for index, values in enumerate(itertools.product(*(spec.sweep[k] for k in keys))):
        fields = json.loads(json.dumps(base))
        for key, value in zip(keys, values):
            _set_path(fields, key, value)
        try:
            resolved = ConfigFields.model_validate(fields).model_dump(mode="json")
        except ValidationError as err:
            point = ", ".join(f"{k}={v!r}" for k, v in zip(keys, values))
            raise _format_validation_error(err, f"{spec.name} (sweep point {point})") from None
        point = ", ".join(f"{k}={v!r}" for k, v in zip(keys, values))
        token = json.dumps(resolved, sort_keys=True)
        if token in points:
            raise UserError(f"{spec.name}: invalid spec: sweep points {points[token]} and {point} give the same config; "
                            f"give each value once")
        points[token] = point
        configs.append(RunConfig(
            **resolved, experiment=spec.name, index=index,
            config_id=_config_id(index, resolved), sweep_values=dict(zip(keys, values)),
        ))
    if spec.sweep:
        try:
            check_knobs_take_effect(configs)
        except ValueError as err:
            raise UserError(f"{spec.name}: invalid spec: {err}") from None
    return configs


def spec_diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted names of the fields that differ between two specs given as plain data
    (a field only one side has counts as changed); lists compare whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        changed = []
        for key in sorted(set(old) | set(new), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                changed.append(name)
            else:
                changed += spec_diff(old[key], new[key], name)
        return changed
    return [] if old == new else [prefix or "(spec)"]


def with_reliability_defaults(spec_data: dict[str, Any]) -> dict[str, Any]:
    """A spec dumped before the reliability fields existed, with their defaults filled in
    (so resuming such a run folder does not report them as changed), and ``data.warm_pass``
    too when its data section was dumped before that field existed."""
    out = {**json.loads(json.dumps(_ID_OMITS_DEFAULTS)), **spec_data}
    if isinstance(out.get("data"), dict) and "warm_pass" not in out["data"]:
        out["data"] = {**out["data"], "warm_pass": True}
    return out
