"""What every benchmark figure shares: a small local Ray, the result record, the results
file and the table.

Terms:
- *check*: one measured value against one target (``value >= target`` or ``<=``).
- *figure*: one numbered figure of the benchmark suite (e.g. ``apply_bandwidth``): one or
  more checks, the raw numbers behind them, the machine's load average while it ran.
  A figure is met when all its checks are.

The results file is one JSON document (``SCHEMA_VERSION``) with one entry per figure;
running a subset (``--only``) into a folder that has one replaces those entries and keeps
the others. Where it goes: ``--out DIR`` (``DIR/results.json``), by default a new folder
``bench-results/<date>-<time>/`` under the current directory; the source checkout's own
``benchmarks/results.json`` only when asked (``--update-repo-results``), so an installed
copy never writes inside its installation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import os
import platform
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from testbed.records.atomic import atomic_write_text

__all__ = ["Check", "Figure", "ray_local", "load_average", "now_iso", "versions", "write_results",
           "read_results", "format_table", "SCHEMA_VERSION", "RESULTS_NAME", "default_out_dir", "repo_results_dir"]

SCHEMA_VERSION = 1
RESULTS_NAME = "results.json"
_OPS = (">=", "<=")


@dataclasses.dataclass(frozen=True)
class Check:
    """One measured value against its target; ``met`` is derived, never passed in."""
    name: str
    value: Optional[float]   # None: could not be measured (the figure says why in its note)
    target: float
    op: str                  # ">=" or "<="
    unit: str = ""

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"check {self.name!r}: op must be one of {_OPS}, got {self.op!r}")

    @property
    def met(self) -> bool:
        if self.value is None or self.value != self.value:  # None or NaN
            return False
        return self.value >= self.target if self.op == ">=" else self.value <= self.target

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "met": self.met}


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure's result: its checks, raw numbers, and the conditions it was measured in."""
    name: str
    title: str
    checks: tuple[Check, ...]
    raw: dict[str, Any]
    load_average: tuple[float, float, float]
    date: str
    note: str = ""
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.checks:
            raise ValueError(f"figure {self.name!r} has no checks")

    @property
    def met(self) -> bool:
        return all(c.met for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "met": self.met,
                "checks": [c.to_dict() for c in self.checks], "note": self.note, "quick": self.quick,
                "load_average": list(self.load_average), "date": self.date, "raw": self.raw}


def load_average() -> tuple[float, float, float]:
    """The machine's 1, 5 and 15 minute load averages (how busy the shared machine was)."""
    return tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[return-value]


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "cpu_count": str(os.cpu_count())}
    for mod in ("ray", "numpy", "testbed"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing package is just not listed
            pass
    return out


@contextlib.contextmanager
def ray_local(object_store_bytes: int = 512 * 2**20, num_cpus: int = 2) -> Iterator[Any]:
    """A fresh local Ray for one figure (never a cluster someone else started, nor
    RAY_ADDRESS), started as every run starts it, shut down after, so no figure inherits
    another's processes or object-store state."""
    from testbed.runner.cluster import ray_session
    with ray_session("local", num_cpus=num_cpus, object_store_bytes=object_store_bytes, fresh=True,
                     logging_level=logging.ERROR) as ray:
        yield ray


def default_out_dir(root: str | Path = "bench-results") -> Path:
    """A new folder for one benchmark run: ``<root>/<date>-<time>`` (a suffix if it exists)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = Path(root) / stamp, 1
    while path.exists():
        n += 1
        path = Path(root) / f"{stamp}-{n}"
    return path


def repo_results_dir() -> Optional[Path]:
    """The source checkout's ``benchmarks/`` folder (the committed figures), or None when this
    copy of the testbed is not a checkout (installed by pip: no such folder beside it)."""
    root = Path(__file__).resolve().parents[2]
    folder = root / "benchmarks"
    if (root / "pyproject.toml").is_file() and (folder / RESULTS_NAME).is_file():
        return folder
    return None


def read_results(path: Path) -> dict[str, Any]:
    """The results document at ``path``; an empty one when there is none."""
    if not Path(path).is_file():
        return {"schema_version": SCHEMA_VERSION, "figures": {}}
    doc = json.loads(Path(path).read_text())
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    return doc


def write_results(figures: Sequence[Figure], path: Path, *, started: str,
                  load_start: tuple[float, float, float], quick: bool) -> dict[str, Any]:
    """Merge ``figures`` into the document at ``path`` (replacing entries of the same name) and
    write it atomically; returns the document."""
    path = Path(path)
    doc = read_results(path)
    doc["schema_version"] = SCHEMA_VERSION
    doc["last_run"] = {"started": started, "finished": now_iso(), "quick": quick,
                       "figures": [f.name for f in figures], "load_average_start": list(load_start),
                       "load_average_end": list(load_average()), "versions": versions()}
    for fig in figures:
        doc["figures"][fig.name] = {**fig.to_dict(), "versions": versions()}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(doc, indent=1, default=_jsonable) + "\n")
    return doc


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):  # numpy scalars and arrays
        return x.tolist()
    if isinstance(x, tuple):
        return list(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _fmt(value: Optional[float]) -> str:
    if value is None or value != value:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def format_table(figures: Sequence[dict[str, Any]]) -> str:
    """A plain-text table, one line per check, from figure dicts (as written to the file)."""
    header = ("figure", "check", "value", "target", "met", "load 1m")
    rows = []
    for fig in figures:
        for check in fig["checks"]:
            rows.append((fig["name"], check["name"], f"{_fmt(check['value'])} {check['unit']}".strip(),
                         f"{check['op']} {_fmt(check['target'])}", "yes" if check["met"] else "NO",
                         f"{fig['load_average'][0]:.1f}"))
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
