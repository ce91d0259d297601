"""The hardware profile as (figure, value) rows: one list, rendered by the report
(``report.md``'s profile table) and by ``testbed calibrate`` (its console table).

The rows come from the profile's fields, walked generically: a field named here gets a
readable label, any other field shows under its own name, and each value is formatted
by the unit its name ends in (``_bytes_per_s``, ``_s``, ``_bytes``). So a figure added to
``HardwareProfile`` (or to a record inside it) appears in both tables without an edit here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from testbed.config.units import format_bytes, format_seconds
from testbed.model.curves import SizeCurve
from testbed.model.profile import DiskProfile, HardwareProfile

__all__ = ["profile_rows", "format_figure"]

# Readable labels of the fields the model's equations name (docs/model.md's symbols in the label).
_LABELS = {
    "cores_per_node": "cores per node",
    "actor_call_latency_s": "actor-call latency L",
    "transfer_bytes_per_s_local": "transfer bandwidth W (same node)",
    "transfer_bytes_per_s_remote": "transfer bandwidth (between nodes)",
    "server_apply_bytes_per_s": "server apply bandwidth A",
    "server_call_overhead_s": "server per-call overhead o",
    "flops_per_s": "matmul rate",
    "disk": "disk",
    "disk_reference": "fio (reference)",
    "spin_overshoot_s": "a spin's overshoot, by spinners per core",
    "sleep_overshoot_s": "how late a 4 ms sleep ends on the idle node (an emulated apply's sleep)",
    "wake_s": "a woken read call's wait for a core, by processes wanting one per core (measured among spinners)",
    "wake_first_s": "the first read call's alone, after a spin (the same way; recorded, not used by the model)",
    "reply_wake_s": "a call's reply to a caller held waiting, by the hold: beyond a call answered at once",
    "small_calls_by_shards": "worker at the smallest size",
    "large_calls_by_shards": "worker at the large size",
    "larger_calls_by_shards": "worker at the larger size",
    "load_average": "load average (1 min) as calibration began",
    "init_hosted_processes": "worker processes the hosted workers' init call was measured with",
    "plain_pull_step_s": "an ssp pull (a call of its own): what each shard beyond the first adds, by slice",
    "ray_cpu_per_step_s": "Ray's own processes' CPU per worker step",
    "ray_cpu_shard_step_s": "Ray's own processes' CPU per worker step: what each shard beyond the first adds, by slice",
}
# Keyed curves: the label of one point, given its key.
# ``{s}`` is the plural's s, left out at one.
_POINT_LABELS = {"setup_s_by_actors": "start-up of {key} actor{s} at once",
                 "init_fanout_s_by_actors": "the driver's call to {key} idle actor{s} at once",
                 "init_gate_s_by_workers": "the I/O gate's turns for {key} worker{s} in a sequential init (beyond the call)",
                 "init_hosted_s_by_workers": "the init call to processes hosting {key} worker{s} each (beyond one each)",
                 "small_calls_by_shards": "the worker's calls with {key} shard{s} at the smallest size",
                 "large_calls_by_shards": "the worker's calls with {key} shards at the large size (slices through the object store)",
                 "larger_calls_by_shards": "the worker's calls with {key} shards at the larger size (slices through the object store)"}
# Who measured what (identity) and when (created) head the table or are not figures at all.
_NOT_FIGURES = {"identity", "created", "schema_version"}


def format_figure(name: str, value: Any) -> str:
    """A figure's value in the unit its name ends in (``..._by_<key>`` curves: the unit before it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    unit = name.split("_by_")[0]
    if "flops_per_s" in unit:
        return f"{value / 1e9:.1f} GFLOP/s"
    if "bytes_per_s" in unit:  # also transfer_bytes_per_s_local and the like
        return f"{format_bytes(value)}/s"
    if unit.endswith("_s"):
        return format_seconds(value)
    if unit.endswith("_bytes"):
        return format_bytes(value)
    return f"{value:.4g}"


