"""The run folder: where a run's records live, written so that a crash loses at most
the config in progress.

Layout::

    manifest.json        schema version, status, resolved spec, configs, versions, host, git,
                         the config repeats that finished (with their status: ok, timed_out, failed)
    events.parquet/      one Parquet file per finished config and repeat (reads as one table)
    resources.parquet    the node monitors' samples, all configs (rewritten when a config ends)
    summary.csv          one row per config and repeat, derived from the events
    trace.json           the events as a Chrome trace (Perfetto, chrome://tracing)

Every file is written atomically (temporary file, fsync, rename). While a config with
faults runs, ``state/<config>-r<repeat>/`` holds its checkpoints and crash records; it is
removed when the config ends.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from testbed import __version__
from testbed.config.errors import UserError
from testbed.records.events import EVENT_SCHEMA, RESOURCE_SCHEMA

__all__ = ["RunFolder", "MANIFEST_SCHEMA_VERSION", "PROFILE_FILE", "atomic_write_bytes", "atomic_write_text", "default_run_dir",
           "software_versions", "git_commit", "arrow_schema", "resource_schema", "RUN_FOLDER_ENTRIES"]

MANIFEST_SCHEMA_VERSION = 1
PROFILE_FILE = "profile.json"  # the hardware profile a run was predicted with (validate, report --profile)
EVENTS_DIR = "events.parquet"
RESOURCES_FILE = "resources.parquet"
# What `testbed.runner.run.run_experiment` leaves in a run folder, on one machine or many
# (`testbed report` adds report.md and its plots).
RUN_FOLDER_ENTRIES = ("manifest.json", EVENTS_DIR, RESOURCES_FILE, "summary.csv", "trace.json")


def arrow_schema() -> pa.Schema:
    return pa.schema([(name, getattr(pa, arrow)()) for name, arrow, _ in EVENT_SCHEMA])


def resource_schema() -> pa.Schema:
    return pa.schema([(name, getattr(pa, arrow)()) for name, arrow in RESOURCE_SCHEMA])


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UserError(f"cannot write {path}: {err.strerror or err}; free some space or choose another --out") from None
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def default_run_dir(experiment: str, root: str | Path = "results") -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{experiment}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{experiment}-{stamp}-{n}"
    return path


def git_commit(cwd: Optional[Path] = None) -> Optional[str]:
    here = Path(cwd or Path(__file__).resolve().parent)
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "ddnn-testbed": __version__}
    for mod in ("ray", "numpy", "pandas", "pyarrow", "pydantic"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing optional package is just not listed
            pass
    return versions


class RunFolder:
    """A run folder being written (``create``) or read (``open``)."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = Path(path)
        self.manifest = manifest

    # -- writing ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, *, run_id: str, experiment: str, spec: dict[str, Any],
               configs: list[dict[str, Any]], repeats: int, extra: Optional[dict[str, Any]] = None) -> "RunFolder":
        path = Path(path)
        if path.exists() and any(path.iterdir()):
            raise UserError(f"{path} already exists and is not empty; choose another --out or remove it")
        try:
            (path / EVENTS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create the run folder {path}: {err.strerror or err}") from None
        manifest = {
            "schema_version": MANIFEST_SCHEMA_VERSION,
            "run_id": run_id,
            "experiment": experiment,
            "status": "running",
            "started": now_iso(),
            "ended": None,
            "host": socket.gethostname(),
            "platform": platform.platform(),
            "argv": sys.argv,
            "versions": software_versions(),
            "git_commit": git_commit(),
            "spec": spec,
            "repeats": repeats,
            "configs": configs,
            "finished": [],
            "nodes": {},
            **(extra or {}),
        }
        folder = cls(path, manifest)
        folder.write_manifest()
        return folder

    def write_manifest(self) -> None:
        atomic_write_text(self.path / "manifest.json", json.dumps(self.manifest, indent=2, default=str) + "\n")

    def set_status(self, status: str, error: Optional[str] = None) -> None:
        self.manifest["status"] = status
        self.manifest["ended"] = now_iso()
        if error:
            self.manifest["error"] = error
        self.write_manifest()

    def begin_resume(self, missing: int) -> None:
        """Mark a folder being resumed as running again (same run id), noting when and how many
        config repeats were missing, and drop temporary files a killed writer left behind."""
        for tmp in [*self.path.glob(".*.tmp-*"), *(self.path / EVENTS_DIR).glob(".*.tmp-*")]:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self.manifest.setdefault("resumed", []).append({"at": now_iso(), "missing": missing, "argv": sys.argv})
        self.manifest["status"] = "running"
        self.manifest["ended"] = None
        self.manifest.pop("error", None)
        self.write_manifest()

    def write_config_events(self, config_id: str, repeat: int, columns: dict[str, list],
                            status: str = "ok", info: Optional[dict[str, Any]] = None) -> Path:
        """Write one config repeat's events atomically and record it as finished."""
        table = pa.Table.from_pydict(columns, schema=arrow_schema())
        target = self.path / EVENTS_DIR / f"{config_id}-r{repeat}.parquet"
        atomic_write_bytes(target, _parquet_bytes(table))
        # A folder resumed after a kill that came between the rename and the manifest: replace.
        self.manifest["finished"] = [f for f in self.manifest["finished"]
                                     if (f["config_id"], f["repeat"]) != (config_id, repeat)]
        self.manifest["finished"].append({"config_id": config_id, "repeat": repeat, "status": status,
                                          "events": len(table), **(info or {})})
        self.write_manifest()
        return target

    def write_summary(self, frame) -> None:
        atomic_write_text(self.path / "summary.csv", frame.to_csv(index=False))

    def append_resources(self, columns: dict[str, list]) -> None:
        """Add one config's monitor samples; the file is rewritten whole, atomically (it is small:
        a few rows a second per node)."""
        table = pa.Table.from_pydict(columns, schema=resource_schema())
        path = self.path / RESOURCES_FILE
        if path.is_file():
            table = pa.concat_tables([pq.read_table(path, schema=resource_schema()), table])
        atomic_write_bytes(path, _parquet_bytes(table))

    def write_trace(self, trace: dict[str, Any]) -> Path:
        path = self.path / "trace.json"
        atomic_write_text(path, json.dumps(trace, separators=(",", ":")))
        return path

    # -- reading ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> "RunFolder":
        path = Path(path)
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            raise UserError(f"{path} is not a run folder (no manifest.json); give a folder made by `testbed run`")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserError(f"{manifest_path} is corrupt ({err}); the run folder cannot be read") from None
        if manifest.get("schema_version", 0) > MANIFEST_SCHEMA_VERSION:
            raise UserError(f"{path} was written by a newer ddnn-testbed (schema {manifest['schema_version']}); upgrade")
        return cls(path, manifest)

    def node_ips(self) -> dict[str, str]:
        """Node id -> IP of every node the run saw (the cluster at start, and every actor's node)."""
        ips = {n["node"]: n["ip"] for n in self.manifest.get("cluster", [])}
        ips.update(self.manifest.get("nodes", {}))
        return ips

    def event_files(self) -> Iterator[Path]:
        yield from sorted((self.path / EVENTS_DIR).glob("*.parquet"))

    def events(self):
        """All events as a pandas DataFrame (empty, with the right columns, when none)."""
        files = list(self.event_files())
        if not files:
            return arrow_schema().empty_table().to_pandas()
        return pa.concat_tables([pq.read_table(f, schema=arrow_schema()) for f in files]).to_pandas()

    def resources(self):
        """The monitor samples as a DataFrame, or None when the run has none."""
        path = self.path / RESOURCES_FILE
        if not path.is_file():
            return None
        return pq.read_table(path, schema=resource_schema()).to_pandas()

    def summary(self):
        import pandas as pd
        path = self.path / "summary.csv"
        if not path.is_file():
            raise UserError(f"{path} is missing; regenerate it with `testbed report {self.path}`")
        return pd.read_csv(path)
