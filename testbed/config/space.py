"""Validation spaces: ranges instead of lists, and a seeded, stratified draw of run configs.

A space file is an experiment spec (name, steps, data directory, ...: the *base*) plus a
``space:`` mapping from dotted config fields to *dimensions*:

- ``log_uniform: [lo, hi]`` and ``uniform: [lo, hi]``: continuous (units as in a spec:
  ``4KiB``, ``5ms``), with an optional ``multiple_of: q``;
- ``int: [lo, hi]`` and ``log_int: [lo, hi]``: integers, both ends included;
- ``choice: [a, b, ...]``: one of the values; a value may itself be a range dimension
  (``choice: [0, {uniform: [1ms, 10ms]}]``: "0, or up to 10 ms").

A dimension may be *conditional*: ``when: {field: [values]}`` (drawn only when the field
holds one of them) and ``unless: {field: [values]}``. The field is a dimension declared
above it, or a base field. A dimension that is not drawn keeps the base value, so the
constraints the spec enforces (sync needs pull_every 1, step reads need a data set) are
expressed as conditions; a draw the spec still refuses is an error naming the fields, never
a draw silently thrown away.

``sample(space, k, seed)`` stratifies: each continuous dimension's range is cut into m
equal strata (m = the draws in which it is active; equal in log space for the log kinds),
one value per stratum (a Latin hypercube); choices (and small integer ranges) are cycled
so that each appears floor(m / n) or ceil(m / n) times. Each dimension has its own random
stream, seeded by the seed and the dimension's name, and its own permutation, so the
dimensions are independent and the same seed gives the same draw.

Pure: pydantic, numpy, PyYAML and the standard library.
"""

from __future__ import annotations

import enum
import json
import math
import zlib
from pathlib import Path
from typing import Any, Optional

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from testbed.config.errors import UserError
from testbed.config.spec import (
    ConfigFields,
    ExperimentSpec,
    RunConfig,
    _config_id,  # the id expand() gives, so sampled configs are named like swept ones
    _format_validation_error,
    _set_path,
    field_at,
    parse_spec,
)
from testbed.config.units import parse_bytes, parse_seconds

__all__ = ["Kind", "Dimension", "Space", "load_space", "parse_space", "sample", "sampled_spec", "is_space_file",
           "KIND_HELP"]

KIND_HELP = ("log_uniform: [lo, hi], uniform: [lo, hi], int: [lo, hi], log_int: [lo, hi] or choice: [values], "
             "with optional multiple_of, when and unless")


class Kind(str, enum.Enum):
    LOG_UNIFORM = "log_uniform"
    UNIFORM = "uniform"
    INT = "int"
    LOG_INT = "log_int"
    CHOICE = "choice"


_RANGES = (Kind.LOG_UNIFORM, Kind.UNIFORM, Kind.INT, Kind.LOG_INT)
_OPTIONS = {"multiple_of", "when", "unless"}


class Dimension(BaseModel):
    """One dimension of a space: a range or a choice, and when it is drawn."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str
    kind: Kind
    low: Optional[float] = None
    high: Optional[float] = None
    values: tuple[Any, ...] = ()          # choice: plain values or nested range Dimensions
    multiple_of: Optional[float] = None
    when: dict[str, tuple[Any, ...]] = {}
    unless: dict[str, tuple[Any, ...]] = {}

    def active(self, drawn: dict[str, Any]) -> bool:
        """Whether this dimension is drawn, given the values drawn (or held by the base) so far."""
        return (all(_same(drawn[f], allowed) for f, allowed in self.when.items())
                and not any(_same(drawn[f], banned) for f, banned in self.unless.items()))

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one this dimension can draw."""
        if self.kind is Kind.CHOICE:
            return any(v.contains(value) if isinstance(v, Dimension) else _same(value, (v,)) for v in self.values)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        if self.kind in (Kind.INT, Kind.LOG_INT) and value != int(value):
            return False
        return self.low - 1e-12 <= value <= self.high + 1e-12


