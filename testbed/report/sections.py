"""The sections of a run folder's report: each returns content and writes nothing.

A section returns its Markdown lines, or a ``Section`` when it also has files to put
beside the report (a figure, a table); ``testbed.report.writer.write_report`` assembles the
sections and writes every file once. Everything is derived from what the run folder holds
(events, manifest, monitor samples, the profile it was predicted with), so a report can be
rebuilt at any time with ``testbed report RUN_DIR``.

Clocks: durations are monotonic per node and exact; start times are each node's wall
clock. The manifest holds each node's estimated offset against the driver's clock;
the plot shifts the samples by it, and the report states the largest one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pandas as pd

from testbed.analysis.validation import Comparison
from testbed.config.presets import preset_summary
from testbed.config.units import format_bits_per_s
from testbed.records.events import Phase, Role
from testbed.records.rundir import RunFolder
from testbed.records.summary import shown_columns
from testbed.report import plots
from testbed.report.comparison import comparison_files, comparison_markdown
from testbed.report.markdown import frame_table, markdown_table

__all__ = ["Section", "preset_section", "network_section", "data_section", "summary_section", "reliability_section", "model_section",
           "staleness_section", "nodes_section", "clock_section", "utilisation_section", "max_clock_offset_ns",
           "UTILISATION_PNG", "STALENESS_PNG"]

UTILISATION_PNG = "utilisation.png"
STALENESS_PNG = "plots/staleness.png"


@dataclasses.dataclass
class Section:
    """A section's Markdown lines and the files it puts beside the report: path relative to
    the run folder -> a matplotlib Figure (written as PNG), a DataFrame (CSV), str or bytes."""
    lines: list[str]
    files: dict[str, Any] = dataclasses.field(default_factory=dict)


def preset_section(manifest: dict[str, Any]) -> list[str]:
    """The preset the spec was built from, its sources and the scale; nothing without a preset."""
    line = preset_summary(manifest.get("spec") or {})
    return [line, ""] if line else []


def _link_text(shape: dict[str, Any]) -> str:
    bandwidth, latency = shape.get("bandwidth"), shape.get("latency") or 0.0
    if bandwidth is None and not latency:
        return "unshaped"
    parts = [format_bits_per_s(bandwidth) if bandwidth is not None else "unlimited bandwidth"]
    return ", ".join(parts + ([f"latency {latency * 1e3:g} ms"] if latency else []))


def network_section(manifest: dict[str, Any]) -> list[str]:
    """The link figures the configs ran with (docs/network.md); nothing when every config is unshaped."""
    figures: dict[tuple[str, str], list[str]] = {}
    for c in manifest.get("configs", []):
        net = c.get("network") or {}
        key = (_link_text(net), _link_text(net.get("same_node") or {}))
        figures.setdefault(key, []).append(c["config_id"])
    if all(key == ("unshaped", "unshaped") for key in figures):
        return []
    nodes = sum(1 for n in manifest.get("cluster") or [] if (n.get("cpus") or 0) > 0) or 1
    where = ("one node: every actor is emulated as a node of its own, so every transfer takes the "
             "between-node figures" if nodes <= 1 else f"{nodes} nodes: a worker and a shard on one node "
             "take the same-node figures")
    lines = ["## Network", "", f"Shaped links (docs/network.md; {where}). Link waits are part of push and pull; "
             "a shard records them as `link_in` and `link_out`.", ""]
    for (far, near), ids in figures.items():
        lines.append(f"- between nodes: {far}; same node: {near} ({len(ids)} config{'s' if len(ids) != 1 else ''})")
    return lines + [""]


def data_section(manifest: dict[str, Any]) -> list[str]:
    """Where the data set was and whether its reads bypassed the page cache."""
    data = manifest.get("data") or []
    if not data:
        return []
    lines = ["## Data", ""]
    for d in data:
        lines.append(f"- `{d['directory']}` on {d['fs_type'] or '?'}, {d['bytes']} bytes; cache_bypass: "
                     f"{str(d['cache_bypass']).lower()}")
    if manifest.get("cache_bypass") is False:
        lines += ["", "**The data set is on a memory-backed file system (run with `allow_cached`): its reads "
                  "came from RAM, not a disk, so the init and read phases do not measure a disk.**"]
    return lines + [""]


def reliability_section(manifest: dict[str, Any], events: pd.DataFrame, summary: pd.DataFrame) -> list[str]:
    """Faults injected, what they cost (restarts, lost time, lost updates), stragglers measured
    against the other workers, and config repeats that timed out, failed or are missing."""
    configs = {c["config_id"]: c for c in manifest.get("configs", [])}
    finished = {(f["config_id"], f["repeat"]): f for f in manifest.get("finished", [])}
    faulty = [cid for cid, c in configs.items() if c.get("faults")]
    troubled = [k for k, f in finished.items() if f.get("status", "ok") != "ok"]
    missing = [(cid, r) for cid in configs for r in range(manifest.get("repeats", 1)) if (cid, r) not in finished]
    if not (faulty or troubled or missing or manifest.get("resumed")):
        return []
    lines = ["## Faults and recovery", ""]
    for resumed in manifest.get("resumed", []):
        lines.append(f"- resumed at {resumed['at']}: {resumed['missing']} config repeat(s) were missing")
    for cid, r in missing:
        lines.append(f"- `{cid}` repeat {r}: **not run** (the run is {manifest.get('status')}; "
                     f"`testbed run --resume` finishes it)")
    for cid, r in troubled:
        f = finished[(cid, r)]
        lines.append(f"- `{cid}` repeat {r}: **{f['status']}**: {f.get('error', '')}; its events up to then are kept")
    if lines[-1] != "":
        lines.append("")
    if faulty and not summary.empty:
        rows = []
        for _, row in summary[summary["config_id"].isin(faulty)].iterrows():
            kinds = ", ".join(_fault_text(f) for f in configs[row["config_id"]]["faults"])
            rows.append((row["config_id"], row["repeat"], kinds, row["status"], row["restarts"], row["restart_s"],
                         row["lost_updates"], row["train_s"]))
        lines += ["Faults injected from the spec. `restart s` is the lost time: from each crash until the "
                  "restarted actor resumed (the `restart` events); `lost updates` were applied by a shard after "
                  "its last checkpoint and rolled back by its restart.", "",
                  *markdown_table(rows, ["config_id", "repeat", "faults", "status", "restarts", "restart s",
                                         "lost updates", "train s"]), ""]
        lines += _straggler_lines(configs, events)
    return lines


def _fault_text(fault: dict[str, Any]) -> str:
    if fault["kind"] == "kill_worker":
        return f"kill worker {fault['worker']} at step {fault['step']}"
    if fault["kind"] == "straggler":
        return f"worker {fault['worker']} {fault['factor']:g}x slower from step {fault['from_step']}"
    return f"kill shard {fault['shard']} at update {fault['update']}"


def _straggler_lines(configs: dict[str, Any], events: pd.DataFrame) -> list[str]:
    """A straggler's mean compute per step while it straggled, against the other workers' over the same steps."""
    rows = []
    compute = events[events["phase"] == Phase.COMPUTE.value]
    for cid, cfg in configs.items():
        for f in cfg.get("faults", []):
            if f["kind"] != "straggler":
                continue
            mine = compute[(compute["config_id"] == cid) & (compute["step"] >= f["from_step"])]
            slow = mine[mine["actor"] == f"worker-{f['worker']}"]["duration_ns"]
            rest = mine[mine["actor"] != f"worker-{f['worker']}"]["duration_ns"]
            ratio = slow.mean() / rest.mean() if len(slow) and len(rest) else float("nan")
            rows.append((cid, f"worker-{f['worker']}", f["factor"], slow.mean() / 1e9 if len(slow) else float("nan"),
                         rest.mean() / 1e9 if len(rest) else float("nan"), ratio))
    if not rows:
        return []
    return ["Stragglers: mean compute per step from the straggler's first slow step, against the other workers "
            "over the same steps. The model's predictions (below, when the folder holds a profile) include each "
            "straggler to first order: its extra compute time (docs/model.md, Stragglers).", "",
            *markdown_table(rows, ["config_id", "straggler", "factor", "its compute s", "others' compute s",
                                   "measured ratio"]), ""]


def model_section(comparison: Optional[Comparison]) -> Section:
    """Measured against predicted, with its tables and plots, when the run folder holds the
    profile the run was predicted with (``testbed validate`` saves it; ``testbed report
    --profile`` can add one); ``comparison`` is None otherwise."""
    if comparison is None:
        return Section(["## Model", "", "No hardware profile in this folder, so no predictions: run `testbed "
                        "validate`, or `testbed report RUN_DIR --profile PROFILE`.", ""])
    return Section([comparison_markdown(comparison), ""], comparison_files(comparison))


def staleness_section(events: pd.DataFrame) -> Section:
    """The staleness of applied updates: its distribution per config, when any was recorded."""
    applies = events[(events["phase"] == Phase.APPLY.value) & (events["staleness"] >= 0)]
    if applies.empty:
        return Section([])
    stats = applies.groupby("config_id", sort=False)["staleness"].agg(
        mean="mean", p50=lambda s: s.quantile(0.5), p99=lambda s: s.quantile(0.99), max="max").reset_index()
    return Section(["## Staleness", "", "Updates applied to a shard between a worker's pull and its push of a "
                    "gradient (0: the gradient was computed on the newest parameters).", "",
                    *frame_table(stats), "", f"![staleness]({STALENESS_PNG})", ""],
                   {STALENESS_PNG: plots.staleness_histogram(events)})


def utilisation_section(manifest: dict[str, Any], events: pd.DataFrame,
                        resources: Optional[pd.DataFrame]) -> Section:
    """The per-node utilisation plot, when the node monitors sampled anything."""
    figure = plots.utilisation(resources, events, manifest.get("clock_offsets", {}))
    if figure is None:
        return Section([])
    return Section(["## Utilisation", "", f"![utilisation per node]({UTILISATION_PNG})", "",
                    "CPU (left axis) and disk and network throughput (right axis) per node, sampled by the node "
                    "monitors; the shaded spans are the driver's setup, init and train phases of each config.", ""],
                   {UTILISATION_PNG: figure})


def summary_section(summary: pd.DataFrame) -> list[str]:
    if summary.empty:
        return ["## Summary", "", "No config finished.", ""]
    shown = shown_columns(summary, varying_knobs_only=True)
    return ["## Summary", "", "Per config and repeat; phase means per step, in seconds (`summary.csv` has all "
            "columns).", "", *frame_table(summary[shown]), ""]


def nodes_section(folder: RunFolder, events: pd.DataFrame, resources: Optional[pd.DataFrame]) -> list[str]:
    ips = folder.node_ips()
    offsets = folder.manifest.get("clock_offsets", {})
    nodes = sorted(set(ips) | set(events["node"]), key=lambda n: (ips.get(n, ""), n))
    rows = []
    for node in nodes:
        mine = events[events["node"] == node]
        roles = mine.drop_duplicates(["config_id", "repeat", "actor"])["role"].value_counts()
        samples = resources[resources["node"] == node] if resources is not None else None
        cpu = float(samples["cpu_percent"].mean()) if samples is not None and len(samples) else float("nan")
        steal, worst = _steal(samples)
        offset = offsets.get(node, {}).get("offset_ns")
        rows.append((node[:12], ips.get(node, "?"), int(roles.get(Role.WORKER.value, 0)),
                     int(roles.get(Role.SERVER.value, 0)), "yes" if (mine["role"] == Role.DRIVER.value).any() else "",
                     cpu, steal, worst, "-" if offset is None else f"{offset / 1e6:+.3f}"))
    columns = ["node", "ip", "workers", "servers", "driver", "mean cpu %", "mean steal %",
               "steal % of its most stolen config", "clock offset ms"]
    return ["## Nodes", "", "Actors counted over all configs and repeats. Steal is the share of the node's CPU time "
            "the hypervisor ran something else while the node wanted to run (a virtual machine's host busy "
            "elsewhere: every phase of a config run then comes out slower than the machine calibrated; "
            "`cpu_steal_percent` in `resources.parquet` has it per sample).", "", *markdown_table(rows, columns), ""]


def _steal(samples: Optional[pd.DataFrame]) -> tuple[float, str]:
    """A node's mean steal % over its samples, and its most stolen config's mean (with its id);
    NaN and "-" without the figure (folders made before it, sources that do not report it)."""
    from testbed.records.summary import steal_by_config
    by_config = steal_by_config(samples) if samples is not None else pd.Series(dtype="float64")
    if not len(by_config):
        return float("nan"), "-"
    (config, repeat), top = by_config.idxmax(), float(by_config.max())
    return float(samples["cpu_steal_percent"].mean()), f"{top:.1f} ({config} r{repeat})"


def max_clock_offset_ns(manifest: dict[str, Any]) -> Optional[int]:
    """The largest |offset| + rtt/2 over the nodes: how far a node's clock may be from the driver's."""
    offsets = manifest.get("clock_offsets") or {}
    if not offsets:
        return None
    return max(abs(o["offset_ns"]) + o["rtt_ns"] // 2 for o in offsets.values())


def clock_section(manifest: dict[str, Any]) -> list[str]:
    bound = max_clock_offset_ns(manifest)
    text = ("Durations are measured with each node's monotonic clock and are exact. Start times are each node's "
            "wall clock, so events of different nodes line up only as well as the clocks agree. ")
    if bound is None:
        text += "This run has no clock-offset estimate (no node monitors)."
    else:
        text += (f"The nodes' clocks were at most {bound / 1e6:.3f} ms from the driver's (estimated offset plus half "
                 f"the round trip, measured when the run started); compare start times across nodes only at "
                 f"coarser resolution than that.")
    return ["## Clocks", "", text, ""]
