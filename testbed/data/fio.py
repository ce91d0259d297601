"""fio, in three parts: a pure command builder, a runner with a timeout, a pure parser.

``build_command(FioJob)`` -> argv; ``run_fio(argv, cwd, timeout_s)`` -> stdout;
``parse_fio_json(stdout)`` -> ``FioResult``. ``run_job`` chains the three.

Jobs name their file relative to the directory fio runs in, so fio's output (and the
fixtures saved from it) hold no machine paths. The parser tolerates text before the
JSON (fio prints "Laying out IO file" and warnings to stdout) and the field changes
between fio versions: ``bw_bytes`` (B/s) vs ``bw`` (KiB/s), ``clat_ns`` vs ``clat``
(microseconds), ``io_bytes`` vs ``io_kbytes``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
from typing import Any, Optional

from testbed.config.errors import UserError

__all__ = [
    "FioJob", "FioResult", "FioError", "FioNotFound", "FIO_INSTALL_HINT", "build_command", "find_fio",
    "run_fio", "parse_fio_json", "run_job",
]

FIO_INSTALL_HINT = "install it with `sudo apt-get install fio` (Debian/Ubuntu), `sudo dnf install fio` or `brew install fio`"
_PERCENTILES = "50:90:99:99.9"


class FioError(UserError):
    """fio ran but failed, timed out, or printed something that is not its JSON report."""


class FioNotFound(FioError):
    def __init__(self, searched: str = "PATH") -> None:
        super().__init__(f"fio is not installed (not found on {searched}); {FIO_INSTALL_HINT}, then re-run")


@dataclasses.dataclass(frozen=True)
class FioJob:
    """One fio job group: ``numjobs`` readers, each on its own ``size_bytes`` region of ``filename``
    (region k starts at ``k * offset_increment_bytes``)."""
    name: str
    rw: str                       # "read" (sequential) or "randread"
    block_bytes: int
    filename: str                 # relative to the directory fio runs in
    size_bytes: int
    numjobs: int = 1
    offset_increment_bytes: int = 0
    runtime_s: float = 2.0
    direct: bool = True
    ioengine: str = "psync"       # one blocking pread at a time, like the testbed's reader
    iodepth: int = 1
    time_based: bool = True       # False: read the region once (runtime_s then only caps it)

    def __post_init__(self) -> None:
        if self.rw not in ("read", "randread"):
            raise ValueError(f"rw must be 'read' or 'randread', got {self.rw!r}")
        if os.path.isabs(self.filename) or not self.filename:
            raise ValueError(f"filename must be relative to fio's working directory, got {self.filename!r}")
        if self.block_bytes <= 0 or self.size_bytes < self.block_bytes or self.numjobs < 1:
            raise ValueError(f"need block_bytes > 0, size_bytes >= block_bytes, numjobs >= 1: {self}")
        if self.runtime_s <= 0:
            raise ValueError(f"runtime_s must be > 0, got {self.runtime_s}")


def build_command(job: FioJob, fio: str = "fio") -> list[str]:
    """The argv running ``job``, one JSON report for the whole group (pure)."""
    return [
        fio, f"--name={job.name}", f"--filename={job.filename}", f"--rw={job.rw}",
        f"--bs={job.block_bytes}", f"--size={job.size_bytes}", f"--numjobs={job.numjobs}",
        *([f"--offset_increment={job.offset_increment_bytes}"] if job.offset_increment_bytes else []),
        f"--direct={int(job.direct)}", f"--ioengine={job.ioengine}", f"--iodepth={job.iodepth}",
        f"--runtime={max(1, round(job.runtime_s * 1000))}ms", *(["--time_based"] if job.time_based else []),
        "--group_reporting",
        f"--percentile_list={_PERCENTILES}", "--output-format=json",
    ]


def find_fio(search_path: Optional[str] = None) -> str:
    """fio's executable on ``search_path`` (default: $PATH), or ``FioNotFound``."""
    found = shutil.which("fio", path=search_path)
    if found is None:
        raise FioNotFound()
    return found


def run_fio(args: list[str], cwd: str | os.PathLike, timeout_s: float) -> str:
    """Run fio in ``cwd`` and return its stdout; kills fio and its job processes on timeout."""
    try:
        # Own session: fio forks one process per job, and a timeout must end them all.
        proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except FileNotFoundError:
        raise FioNotFound() from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise FioError(f"fio did not finish within {timeout_s:g} s ({' '.join(args[1:4])}); "
                       f"the disk may be very slow or hung, or raise the timeout") from None
    if proc.returncode:
        detail = (err.strip() or out.strip()).splitlines()
        raise FioError(f"fio failed with exit code {proc.returncode}: {detail[-1] if detail else 'no message'}")
    return out