def _disk_rows(label: str, disk: DiskProfile) -> list[tuple[str, str]]:
    rows = [(f"{label} sequential read, {jobs} reader(s)", f"{format_bytes(bps)}/s")
            for jobs, bps in sorted(disk.seq_read_bytes_per_s.items())]
    rows += [(f"{label} random read {format_bytes(block)}", f"{iops:,.0f} IOPS")
             for block, iops in sorted(disk.rand_read_iops.items())]
    rows += [(f"{label} random read 4 KiB, {k} reader(s)", f"{iops:,.0f} IOPS")
             for k, iops in disk.rand_read_iops_by_readers.items() if k > 1]
    if disk.read_start_s > 0:
        rows += [(f"{label} first read after idle, beyond its bytes", format_seconds(disk.read_start_s))]
    return rows + [(f"{label} figures from", f"{disk.source} ({disk.fs_type or '?'})")]


def _curve_text(name: str, points: tuple) -> str:
    """A (bytes, value) curve on one line: ``4 KiB: 1.5 ms; 64 KiB: 1.8 ms; ...``."""
    return "; ".join(f"{format_bytes(b)}: {format_figure(name, v)}" for b, v in points)


def _record_key(record: Any) -> str:
    """What tells the records of a tuple apart (``shards=1``; ``order=random, pause_s=0.02``)."""
    fields = [f for f in dataclasses.fields(record) if isinstance(getattr(record, f.name), (int, float, str))]
    return ", ".join(f"{f.name}={getattr(record, f.name)}" for f in fields[:2])


def _by_size(points: list[list[float]]) -> str:
    return "; ".join(f"{format_bytes(b)}: x{r:.2f}" for b, r in points)


def _differ(levels: Any) -> bool:
    """Levels by size (``[bytes, level]`` rows) that are not one level at every size."""
    return bool(levels) and len({round(v, 6) for _, v in levels}) > 1


def _level_rows(level: dict[str, Any]) -> list[tuple[str, str]]:
    """The session's per-call level (``call_level``): each figure's ratio to the calibration
    at the checked sizes, one row a figure, and the level applied."""
    when = f" (checked {level['measured']})" if level.get("measured") else ""
    if "failed" in level:
        carried, by_size = level.get("carried_level"), level.get("carried_levels")
        at = (f"the profile's earlier check, by size ({_by_size(by_size)})" if _differ(by_size)
              else f"the profile's earlier check, x{carried:.2f}" if carried is not None else "the calibration's")
        return [(f"per-call level of the runs' session{when}",
                 f"check failed ({level['failed']}); predicted at {at} level")] + _after_rows(level)
    rows = [(f"per-call level of the runs' session{when}: {figure}", _by_size(points))
            for figure, points in level.get("ratios", {}).items() if points]
    levels = level.get("levels")
    span = level.get("span") or {}
    # With the check after the runs, the level before them is one end of the span, not what predicts.
    what = "the level before the runs" if span else "applied to every per-call curve"
    if _differ(levels):
        rows.append((f"per-call level of the runs' session{when}: {what}, by size "
                     f"(the sizes' medians run one way)", _by_size(levels)))
    elif "level" in level:
        rows.append((f"per-call level of the runs' session{when}: {what}", f"x{level['level']:.2f}"))
    rows += _after_rows(level)
    if span:
        label = ("per-call level of the runs' span (the geometric mean of the checks before and after them): "
                 "applied to every per-call curve")
        rows.append((label + ", by size", _by_size(span["levels"])) if _differ(span.get("levels"))
                    else (label, f"x{span['level']:.2f}"))
    return rows


def _after_rows(level: dict[str, Any]) -> list[tuple[str, str]]:
    """The check made again after the last config (``call_level["after"]``): its level against
    the calibration's and how far it is from the one the runs were predicted at."""
    after = level.get("after")
    if not after:
        return []
    label = "per-call level after the runs" + (f" (checked {after['measured']})" if after.get("measured") else "")
    if "failed" in after:
        return [(label, f"check failed ({after['failed']})")]
    from testbed.calibration.level import level_drift
    drift = level_drift(level)
    moved = f"; before them x{level['level']:.2f}, moved x{drift:.2f} while the configs ran" if drift is not None else ""
    rounds = after.get("repeats", 1)
    use = "one end of the runs' span" if level.get("span") else "recorded, not applied"
    return [(label, f"x{after['level']:.2f} of the calibration's ({rounds} round{'s' if rounds != 1 else ''}; "
                    f"{use}{moved})")]


