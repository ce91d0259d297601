"""The report of a run folder: ``summary.csv`` regenerated from the events, ``trace.json``,
``report.md`` and a per-node utilisation plot.

Everything is derived from what the run folder holds (events, manifest, monitor
samples), so a report can be rebuilt at any time with ``testbed report RUN_DIR``.
Each section is a small function returning Markdown lines, so later sections (the
model's predictions, measured against predicted) slot in beside them.

Clocks: durations are monotonic per node and exact; start times are each node's wall
clock. The manifest holds each node's estimated offset against the driver's clock;
the plot shifts the samples by it, and the report states the largest one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pandas as pd

from testbed.records.events import Phase, Role
from testbed.records.manifest import RunStatus
from testbed.records.rundir import RunFolder, atomic_write_text
from testbed.records.trace import chrome_trace
from testbed.report import plots

__all__ = ["write_report", "markdown_table", "summary_section", "nodes_section", "clock_section",
           "max_clock_offset_ns", "UTILISATION_PNG"]

UTILISATION_PNG = "utilisation.png"
# Driver spans shaded on the plot; the colours are matplotlib's defaults, one per phase.
_SUMMARY_SHOWN = ["config_id", "repeat", "workers", "servers", "setup_s", "init_s", "train_s", "steps_per_s",
                  "compute_mean_s", "push_mean_s", "queue_mean_s", "apply_mean_s"]


def write_report(run_dir: str | Path | RunFolder, status: Optional[RunStatus] = None) -> Path:
    """Regenerate the summary, the trace, the plot and ``report.md`` of a run folder; returns the report's path.

    ``status``: the status the report states, when the caller is about to settle it (``testbed
    validate`` writes the report before it marks the run ``complete``, so that comes last);
    otherwise the folder's own, ``interrupted`` for a folder whose writer is gone."""
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder.open(run_dir)
    manifest = folder.manifest
    if status is not None:
        manifest["status"] = RunStatus(status).value
    events = folder.events()
    summary = folder.summary(events)
    folder.write_summary(summary)
    folder.write_trace(chrome_trace(events, folder.node_ips()))
    resources = folder.resources()
    figure = plots.utilisation(resources, events, manifest["clock_offsets"])
    plot = None if figure is None else plots.save(figure, folder.path / UTILISATION_PNG)
    lines = [f"# {manifest['experiment']}: run {manifest['run_id']}", "",
             f"Status: {manifest['status']}; started {manifest['started']}, ended {manifest['ended']}.", ""]
    if manifest["status"] == RunStatus.INTERRUPTED.value:
        owner = folder.record.owner
        lines += [f"**The run was interrupted: its writer ({owner or 'unknown'}) is gone without settling its "
                  f"status; `testbed run --resume {folder.path}` finishes it.**", ""]
    lines += data_section(manifest)
    lines += summary_section(summary)
    lines += reliability_section(manifest, events, summary)
    lines += model_sections(folder)
    lines += staleness_section(folder, events)
    lines += nodes_section(folder, events, resources)
    lines += clock_section(manifest)
    if plot is not None:
        lines += ["## Utilisation", "", f"![utilisation per node]({plot.name})", "",
                  "CPU (left axis) and disk and network throughput (right axis) per node, sampled by the node "
                  "monitors; the shaded spans are the driver's setup, init and train phases of each config.", ""]
    lines += ["Trace: `trace.json` (open it in Perfetto or chrome://tracing).", ""]
    path = folder.path / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path


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
            "over the same steps (the model's predictions above do not yet include the straggler).", "",
            *markdown_table(rows, ["config_id", "straggler", "factor", "its compute s", "others' compute s",
                                   "measured ratio"]), ""]


def model_sections(folder: RunFolder) -> list[str]:
    """Measured against predicted, when the folder holds the profile the run was predicted with
    (``testbed validate`` saves it; ``testbed report --profile`` can add one)."""
    from testbed.records.rundir import PROFILE_FILE
    path = folder.path / PROFILE_FILE
    if not path.is_file():
        return ["## Model", "", "No hardware profile in this folder, so no predictions: run `testbed validate`, "
                "or `testbed report RUN_DIR --profile PROFILE`.", ""]
    from testbed.analysis.validation import compare_run
    from testbed.model.profile import load_profile
    from testbed.report.comparison import comparison_markdown, write_comparison
    comparison = compare_run(folder, load_profile(path))
    write_comparison(folder, comparison)
    return [comparison_markdown(comparison), ""]


def staleness_section(folder: RunFolder, events: pd.DataFrame) -> list[str]:
    """The staleness of applied updates: its distribution per config, when any was recorded."""
    applies = events[(events["phase"] == Phase.APPLY.value) & (events["staleness"] >= 0)]
    if applies.empty:
        return []
    (folder.path / "plots").mkdir(exist_ok=True)
    plots.save(plots.staleness_histogram(events), folder.path / "plots" / "staleness.png")
    stats = applies.groupby("config_id", sort=False)["staleness"].agg(
        mean="mean", p50=lambda s: s.quantile(0.5), p99=lambda s: s.quantile(0.99), max="max").reset_index()
    return ["## Staleness", "", "Updates applied to a shard between a worker's pull and its push of a gradient "
            "(0: the gradient was computed on the newest parameters).", "",
            *markdown_table(stats.itertuples(index=False, name=None), ["config_id", "mean", "p50", "p99", "max"]),
            "", "![staleness](plots/staleness.png)", ""]


def markdown_table(rows: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[str]:
    """A GitHub-flavoured Markdown table; floats with 4 significant digits, NaN as '-'."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "-" if math.isnan(v) else f"{v:.4g}"
        return str(v)
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def summary_section(summary: pd.DataFrame) -> list[str]:
    if summary.empty:
        return ["## Summary", "", "No config finished.", ""]
    shown = summary[_SUMMARY_SHOWN]
    return ["## Summary", "", "Per config and repeat; phase means per step, in seconds (`summary.csv` has all "
            "columns).", "", *markdown_table(shown.itertuples(index=False, name=None), _SUMMARY_SHOWN), ""]


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
        offset = offsets.get(node, {}).get("offset_ns")
        rows.append((node[:12], ips.get(node, "?"), int(roles.get(Role.WORKER.value, 0)),
                     int(roles.get(Role.SERVER.value, 0)), "yes" if (mine["role"] == Role.DRIVER.value).any() else "",
                     cpu, "-" if offset is None else f"{offset / 1e6:+.3f}"))
    columns = ["node", "ip", "workers", "servers", "driver", "mean cpu %", "clock offset ms"]
    return ["## Nodes", "", "Actors counted over all configs and repeats.", "", *markdown_table(rows, columns), ""]


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
