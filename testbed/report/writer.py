"""The one writer of a run folder's report: it assembles the sections (which return
content only) and puts every file on disk once, each through the atomic writer, with
``report.md`` last, so a reader who finds the report finds everything it links to.

What it writes: ``summary.csv`` (with the prediction and error columns when the folder holds
a profile, else the measured columns: one schema per report, written once), ``trace.json``,
the sections' files (the comparison's tables and plots, the staleness and utilisation plots)
and ``report.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from matplotlib.figure import Figure

from testbed.analysis.validation import Comparison, compare_run
from testbed.model.profile import load_profile
from testbed.records.manifest import RunStatus
from testbed.records.provenance import now_iso
from testbed.records.rundir import PROFILE_FILE, RunFolder, atomic_write_bytes, atomic_write_text
from testbed.records.trace import chrome_trace
from testbed.report import plots
from testbed.report.sections import (
    Section,
    clock_section,
    data_section,
    model_section,
    network_section,
    nodes_section,
    preset_section,
    reliability_section,
    staleness_section,
    summary_section,
    utilisation_section,
)

__all__ = ["write_report", "write_files", "REPORT_FILE"]

REPORT_FILE = "report.md"
_PNG_DPI = 110


def _comparison(folder: RunFolder) -> Optional[Comparison]:
    path = folder.path / PROFILE_FILE
    return compare_run(folder, load_profile(path)) if path.is_file() else None


def write_report(run_dir: str | Path | RunFolder, status: Optional[RunStatus] = None) -> Path:
    """Regenerate the summary, the trace, the plots and ``report.md`` of a run folder; returns the report's path.

    ``status``: the status the report states, when the caller is about to settle it (``testbed
    validate`` writes the report before it marks the run ``complete``, so that comes last);
    otherwise the folder's own, ``interrupted`` for a folder whose writer is gone."""
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder.open(run_dir)
    manifest = folder.manifest
    if status is not None:
        manifest["status"] = RunStatus(status).value
        if manifest.get("ended") is None:
            # The caller settles the status right after: the run ends now (the manifest's own
            # stamp follows within the second).
            manifest["ended"] = now_iso()
    events = folder.events()
    summary = folder.summary(events)
    resources = folder.resources()
    comparison = _comparison(folder)
    header = [f"# {manifest['experiment']}: run {manifest['run_id']}", "",
              f"Status: {manifest['status']}; started {manifest['started']}, "
              f"{'ended ' + manifest['ended'] if manifest.get('ended') else 'not ended'}.", ""]
    if manifest["status"] == RunStatus.INTERRUPTED.value:
        owner = folder.record.owner
        header += [f"**The run was interrupted: its writer ({owner or 'unknown'}) is gone without settling its "
                   f"status; `testbed run --resume {folder.path}` finishes it.**", ""]
    parts: list[list[str] | Section] = [
        header,
        preset_section(manifest),
        network_section(manifest),
        data_section(manifest),
        summary_section(summary),
        reliability_section(manifest, events, summary),
        model_section(comparison),
        staleness_section(events),
        nodes_section(folder, events, resources),
        clock_section(manifest),
        utilisation_section(manifest, events, resources),
        ["Trace: `trace.json` (open it in Perfetto or chrome://tracing).", ""],
    ]
    files: dict[str, Any] = {
        "summary.csv": comparison.compared if comparison is not None else summary,
        "trace.json": json.dumps(chrome_trace(events, folder.node_ips()), separators=(",", ":")),
    }
    lines: list[str] = []
    for part in parts:
        section = part if isinstance(part, Section) else Section(part)
        lines += section.lines
        clash = set(files) & set(section.files)
        if clash:
            raise AssertionError(f"two report sections write {sorted(clash)}")
        files.update(section.files)
    write_files(folder.path, files)
    path = folder.path / REPORT_FILE
    atomic_write_text(path, "\n".join(lines))
    return path


def write_files(root: Path, files: dict[str, Any]) -> list[Path]:
    """Write each file under ``root`` atomically: a Figure as PNG, a DataFrame as CSV, str or bytes as given."""
    written = []
    for name, content in files.items():
        path = Path(root) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Figure):
            atomic_write_bytes(path, plots.figure_png(content, dpi=_PNG_DPI))
        elif isinstance(content, pd.DataFrame):
            atomic_write_text(path, content.to_csv(index=False))
        elif isinstance(content, bytes):
            atomic_write_bytes(path, content)
        elif isinstance(content, str):
            atomic_write_text(path, content)
        else:
            raise TypeError(f"{name}: cannot write a {type(content).__name__}")
        written.append(path)
    return written
