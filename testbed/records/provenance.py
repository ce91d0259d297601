"""Where and with what a run was made: the facts its manifest records at creation, and the
default name of its folder."""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from pathlib import Path
from typing import Optional

from testbed import __version__

__all__ = ["now_iso", "default_run_dir", "git_commit", "software_versions"]


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