class Space(BaseModel):
    """A parsed space file: the base spec and its dimensions, in declaration order."""
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    source: str
    base: ExperimentSpec
    dimensions: tuple[Dimension, ...]

    def dimension(self, path: str) -> Dimension:
        return next(d for d in self.dimensions if d.path == path)


def _same(value: Any, allowed: tuple[Any, ...]) -> bool:
    for a in allowed:
        if isinstance(value, (int, float)) and isinstance(a, (int, float)) and not isinstance(value, bool):
            if math.isclose(float(value), float(a), rel_tol=1e-9, abs_tol=1e-12):
                return True
        elif value == a:
            return True
    return False


def _field(path: str, where: str) -> Any:
    """The pydantic field a dotted config path names; a UserError listing the allowed names if none."""
    try:
        return field_at(path)
    except ValueError as err:
        raise UserError(f"{where}: {err}") from None


def _unit_parser(info: Any):
    for meta in info.metadata:
        func = getattr(meta, "func", None)
        if func in (parse_bytes, parse_seconds):
            return func
    return None


def _number(raw: Any, parse, where: str) -> float:
    try:
        if parse is not None:
            return float(parse(raw))
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ValueError(f"expected a number, got {raw!r}")
        return float(raw)
    except (ValueError, TypeError) as err:
        raise UserError(f"{where}: {err}") from None


def _normal(raw: Any, parse) -> Any:
    """A value as the drawn configs hold it (units parsed), for comparing with conditions."""
    if parse is not None and not isinstance(raw, bool):
        try:
            return parse(raw)
        except (ValueError, TypeError):
            return raw
    return raw


def _dimension(path: str, raw: Any, where: str, nested: bool = False) -> Dimension:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a dimension is a mapping ({KIND_HELP}), got {raw!r}")
    kinds = [k for k in raw if k in Kind._value2member_map_]
    unknown = [k for k in raw if k not in Kind._value2member_map_ and k not in _OPTIONS]
    if unknown or len(kinds) != 1:
        what = f"unknown key {unknown[0]!r}" if unknown else f"{len(kinds)} kinds given ({', '.join(kinds)})"
        raise UserError(f"{where}: {what}; a dimension is exactly one of {KIND_HELP}")
    kind = Kind(kinds[0])
    if nested and (raw.get("when") or raw.get("unless")):
        raise UserError(f"{where}: a choice's range takes no when/unless (put them on the choice)")
    parse = _unit_parser(_field(path, where))
    fields: dict[str, Any] = {"path": path, "kind": kind}
    body = raw[kind.value]
    if kind is Kind.CHOICE:
        if not isinstance(body, list) or not body:
            raise UserError(f"{where}.choice: must be a non-empty list of values, got {body!r}")
        fields["values"] = tuple(
            _dimension(path, v, f"{where}.choice[{i}]", nested=True) if isinstance(v, dict) and
            any(k in Kind._value2member_map_ for k in v) else _normal(v, parse) for i, v in enumerate(body))
        if "multiple_of" in raw:
            raise UserError(f"{where}.multiple_of: only range dimensions round to a multiple")
    else:
        if not isinstance(body, list) or len(body) != 2:
            raise UserError(f"{where}.{kind.value}: must be [lo, hi], got {body!r}")
        low, high = (_number(b, parse, f"{where}.{kind.value}") for b in body)
        if not low <= high:
            raise UserError(f"{where}.{kind.value}: lo must not exceed hi, got [{body[0]}, {body[1]}]")
        if kind in (Kind.LOG_UNIFORM, Kind.LOG_INT) and low <= 0:
            raise UserError(f"{where}.{kind.value}: a log range needs lo > 0, got {body[0]!r}")
        if kind in (Kind.INT, Kind.LOG_INT) and (low != int(low) or high != int(high)):
            raise UserError(f"{where}.{kind.value}: the ends must be integers, got {body!r}")
        fields.update(low=low, high=high)
        if "multiple_of" in raw:
            q = _number(raw["multiple_of"], parse, f"{where}.multiple_of")
            if q <= 0 or math.ceil(low / q) * q > high:
                raise UserError(f"{where}.multiple_of: {raw['multiple_of']!r} must be > 0 with a multiple "
                                f"inside [{body[0]}, {body[1]}]")
            fields["multiple_of"] = q
    for key in ("when", "unless"):
        cond = raw.get(key) or {}
        if not isinstance(cond, dict):
            raise UserError(f"{where}.{key}: must map fields to values, e.g. {key}: {{sync: [ssp]}}, got {cond!r}")
        parsed = {}
        for other, allowed in cond.items():
            other_parse = _unit_parser(_field(str(other), f"{where}.{key}"))
            allowed = allowed if isinstance(allowed, list) else [allowed]
            parsed[str(other)] = tuple(_normal(a, other_parse) for a in allowed)
        fields[key] = parsed
    return Dimension(**fields)


