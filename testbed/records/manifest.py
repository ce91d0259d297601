"""The run folder's manifest as a typed, frozen, versioned record.

``Manifest`` is what ``manifest.json`` holds; it is immutable once built (a change is a new
record: ``manifest.with_(...)``), checks its values when built, and is written as one JSON
document with a ``schema_version``. ``load_manifest`` reads every version ever written,
through ``migrate``: one small step per version, so an old folder stays readable.

Versions:

- 1: the untyped dictionary (its fields grew while the number stayed 1: a ``finished``
  entry may lack ``status``, ``lost_updates``, ``train_cpu_s``; a config may lack
  ``apply_seconds``; the spec may lack the reliability fields).
- 2: every field typed and filled; run and config statuses are enums; ``owner`` names the
  process that holds (or held) the folder's lock; a ``finished`` entry carries the IPs of
  the nodes its actors ran on (``node_ips``), so the journal needs no second write.

Terms: a *run status* says where the run as a whole stands; a *config status* says how one
config repeat ended. ``interrupted`` is never written by a run that ends: it is what a reader
shows for a folder still marked ``running`` whose owner is gone (a ``kill -9``, a lost node).
"""

from __future__ import annotations

import enum
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from testbed.config.errors import UserError
from testbed.config.spec import with_reliability_defaults

__all__ = ["MANIFEST_SCHEMA_VERSION", "RunStatus", "ConfigStatus", "Owner", "Finished", "Resumed", "DataSet",
           "Manifest", "migrate", "load_manifest"]

MANIFEST_SCHEMA_VERSION = 2


class RunStatus(str, enum.Enum):
    RUNNING = "running"          # a writer holds the folder (or held it and vanished: see INTERRUPTED)
    COMPLETE = "complete"        # every config repeat finished (some may have failed or timed out)
    INCOMPLETE = "incomplete"    # stopped by Ctrl-C or SIGTERM; `--resume` finishes it
    FAILED = "failed"            # the run itself stopped on an error (`error` says which)
    INTERRUPTED = "interrupted"  # shown, never written: marked running, but its owner is gone


class ConfigStatus(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"            # an actor died or raised
    TIMED_OUT = "timed_out"      # stopped at its deadline


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


class Owner(_Record):
    """The process that writes the folder: enough to tell whether it is still alive."""
    host: str
    pid: int
    started: str

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}, since {self.started}"


class Finished(_Record):
    """One config repeat that ended, with what its events alone cannot say."""
    config_id: str
    repeat: int
    status: ConfigStatus = ConfigStatus.OK
    events: int = 0
    server_updates: list[int] = Field(default_factory=list)
    lost_updates: list[int] = Field(default_factory=list)
    server_restarts: list[int] = Field(default_factory=list)
    actor_nodes: dict[str, str] = Field(default_factory=dict)
    node_ips: dict[str, str] = Field(default_factory=dict)
    deadline_s: Optional[float] = None
    train_cpu_s: dict[str, float] = Field(default_factory=dict)
    # Ray's own processes on the driver's node during training: CPU seconds by process.
    ray_background_cpu_s: dict[str, float] = Field(default_factory=dict)
    # The virtual workers each worker process hosted (process p: the list at p).
    worker_processes: list[list[int]] = Field(default_factory=list)
    error: Optional[str] = None

    @property
    def key(self) -> tuple[str, int]:
        return self.config_id, self.repeat


class Resumed(_Record):
    at: str
    missing: int
    argv: list[str] = Field(default_factory=list)


class DataSet(_Record):
    directory: str
    fs_type: str
    cache_bypass: bool
    bytes: int


class Manifest(_Record):
    schema_version: int = MANIFEST_SCHEMA_VERSION
    run_id: str
    experiment: str
    status: RunStatus = RunStatus.RUNNING
    started: str
    ended: Optional[str] = None
    error: Optional[str] = None
    owner: Optional[Owner] = None
    host: str = ""
    platform: str = ""
    argv: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    git_commit: Optional[str] = None
    spec: dict[str, Any]
    repeats: int = 1
    configs: list[dict[str, Any]]
    finished: list[Finished] = Field(default_factory=list)
    resumed: list[Resumed] = Field(default_factory=list)
    nodes: dict[str, str] = Field(default_factory=dict)          # node id -> IP, every actor's node
    cluster: list[dict[str, Any]] = Field(default_factory=list)  # the nodes alive at start
    clock_offsets: dict[str, Any] = Field(default_factory=dict)
    monitor_interval_s: Optional[float] = None
    cache_bypass: Optional[bool] = None
    data: list[DataSet] = Field(default_factory=list)
    # A draw from a validation space (``testbed validate SPACE --sample K``): the space, k, the
    # seed and where it came from, the noise-floor configs.
    sample: Optional[dict[str, Any]] = None

    def with_(self, **changes: Any) -> "Manifest":
        """A copy with ``changes``, validated like a new record."""
        return Manifest.model_validate({**self.model_dump(), **changes})

    def with_finished(self, entries: list[Finished]) -> "Manifest":
        """``entries`` recorded (a later entry of the same config repeat replaces the earlier),
        their nodes added to ``nodes``."""
        by_key = {f.key: f for f in self.finished}
        nodes = dict(self.nodes)
        for entry in entries:
            by_key[entry.key] = entry
            nodes.update(entry.node_ips)
        return self.with_(finished=list(by_key.values()), nodes=nodes)

    def finished_keys(self) -> set[tuple[str, int]]:
        return {f.key for f in self.finished}

    def troubled(self) -> list[Finished]:
        """The config repeats that failed or timed out."""
        return [f for f in self.finished if f.status is not ConfigStatus.OK]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# -- migration -------------------------------------------------------------------------------
def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc)
    doc["spec"] = with_reliability_defaults(doc.get("spec") or {})
    doc["configs"] = [{"apply_seconds": 0.0, **c} for c in doc.get("configs", [])]
    finished = []
    for f in doc.get("finished", []):
        f = {"status": "ok", **f}
        f.setdefault("error", None)
        finished.append(f)
    doc["finished"] = finished
    doc.setdefault("started", "")
    doc["schema_version"] = 2
    return doc


# version -> the step that lifts a document of that version by one
_MIGRATIONS = {1: _v1_to_v2}


def migrate(doc: dict[str, Any], source: str = "manifest.json") -> dict[str, Any]:
    """``doc`` (any version this or an older testbed wrote) as the current version."""
    version = doc.get("schema_version", 1)
    if not isinstance(version, int) or version < 1:
        raise UserError(f"{source}: schema_version {version!r} is not a manifest version; the run folder cannot be read")
    if version > MANIFEST_SCHEMA_VERSION:
        raise UserError(f"{source} was written by a newer ddnn-testbed (schema {version}, this one reads up to "
                        f"{MANIFEST_SCHEMA_VERSION}); upgrade ddnn-testbed to read it")
    while version < MANIFEST_SCHEMA_VERSION:
        doc = _MIGRATIONS[version](doc)
        version = doc["schema_version"]
    return doc


def load_manifest(doc: dict[str, Any], source: str = "manifest.json") -> Manifest:
    """The record of a manifest document of any version; a ``UserError`` naming the bad fields."""
    if not isinstance(doc, dict):
        raise UserError(f"{source} is not a JSON object; the run folder cannot be read")
    try:
        return Manifest.model_validate(migrate(doc, source))
    except ValidationError as err:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in err.errors()[:5])
        raise UserError(f"{source}: not a manifest this testbed can read (bad or missing: {fields})") from None
