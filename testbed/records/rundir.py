"""The run folder: where a run's records live, written so that a crash loses at most
the config in progress and never mixes two writers or two attempts.

Layout::

    manifest.json        the typed record (testbed.records.manifest): schema version, status,
                         owner, resolved spec, configs, versions, host, git, the config repeats
                         that finished (with their status: ok, timed_out, failed)
    finished.jsonl       while a run writes: one line per config repeat that ended since the
                         manifest was last written (the journal); folded into the manifest at
                         the end, and on the next open for writing
    events.parquet/      one Parquet file per finished config and repeat (reads as one table)
    resources.parquet    the node monitors' samples, all configs (one part per config under
                         resources.parts/ while the run writes)
    summary.csv          one row per config and repeat, derived from the events (at the end)
    trace.json           the events as a Chrome trace (Perfetto, chrome://tracing)
    .lock                held by the one process writing the folder (testbed.records.lock)

What is the truth after a crash: the manifest plus the journal. A config repeat is finished
when its journal line (or manifest entry) exists; its events file is renamed into place just
before that line is written. An events file with no line (a kill between the two) belongs
to an attempt that did not finish recording: readers ignore it and the next writer removes
it, and ``--resume`` runs that config repeat again.

Every file is written by ``testbed.records.atomic`` (temporary file, fsync, rename, fsync of
the folder). Per config, the bookkeeping is one events file, one resources part and one
journal line: its cost does not grow with the configs already done.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from testbed.config.errors import UserError
from testbed.records.atomic import TMP_GLOB, append_line, atomic_write_bytes, atomic_write_text
from testbed.records.events import EVENT_SCHEMA, RESOURCE_SCHEMA
from testbed.records.lock import LOCK_FILE, FolderBusy, FolderLock, lock_is_free, owner_alive
from testbed.records.manifest import (
    MANIFEST_SCHEMA_VERSION,
    ConfigStatus,
    Finished,
    Manifest,
    Owner,
    Resumed,
    RunStatus,
    load_manifest,
)
from testbed.records.provenance import default_run_dir, git_commit, now_iso, software_versions

__all__ = ["RunFolder", "MANIFEST_SCHEMA_VERSION", "PROFILE_FILE", "atomic_write_bytes", "atomic_write_text",
           "default_run_dir", "software_versions", "git_commit", "arrow_schema", "resource_schema",
           "RUN_FOLDER_ENTRIES", "JOURNAL_FILE", "check_out_path"]

PROFILE_FILE = "profile.json"  # the hardware profile a run was predicted with (validate, report --profile)
EVENTS_DIR = "events.parquet"
RESOURCES_FILE = "resources.parquet"
RESOURCE_PARTS_DIR = "resources.parts"
JOURNAL_FILE = "finished.jsonl"
MANIFEST_FILE = "manifest.json"
# What `testbed.runner.run.run_experiment` leaves in a run folder, on one machine or many
# (`testbed report` adds report.md and its plots).
RUN_FOLDER_ENTRIES = (MANIFEST_FILE, EVENTS_DIR, RESOURCES_FILE, "summary.csv", "trace.json", LOCK_FILE)


def arrow_schema() -> pa.Schema:
    return pa.schema([(name, getattr(pa, arrow)()) for name, arrow, _ in EVENT_SCHEMA])


def resource_schema() -> pa.Schema:
    return pa.schema([(name, getattr(pa, arrow)()) for name, arrow in RESOURCE_SCHEMA])


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def check_out_path(path: Path) -> None:
    """Refuse an ``--out`` that cannot become a new run folder (a file, a folder with files),
    before anything is written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path} is an existing file, not a folder; choose another --out")
    if path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir()):
        raise UserError(f"{path} already exists and is not empty; choose another --out or remove it")


def _read_journal(path: Path) -> list[Finished]:
    """The journal's entries; a last line cut short by a kill (or any unreadable line) is skipped."""
    out = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            out.append(Finished.model_validate_json(line))
        except ValueError:
            continue
    return out


def _acquire(path: Path) -> FolderLock:
    """The folder's writer lock, held by this process; refuses in one line when another holds it."""
    lock = FolderLock(path)
    try:
        lock.acquire()
    except FolderBusy:
        raise _busy(path) from None
    return lock