def _read_level_rows(level: dict[str, Any]) -> list[tuple[str, str]]:
    """The step reads' level of the runs' session (``read_level``): per order, the check's 4 KiB
    read back to back and after its pause against the calibration's, and what was applied."""
    when = f" (checked {level['measured']})" if level.get("measured") else ""
    if "failed" in level:
        return [(f"step reads' level of the runs' session{when}",
                 f"check failed ({level['failed']}); predicted at the calibration's curves")]
    pause = f"{level.get('pause_s', 0) * 1e3:g} ms"
    # Profiles of the release that applied it say "applied"; since, the check is recorded only.
    how = "applied" if level.get("applied", True) else "recorded, not applied (the calibration's curves predict)"
    return [(f"step reads' level of the runs' session{when}: {order}",
             f"back to back {v['hot_s'] * 1e6:.0f} us (calibrated {v['calibrated_hot_s'] * 1e6:.0f}), "
             f"after {pause} {v['paused_s'] * 1e6:.0f} us (calibrated {v['calibrated_paused_s'] * 1e6:.0f}); "
             f"{how}: back-to-back reads {v['hot_shift_s'] * 1e6:+.0f} us, wake-ups x{v['wake_ratio']:.2f}")
            for order, v in sorted(level.get("orders", {}).items())]


def _rows(name: str, value: Any, label: str) -> list[tuple[str, str]]:
    if value is None or (isinstance(value, dict) and not value):
        return []  # not measured (one node: no remote bandwidth; --no-disk: no disk)
    if name == "call_level":
        return _level_rows(value)
    if name == "read_level":
        return _read_level_rows(value)
    if isinstance(value, DiskProfile):
        return _disk_rows(label, value)
    if isinstance(value, SizeCurve):
        return [(label, _curve_text(name, value.points))]
    if isinstance(value, tuple) and value and all(isinstance(x, (int, float)) for x in value):
        return [(label, ", ".join(f"{x:g}" for x in value))]
    if isinstance(value, tuple) and value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        # (key, value) points of a curve over something other than bytes: on one line
        return [(label, "; ".join(f"{k:g}: {format_figure(name, v)}" for k, v in value))]
    if isinstance(value, tuple) and value and all(dataclasses.is_dataclass(v) for v in value):  # one record per key
        return [row for v in value for row in _rows(name, v, f"{label} [{_record_key(v)}]")]
    if dataclasses.is_dataclass(value):  # a record of figures inside the profile
        return [row for f in dataclasses.fields(value)
                for row in _rows(f.name, getattr(value, f.name), f"{label}: {_LABELS.get(f.name, f.name)}")]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):  # named figures: each under its own name
            return [row for k, v in sorted(value.items()) for row in _rows(k, v, _LABELS.get(k, k))]
        template = _POINT_LABELS.get(name, label + ", {key}")  # a curve: one row per point
        if all(isinstance(v, dict) for v in value.values()):  # named figures per key: a row each
            return [(f"{_point(template, k)}: {n}", format_figure(n, x))
                    for k, v in sorted(value.items()) for n, x in sorted(v.items())]
        return [(_point(template, k), format_figure(name, v)) for k, v in sorted(value.items())]
    return [(label, format_figure(name, value))]


def profile_rows(profile: HardwareProfile) -> list[tuple[str, str]]:
    """Every figure of ``profile`` as (label, formatted value), the machine first."""
    rows = [row for f in dataclasses.fields(profile) if f.name not in _NOT_FIGURES
            for row in _rows(f.name, getattr(profile, f.name), _LABELS.get(f.name, f.name))]
    identity = profile.identity
    head = [("nodes", str(len(identity.get("nodes", [])) or 1)), ("CPU", str(identity.get("cpu_model", "?")))]
    labels = {label for label, _ in rows}
    tail = [("measured", profile.created)] if profile.created else []
    return [row for row in head if row[0] not in labels] + rows + tail


def _point(template: str, key: Any) -> str:
    """One point's label: the key in its place, and a plural's s unless the key is 1."""
    return template.format(key=key, s="" if key == 1 else "s")