def _check_values(base: dict[str, Any], dim: Dimension, source: str) -> None:
    """Each end of a range and each choice, set alone on the base, must make a config the spec accepts."""
    probes = list(dim.values) if dim.kind is Kind.CHOICE else [dim.low, dim.high]
    for value in probes:
        if isinstance(value, Dimension):
            _check_values(base, value, source)
            continue
        if dim.kind in (Kind.INT, Kind.LOG_INT):
            value = int(value)
        fields = json.loads(json.dumps(base))
        _set_path(fields, dim.path, value)
        try:
            ConfigFields.model_validate(fields)
        except ValidationError as err:
            raise UserError(f"{source}: space.{dim.path}: the value {value!r} is not allowed: "
                            f"{_format_validation_error(err, 'spec').message.removeprefix('spec: invalid spec: ')}"
                            ) from None


def parse_space(data: Any, source: str = "space", overrides: list[str] | None = None) -> Space:
    """Validate a space given as plain data (a parsed YAML mapping with a ``space:`` part);
    ``overrides`` (``key=value``, as ``--set``) apply to the base part."""
    if not isinstance(data, dict) or not isinstance(data.get("space"), dict) or not data["space"]:
        raise UserError(f"{source}: a space file is a spec with a non-empty `space:` mapping of dotted fields to "
                        f"dimensions ({KIND_HELP})")
    rest = {k: v for k, v in data.items() if k != "space"}
    if rest.get("sweep"):
        raise UserError(f"{source}: sweep: a space file declares ranges under space:, not lists under sweep:")
    base = parse_spec(rest, source=source, overrides=overrides)
    base_fields = base.config_fields()
    dims: list[Dimension] = []
    for path, raw in data["space"].items():
        path = str(path)
        dim = _dimension(path, raw, f"{source}: space.{path}")
        declared = {d.path for d in dims}
        for other in list(dim.when) + list(dim.unless):
            if other == path:
                raise UserError(f"{source}: space.{path}: a dimension cannot be conditional on itself")
            if other in data["space"] and other not in declared:
                raise UserError(f"{source}: space.{path}: its condition on {other!r} needs {other} declared above it "
                                f"(conditions see the dimensions drawn before them)")
        _check_values(base_fields, dim, source)
        dims.append(dim)
    return Space(source=source, base=base, dimensions=tuple(dims))


def load_space(path: str | Path, overrides: list[str] | None = None) -> Space:
    """Read and validate a space file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such space file; experiments/validation_space.yaml is an example") from None
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML: {getattr(err, 'problem', None) or err}") from None
    return parse_space(data, source=str(path), overrides=overrides)


def is_space_file(path: str | Path) -> bool:
    """Whether a YAML file has a ``space:`` part (a space file rather than a spec)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and "space" in data


# -- the draw -------------------------------------------------------------------------------

def _lhs(m: int, rng: np.random.Generator) -> np.ndarray:
    """m points in [0, 1), one in each of m equal strata, in random order."""
    return (rng.permutation(m) + rng.random(m)) / m