@dataclasses.dataclass(frozen=True)
class FioResult:
    """The read side of one fio report, summed over its jobs."""
    fio_version: str
    jobname: str
    numjobs: int
    read_bytes_per_s: float
    read_iops: float
    read_bytes: int
    runtime_s: float
    mean_latency_s: float
    clat_percentiles_s: dict[str, float]  # "p50", "p99.9", ... completion latency per I/O


def _json_document(text: str) -> dict[str, Any]:
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            head = " ".join(text.split())[:120]
            raise FioError(f"fio printed no JSON report (is it fio >= 2.1 with --output-format=json?): {head!r}")
        line_start = start == 0 or text[start - 1] == "\n"
        if line_start:
            try:
                doc, _ = decoder.raw_decode(text, start)  # trailing text after the JSON is ignored
                if isinstance(doc, dict) and "jobs" in doc:
                    return doc
            except json.JSONDecodeError:
                pass
        pos = start + 1


def _latency(section: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """(clat block, its unit in seconds), whichever of the newer ns or older us names exists."""
    for key, unit_s in (("clat_ns", 1e-9), ("clat_us", 1e-6), ("clat", 1e-6)):
        if isinstance(section.get(key), dict):
            return section[key], unit_s
    return {}, 1.0


def _percentile_name(key: str) -> str:
    return f"p{float(key):g}"


def parse_fio_json(text: str) -> FioResult:
    """The read figures of fio's JSON report (pure); ``FioError`` if there are none."""
    doc = _json_document(text)
    jobs = doc.get("jobs") or []
    if not jobs:
        raise FioError("fio's report lists no jobs")
    failed = [j for j in jobs if j.get("error")]
    if failed:
        raise FioError(f"fio job {failed[0].get('jobname', '?')} failed with error {failed[0]['error']}")
    bw = iops = 0.0
    nbytes = 0
    runtime_ms = 0.0
    pcts: dict[str, float] = {}
    lat_sum = lat_n = 0.0
    for job in jobs:
        read = job.get("read") or {}
        bw += float(read["bw_bytes"]) if "bw_bytes" in read else float(read.get("bw", 0)) * 1024
        iops += float(read.get("iops", 0))
        nbytes += int(read["io_bytes"]) if "io_bytes" in read else int(read.get("io_kbytes", 0)) * 1024
        runtime_ms = max(runtime_ms, float(read.get("runtime", 0)))
        clat, unit_s = _latency(read)
        for key, value in (clat.get("percentile") or {}).items():
            name = _percentile_name(key)
            pcts[name] = max(pcts.get(name, 0.0), float(value) * unit_s)  # the worst job, if several
        lat_block = read.get("lat_ns") or {}
        lat_unit = 1e-9 if lat_block else 1e-6
        lat_block = lat_block or read.get("lat") or {}
        if "mean" in lat_block:
            lat_sum += float(lat_block["mean"]) * lat_unit
            lat_n += 1
    if bw <= 0:
        raise FioError("fio's report shows no reads (read bandwidth 0); was the job a read job?")
    options = {**(doc.get("global options") or {}), **(jobs[0].get("job options") or {})}
    numjobs = int(options.get("numjobs", 1)) if len(jobs) == 1 else len(jobs)
    return FioResult(
        fio_version=str(doc.get("fio version", "")), jobname=str(jobs[0].get("jobname", "")),
        numjobs=numjobs, read_bytes_per_s=bw, read_iops=iops, read_bytes=nbytes,
        runtime_s=runtime_ms / 1000, mean_latency_s=lat_sum / lat_n if lat_n else 0.0,
        clat_percentiles_s=dict(sorted(pcts.items(), key=lambda kv: float(kv[0][1:]))),
    )


def run_job(job: FioJob, directory: str | os.PathLike, timeout_s: Optional[float] = None,
            fio: Optional[str] = None) -> FioResult:
    """Build, run (in ``directory``) and parse one job; the default timeout allows for laying
    out the file and fio's start-up on top of the runtime."""
    args = build_command(job, fio or find_fio())
    return parse_fio_json(run_fio(args, directory, timeout_s if timeout_s is not None else job.runtime_s + 60))
