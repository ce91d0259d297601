"""Loading run folders for the notebooks, and the numbers each of the study's findings quotes.

The notebooks in ``notebooks/`` only read run folders: they find one (``resolve_run``),
load it (``load_run``: manifest, measured summary, events, monitor samples and, when the
folder holds the profile it was predicted with, the comparison with every model family),
plot it with ``testbed.report.plots`` (the report's own plots), and print the numbers behind each
finding of the reference study (``finding_numbers``). Nothing here starts Ray or writes into
a run folder.

Terms (as in ``testbed.analysis.compare``): a *group* is the configs of a run that differ only in
their worker count; a *sparse knee* is the first worker count of the sweep from which one
more sweep step gains less than half of the linear gain (None: no knee on the grid).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from testbed.analysis.validation import Comparison
from testbed.config.errors import UserError
from testbed.records.rundir import RunFolder
from testbed.records.summary import shown_columns

__all__ = ["RunData", "RUN_ENV", "PAPER_EXPERIMENTS", "find_runs", "newest_run", "resolve_run", "resolve_paper_runs",
           "load_run", "manifest_table", "summary_table", "combine_runs"]

RUN_ENV = "DDNN_RUN"  # names the run folder analysis.ipynb reads
# The reproduction experiments (experiments/<name>.yaml) and the variable naming each one's run folder.
PAPER_EXPERIMENTS = {"paper_cntk": "DDNN_PAPER_CNTK_RUN", "fix_parallel_io": "DDNN_FIX_PARALLEL_IO_RUN",
                     "fix_sharded_ps": "DDNN_FIX_SHARDED_PS_RUN"}


@dataclasses.dataclass
class RunData:
    """One run folder, loaded. ``comparison`` is None when the folder holds no ``profile.json``."""
    path: Path
    manifest: dict[str, Any]
    summary: pd.DataFrame                 # measured, one row per config and repeat, with its group
    events: pd.DataFrame
    resources: Optional[pd.DataFrame]     # node monitor samples; None when the run had no monitors
    comparison: Optional[Comparison]

    @property
    def experiment(self) -> str:
        return self.manifest.get("experiment", "")

    @property
    def compared(self) -> pd.DataFrame:
        """The summary with the prediction and error columns when there are predictions."""
        return self.comparison.compared if self.comparison is not None else self.summary

    @property
    def curves(self) -> Optional[pd.DataFrame]:
        """Each family's predictions at every worker count (for the plots' lines), or None."""
        return self.comparison.curves if self.comparison is not None else None

    @property
    def has_staleness(self) -> bool:
        return bool(((self.events["phase"] == "apply") & (self.events["staleness"] >= 0)).any())

    @property
    def has_resources(self) -> bool:
        return self.resources is not None and not self.resources.empty


# -- finding run folders -------------------------------------------------------------------
def _manifest(path: Path) -> Optional[dict[str, Any]]:
    try:
        return RunFolder.open(path).manifest
    except UserError:
        return None


def find_runs(experiment: Optional[str] = None, results_dir: str | Path = "results",
              statuses: Optional[tuple[str, ...]] = ("complete",)) -> list[Path]:
    """The run folders directly under ``results_dir``, oldest first (by start time), of
    ``experiment`` when given and with a status in ``statuses`` (None: any status)."""
    root = Path(results_dir)
    found = []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        manifest = _manifest(path) if path.is_dir() else None
        if manifest is None:
            continue
        if experiment is not None and manifest.get("experiment") != experiment:
            continue
        if statuses is not None and manifest.get("status") not in statuses:
            continue
        found.append((str(manifest.get("started") or ""), path.name, path))
    return [path for _, _, path in sorted(found)]


def newest_run(results_dir: str | Path = "results", experiment: Optional[str] = None) -> Path:
    """The most recently started complete run folder (of ``experiment`` when given)."""
    runs = find_runs(experiment, results_dir)
    if not runs:
        what = f"of experiment {experiment!r} " if experiment else ""
        hint = f"experiments/{experiment}.yaml" if experiment else "SPEC"
        raise UserError(f"no complete run folder {what}under {results_dir}; make one with "
                        f"`testbed validate {hint}` or name a folder")
    return runs[-1]


def resolve_run(path: str | Path | None = None, env: str = RUN_ENV, results_dir: str | Path = "results",
                experiment: Optional[str] = None) -> Path:
    """The folder to read: ``path`` when given, else the one the environment variable ``env``
    names, else the newest under ``results_dir``."""
    chosen = path or os.environ.get(env)
    if chosen:
        RunFolder.open(chosen)  # a clear error now rather than a KeyError later
        return Path(chosen)
    return newest_run(results_dir, experiment)


def resolve_paper_runs(paths: Optional[dict[str, str | Path | None]] = None,
                       results_dir: str | Path = "results") -> dict[str, Path]:
    """The run folder of each reproduction experiment (``PAPER_EXPERIMENTS``): from ``paths``,
    else its environment variable, else the newest of that experiment under ``results_dir``."""
    paths = paths or {}
    return {name: resolve_run(paths.get(name), env, results_dir, experiment=name)
            for name, env in PAPER_EXPERIMENTS.items()}


# -- loading -------------------------------------------------------------------------------
def load_run(path: str | Path) -> RunData:
    """Read a run folder; compare it with every model family when it holds ``profile.json``."""
    folder = RunFolder.open(path)
    events = folder.events()
    summary = folder.summary(events)
    comparison = None
    from testbed.records.rundir import PROFILE_FILE
    if (folder.path / PROFILE_FILE).is_file():
        from testbed.analysis.validation import compare_run
        from testbed.model.profile import load_profile
        comparison = compare_run(folder, load_profile(folder.path / PROFILE_FILE))
        summary = comparison.compared[["group", *summary.columns]]
    else:
        from testbed.analysis.compare import group_label
        labels = {c["config_id"]: group_label(c.get("sweep_values", {})) for c in folder.manifest["configs"]}
        summary.insert(2, "group", summary["config_id"].map(labels))
    return RunData(path=folder.path, manifest=folder.manifest, summary=summary, events=events,
                   resources=folder.resources(), comparison=comparison)


def manifest_table(manifest: dict[str, Any]) -> pd.DataFrame:
    """The manifest's headline fields as a two-column table (field, value)."""
    configs = manifest.get("configs", [])
    sweep = manifest.get("spec", {}).get("sweep", {})
    rows = [("experiment", manifest.get("experiment")), ("run id", manifest.get("run_id")),
            ("status", manifest.get("status")), ("started", manifest.get("started")),
            ("ended", manifest.get("ended")), ("host", manifest.get("host")),
            ("git commit", (manifest.get("git_commit") or "-")[:12]),
            ("configs x repeats", f"{len(configs)} x {manifest.get('repeats')}"),
            ("finished", len(manifest.get("finished", []))),
            ("sweep", ", ".join(f"{k}={v}" for k, v in sweep.items()) or "-"),
            ("nodes", len(manifest.get("cluster", [])) or len(manifest.get("nodes", {})) or 1),
            ("cache bypass", manifest.get("cache_bypass", "-")),
            ("versions", ", ".join(f"{k} {v}" for k, v in manifest.get("versions", {}).items()))]
    if manifest.get("error"):
        rows.append(("error", manifest["error"]))
    return pd.DataFrame(rows, columns=["field", "value"])


def summary_table(run: RunData) -> pd.DataFrame:
    """The measured summary's main columns (``SHOWN_COLUMNS``: the phases that were measured at all)."""
    return run.summary[shown_columns(run.summary)].reset_index(drop=True)


def combine_runs(runs: dict[str, RunData]) -> tuple[pd.DataFrame, Optional[pd.DataFrame]]:
    """Several runs' compared tables and curves as one, each group relabelled ``<label>: <group>``
    (``<label>`` alone for a run of one group), so one plot shows them side by side."""
    compared, curves = [], []
    for label, run in runs.items():
        single = run.compared["group"].nunique() == 1

        def relabel(group: pd.Series) -> pd.Series:
            return group.map(lambda g: label if single else f"{label}: {g}")
        compared.append(run.compared.assign(group=relabel(run.compared["group"])))
        if run.curves is not None and len(run.curves):
            curves.append(run.curves.assign(group=relabel(run.curves["group"])))
    return (pd.concat(compared, ignore_index=True),
            pd.concat(curves, ignore_index=True) if curves else None)