def _busy(path: Path) -> UserError:
    """The one line refusing a second writer, naming the owner when the manifest says who."""
    try:
        owner = load_manifest(json.loads((path / MANIFEST_FILE).read_text())).owner
    except (OSError, ValueError, UserError):
        owner = None
    who = f"by {owner}" if owner else "by another process that is creating it"
    return UserError(f"{path} is being written {who}; wait for that run to end (or stop it) and try again")


class RunFolder:
    """A run folder being written (``create``, ``open_for_writing``) or read (``open``).

    ``record`` is the typed manifest (with the journal folded in); ``manifest`` is the same as
    a plain dictionary, for tables and notebooks (a copy: changing it changes nothing), whose
    ``status`` is the one a reader should show (``status``)."""

    def __init__(self, path: Path, record: Manifest, lock: Optional[FolderLock] = None) -> None:
        self.path = Path(path)
        self._record = record
        self._pending: list[Finished] = []   # journal lines written since the manifest was
        self._lock = lock
        self._view: Optional[dict[str, Any]] = None

    # -- the record ------------------------------------------------------------------------
    @property
    def record(self) -> Manifest:
        if self._pending:
            self._record = self._record.with_finished(self._pending)
            self._pending = []
            self._view = None
        return self._record

    @property
    def manifest(self) -> dict[str, Any]:
        record = self.record
        if self._view is None:
            self._view = {**record.to_json(), "status": self.status.value}
        return json.loads(json.dumps(self._view))

    @property
    def status(self) -> RunStatus:
        """The run's status as a reader should show it: ``interrupted`` for a folder marked
        ``running`` whose writer is gone."""
        record = self.record
        if record.status is not RunStatus.RUNNING or (self._lock is not None and self._lock.held):
            return record.status
        free = lock_is_free(self.path)
        if free is None and record.owner is not None:
            alive = owner_alive(record.owner.host, record.owner.pid)
            free = None if alive is None else not alive
        return RunStatus.INTERRUPTED if free else record.status

    # -- writing ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, *, run_id: str, experiment: str, spec: dict[str, Any],
               configs: list[dict[str, Any]], repeats: int, **fields: Any) -> "RunFolder":
        """A new run folder, locked by this process until ``release``. ``fields``: more of the
        manifest's fields (``monitor_interval_s``, ``cache_bypass``, ``data``)."""
        path = Path(path)
        check_out_path(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create the run folder {path}: {err.strerror or err}") from None
        lock = _acquire(path)
        try:
            check_out_path(path)  # again, under the lock: two runs given the same --out at once
            (path / EVENTS_DIR).mkdir(exist_ok=True)
            started = now_iso()
            record = Manifest(run_id=run_id, experiment=experiment, started=started,
                              owner=Owner(host=socket.gethostname(), pid=os.getpid(), started=started),
                              host=socket.gethostname(), platform=platform.platform(), argv=list(sys.argv),
                              versions=software_versions(), git_commit=git_commit(), spec=spec, repeats=repeats,
                              configs=configs, **fields)
            folder = cls(path, record, lock)
            folder.write_manifest()
        except BaseException:
            lock.release()
            raise
        return folder

    @classmethod
    def open_for_writing(cls, path: str | Path) -> "RunFolder":
        """An existing run folder, locked by this process until ``release``; refuses in one line
        naming the owner when another process holds it. Folds the journal into the manifest and
        removes what a killed writer left (temporary files, events no entry lists)."""
        path = Path(path)
        folder = cls.open(path)
        lock = _acquire(path)
        try:
            folder = cls.open(path)  # again, under the lock: the last writer may just have ended
            folder._lock = lock
            folder._clean()
            folder.write_manifest()
            with contextlib.suppress(FileNotFoundError):
                (path / JOURNAL_FILE).unlink()
        except BaseException:
            lock.release()
            raise
        return folder

    @classmethod
    @contextlib.contextmanager
    def held(cls, path: str | Path) -> Iterator["RunFolder"]:
        """The folder read, with its lock held meanwhile (``testbed report`` regenerating its
        derived files must not race a writer); refuses like ``open_for_writing`` but rewrites
        nothing. A folder where no lock can be taken (read-only, archived) is just read."""
        folder = cls.open(path)
        lock = FolderLock(folder.path)
        try:
            lock.acquire()
        except FolderBusy:
            raise _busy(folder.path) from None
        except OSError:
            lock = None
        try:
            yield cls.open(path)  # as of the lock: a writer may just have ended
        finally:
            if lock is not None:
                lock.release()

    def _clean(self) -> None:
        for tmp in [*self.path.glob(TMP_GLOB), *(self.path / EVENTS_DIR).glob(TMP_GLOB)]:
            with contextlib.suppress(OSError):
                tmp.unlink()
        listed = {self._events_name(f.config_id, f.repeat) for f in self.record.finished}
        for orphan in (self.path / EVENTS_DIR).glob("*.parquet"):
            if orphan.name not in listed:
                orphan.unlink()
        parts = self.path / RESOURCE_PARTS_DIR
        for part in parts.glob("*.parquet") if parts.is_dir() else []:
            if part.name not in listed:
                part.unlink()

    def release(self) -> None:
        """Give the folder's lock back (the process's exit does too, however it exits)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _require_lock(self) -> None:
        if self._lock is None or not self._lock.held:
            raise RuntimeError(f"{self.path}: written without holding its lock (use create or open_for_writing)")

    def write_manifest(self) -> None:
        self._require_lock()
        atomic_write_text(self.path / MANIFEST_FILE, json.dumps(self.record.to_json(), indent=2) + "\n")

    def update(self, **changes: Any) -> None:
        """Change manifest fields and write the manifest (start-up facts: cluster, clock offsets)."""
        self._record = self.record.with_(**changes)
        self._view = None
        self.write_manifest()

    def set_status(self, status: RunStatus | str, error: Optional[str] = None) -> None:
        """Settle the run's status: the journal is folded into the manifest, which is written,
        and only then the journal removed (a kill in between leaves both: folding is idempotent)."""
        changes: dict[str, Any] = {"status": RunStatus(status), "ended": now_iso()}
        if error:
            changes["error"] = error
        self._consolidate_resources()
        self.update(**changes)
        with contextlib.suppress(FileNotFoundError):
            (self.path / JOURNAL_FILE).unlink()

    def begin_resume(self, missing: int) -> None:
        """Mark a folder being resumed as running again (same run id) under this process,
        noting when and how many config repeats were missing."""
        started = now_iso()
        self.update(resumed=[*self.record.resumed, Resumed(at=started, missing=missing, argv=list(sys.argv))],
                    status=RunStatus.RUNNING, ended=None, error=None,
                    owner=Owner(host=socket.gethostname(), pid=os.getpid(), started=started))

    @staticmethod
    def _events_name(config_id: str, repeat: int) -> str:
        return f"{config_id}-r{repeat}.parquet"

    def write_config_events(self, config_id: str, repeat: int, columns: dict[str, list],
                            status: ConfigStatus | str = ConfigStatus.OK, info: Optional[dict[str, Any]] = None,
                            resources: Optional[dict[str, list]] = None) -> Path:
        """Record one config repeat that ended: its events (and monitor samples) renamed into
        place, then its journal line, which is what makes it finished."""
        self._require_lock()
        table = pa.Table.from_pydict(columns, schema=arrow_schema())
        name = self._events_name(config_id, repeat)
        target = atomic_write_bytes(self.path / EVENTS_DIR / name, _parquet_bytes(table))
        if resources is not None:
            parts = self.path / RESOURCE_PARTS_DIR
            parts.mkdir(exist_ok=True)
            atomic_write_bytes(parts / name, _parquet_bytes(pa.Table.from_pydict(resources, schema=resource_schema())))
        entry = Finished.model_validate({"config_id": config_id, "repeat": repeat, "status": ConfigStatus(status),
                                         "events": len(table), **(info or {})})
        append_line(self.path / JOURNAL_FILE, entry.model_dump_json())
        self._pending.append(entry)
        return target

    def append_resources(self, columns: dict[str, list], config_id: Optional[str] = None, repeat: int = 0) -> None:
        """Add monitor samples of one config (a part, folded into resources.parquet at the end)."""
        self._require_lock()
        config_id = config_id or (columns["config_id"][0] if columns.get("config_id") else "samples")
        parts = self.path / RESOURCE_PARTS_DIR
        parts.mkdir(exist_ok=True)
        table = pa.Table.from_pydict(columns, schema=resource_schema())
        atomic_write_bytes(parts / self._events_name(config_id, repeat), _parquet_bytes(table))

    def _consolidate_resources(self) -> None:
        parts = self.path / RESOURCE_PARTS_DIR
        if not parts.is_dir():
            return
        table = self._resource_table()
        if table is not None:
            atomic_write_bytes(self.path / RESOURCES_FILE, _parquet_bytes(table))
        shutil.rmtree(parts, ignore_errors=True)

    def write_summary(self, frame=None) -> None:
        """Write ``summary.csv`` (default: ``self.summary()``)."""
        frame = self.summary() if frame is None else frame
        atomic_write_text(self.path / "summary.csv", frame.to_csv(index=False))

    def write_trace(self, trace: dict[str, Any]) -> Path:
        path = self.path / "trace.json"
        atomic_write_text(path, json.dumps(trace, separators=(",", ":")))
        return path

    # -- reading ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> "RunFolder":
        """A run folder to read (no lock taken, nothing written), its journal folded in."""
        path = Path(path)
        manifest_path = path / MANIFEST_FILE
        if not manifest_path.is_file():
            raise UserError(f"{path} is not a run folder (no manifest.json); give a folder made by `testbed run`")
        try:
            doc = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserError(f"{manifest_path} is corrupt ({err}); the run folder cannot be read") from None
        folder = cls(path, load_manifest(doc, str(manifest_path)))
        folder._pending = _read_journal(path / JOURNAL_FILE)
        return folder

    def node_ips(self) -> dict[str, str]:
        """Node id -> IP of every node the run saw (the cluster at start, and every actor's node)."""
        ips = {n["node"]: n["ip"] for n in self.record.cluster}
        ips.update(self.record.nodes)
        return ips

    def event_files(self) -> list[Path]:
        """The events files of the finished config repeats (an unlisted file is not the truth)."""
        out = [self.path / EVENTS_DIR / self._events_name(f.config_id, f.repeat) for f in self.record.finished]
        return sorted(p for p in out if p.is_file())

    def events(self):
        """All events as a pandas DataFrame (empty, with the right columns, when none)."""
        files = self.event_files()
        if not files:
            return arrow_schema().empty_table().to_pandas()
        return pa.concat_tables([pq.read_table(f, schema=arrow_schema()) for f in files]).to_pandas()

    def _resource_table(self) -> Optional[pa.Table]:
        tables = []
        path = self.path / RESOURCES_FILE
        if path.is_file():
            tables.append(pq.read_table(path, schema=resource_schema()))
        parts = self.path / RESOURCE_PARTS_DIR
        listed = {self._events_name(f.config_id, f.repeat) for f in self.record.finished}
        for part in sorted(parts.glob("*.parquet")) if parts.is_dir() else []:
            if part.name in listed:
                tables.append(pq.read_table(part, schema=resource_schema()))
        return pa.concat_tables(tables) if tables else None

    def resources(self):
        """The monitor samples as a DataFrame, or None when the run has none."""
        table = self._resource_table()
        return None if table is None else table.to_pandas()

    def summary(self, events=None):
        """The summary, derived from the events and the manifest: the one way to get it (give
        ``events`` when they are already loaded)."""
        from testbed.records.summary import summarize
        events = self.events() if events is None else events
        return summarize(events, self.record.configs, finished=self.record.finished)

    def troubled(self) -> list[Finished]:
        return self.record.troubled()

    def missing(self, config_ids: Optional[Iterable[str]] = None) -> list[tuple[str, int]]:
        """The (config id, repeat) pairs not finished, in sweep order."""
        ids = list(config_ids) if config_ids is not None else [c["config_id"] for c in self.record.configs]
        done = self.record.finished_keys()
        return [(cid, r) for cid in ids for r in range(self.record.repeats) if (cid, r) not in done]