def _balanced(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """m indices into n options, each floor(m / n) or ceil(m / n) times, in random order."""
    order = rng.permutation(n)
    return rng.permutation(np.array([order[j % n] for j in range(m)], dtype=int))


def _draw(dim: Dimension, m: int, rng: np.random.Generator) -> list[Any]:
    if m == 0:
        return []
    if dim.kind is Kind.CHOICE:
        picks = _balanced(len(dim.values), m, rng)
        out: list[Any] = [None] * m
        for b, branch in enumerate(dim.values):
            where = np.flatnonzero(picks == b)
            values = _draw(branch, len(where), rng) if isinstance(branch, Dimension) else [branch] * len(where)
            for j, v in zip(where, values):
                out[j] = v
        return out
    lo, hi = dim.low, dim.high
    if dim.kind is Kind.INT:
        n = int(hi - lo) + 1
        if n <= m:  # every integer fits: cycle over them like a choice
            return [int(lo) + int(i) for i in _balanced(n, m, rng)]
        return [min(int(hi), int(lo + math.floor(u * n))) for u in _lhs(m, rng)]
    if dim.kind is Kind.LOG_INT:
        a, b = math.log(lo), math.log(hi + 1)
        return [min(int(hi), int(math.floor(math.exp(a + u * (b - a))))) for u in _lhs(m, rng)]
    u = _lhs(m, rng)
    x = lo + u * (hi - lo) if dim.kind is Kind.UNIFORM else np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    if dim.multiple_of:
        q = dim.multiple_of
        x = np.clip(np.round(x / q) * q, math.ceil(lo / q) * q, math.floor(hi / q) * q)
        if float(q).is_integer():
            return [int(round(v)) for v in x]
    return [float(min(hi, max(lo, float(f"{v:.6g}")))) for v in x]


def _base_value(base: dict[str, Any], path: str) -> Any:
    node: Any = base
    for part in path.split("."):
        node = node[part]
    return node


def sample(space: Space, k: int, seed: int) -> list[RunConfig]:
    """``k`` run configs drawn from ``space`` (see the module doc), each validated by the spec.

    ``sweep_values`` of each config holds the values drawn for it (its active dimensions)."""
    if not isinstance(k, int) or k < 1:
        raise UserError(f"--sample {k!r}: draw at least one config (e.g. --sample 24)")
    if not 0 <= seed < 2**63:
        raise UserError(f"--seed {seed!r}: must be an integer >= 0 (the default is today's date, YYYYMMDD)")
    base = space.base.config_fields()
    drawn: list[dict[str, Any]] = [{} for _ in range(k)]
    for dim in space.dimensions:
        # A condition sees the value drawn for the field, or the base's when it was not drawn.
        fixed = {p: _base_value(base, p) for p in list(dim.when) + list(dim.unless)}
        active = [i for i in range(k) if dim.active({**fixed, **drawn[i]})]
        rng = np.random.default_rng([seed, zlib.crc32(dim.path.encode())])
        for i, value in zip(active, _draw(dim, len(active), rng)):
            drawn[i][dim.path] = value
    configs = []
    for index, values in enumerate(drawn):
        fields = json.loads(json.dumps(base))
        for path, value in values.items():
            _set_path(fields, path, value)
        try:
            resolved = ConfigFields.model_validate(fields).model_dump(mode="json")
        except ValidationError as err:
            point = ", ".join(f"{p}={v!r}" for p, v in values.items())
            raise UserError(f"{space.source}: draw {index} ({point}) is a config the spec refuses: "
                            f"{_format_validation_error(err, 'spec').message.removeprefix('spec: invalid spec: ')}; "
                            f"make the dimension conditional (when:/unless:) so the sampler respects the rule"
                            ) from None
        configs.append(RunConfig(**resolved, experiment=space.base.name, index=index,
                                 config_id=_config_id(index, resolved), sweep_values=values))
    return configs


def sampled_spec(space: Space, k: int, seed: int) -> ExperimentSpec:
    """The base spec of a draw, its description saying what was drawn (recorded in the run folder)."""
    note = f"draw of {k} configs from {space.source}, seed {seed}"
    description = f"{space.base.description} ({note})" if space.base.description else note
    return space.base.model_copy(update={"description": description})
