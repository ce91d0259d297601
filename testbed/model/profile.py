"""The hardware profile: the figures calibration measures and the model consumes.

Pure dataclasses with JSON load/save (a versioned document). Calibration results
are ordinary records: every figure says where it came from (``source``). The model writes
no files itself: ``save_profile`` is handed the writer (the callers pass the testbed's one
atomic writer, ``testbed.records.atomic.atomic_write_text``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from testbed.config.errors import UserError

__all__ = ["DiskProfile", "HardwareProfile", "interpolate_setup_s", "PROFILE_SCHEMA_VERSION", "load_profile", "save_profile",
           "profile_text", "check_profile_machine"]

PROFILE_SCHEMA_VERSION = 1


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

    def __post_init__(self) -> None:
        if not self.seq_read_bytes_per_s:
            raise ValueError("seq_read_bytes_per_s needs at least the single-reader figure")
        for k, v in self.seq_read_bytes_per_s.items():
            if int(k) < 1 or not v > 0:
                raise ValueError(f"seq_read_bytes_per_s[{k}] = {v}: concurrency >= 1 and bandwidth > 0 required")
        object.__setattr__(self, "seq_read_bytes_per_s", {int(k): float(v) for k, v in self.seq_read_bytes_per_s.items()})
        object.__setattr__(self, "rand_read_iops", {int(k): float(v) for k, v in self.rand_read_iops.items()})

    def aggregate_bandwidth(self, readers: int) -> float:
        """Aggregate bandwidth of ``readers`` concurrent readers, interpolated on the measured
        curve (linear between measured points, flat beyond the last one)."""
        points = sorted(self.seq_read_bytes_per_s.items())
        if readers <= points[0][0]:
            return points[0][1]
        for (n0, b0), (n1, b1) in zip(points, points[1:]):
            if readers <= n1:
                return b0 + (b1 - b0) * (readers - n0) / (n1 - n0)
        return points[-1][1]

    @property
    def single_stream_bytes_per_s(self) -> float:
        return self.aggregate_bandwidth(1)


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
    extra: dict[str, float] = dataclasses.field(default_factory=dict)  # further calibrated figures
    # Seconds to start k actors at once, for a few k: start-up is not linear in k (each new
    # process slows the others), so setup is interpolated on this curve (``interpolate_setup_s``).
    setup_s_by_actors: dict[int, float] = dataclasses.field(default_factory=dict)
    created: str = ""
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
        object.__setattr__(self, "setup_s_by_actors", {int(k): float(v) for k, v in self.setup_s_by_actors.items()})
        for name in ("disk", "disk_reference"):
            if isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, DiskProfile(**getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HardwareProfile":
        data = dict(data)
        version = data.get("schema_version", 1)
        if version > PROFILE_SCHEMA_VERSION:
            raise ValueError(f"profile schema version {version} is newer than this testbed understands "
                             f"({PROFILE_SCHEMA_VERSION}); upgrade ddnn-testbed")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown profile fields: {', '.join(sorted(unknown))}")
        return cls(**data)


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
