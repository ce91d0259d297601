"""fio: the pure builder, the parser on JSON saved from real fio 3.33 runs, the runner's errors."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from testbed.config.errors import UserError
from testbed.data.fio import FioError, FioJob, FioNotFound, build_command, find_fio, parse_fio_json, run_fio, run_job

FIXTURES = Path(__file__).parent.parent / "fixtures" / "fio"
MiB = 2**20


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_builder_says_everything_the_measurement_depends_on() -> None:
    job = FioJob("seqread", "read", MiB, "calib.bin", 16 * MiB, numjobs=4, offset_increment_bytes=16 * MiB,
                 runtime_s=1.5)
    args = build_command(job, fio="/opt/fio")
    assert args[0] == "/opt/fio"
    for flag in ("--name=seqread", "--filename=calib.bin", "--rw=read", "--bs=1048576", "--size=16777216",
                 "--numjobs=4", "--offset_increment=16777216", "--direct=1", "--ioengine=psync", "--iodepth=1",
                 "--runtime=1500ms", "--time_based", "--group_reporting", "--output-format=json"):
        assert flag in args
    one = build_command(FioJob("r", "randread", 4096, "f", MiB, direct=False, time_based=False))
    assert "--direct=0" in one and "--time_based" not in one
    assert not any(a.startswith("--offset_increment") for a in one)


@pytest.mark.parametrize("kwargs, match", [
    ({"rw": "write"}, "rw"),
    ({"filename": "/abs/path"}, "relative"),
    ({"size_bytes": 100}, "size_bytes"),
    ({"runtime_s": 0}, "runtime_s"),
])
def test_job_rejects_what_fio_would_misread(kwargs: dict, match: str) -> None:
    base = {"name": "j", "rw": "read", "block_bytes": 4096, "filename": "f", "size_bytes": MiB}
    with pytest.raises(ValueError, match=match):
        FioJob(**{**base, **kwargs})


@pytest.mark.parametrize("name, numjobs, rw_bs", [
    ("seq_1job_1m.json", 1, MiB),
    ("seq_2jobs_1m.json", 2, MiB),
    ("seq_4jobs_1m.json", 4, MiB),
    ("randread_4k.json", 1, 4096),
    ("randread_64k.json", 1, 65536),
])
def test_parser_reads_real_reports(name: str, numjobs: int, rw_bs: int) -> None:
    text = _fixture(name)
    raw = json.loads(text)["jobs"][0]["read"]
    result = parse_fio_json(text)
    assert result.fio_version == "fio-3.33"
    assert result.numjobs == numjobs
    assert result.read_bytes_per_s == raw["bw_bytes"] > 0
    assert result.read_iops == pytest.approx(raw["iops"])
    # bandwidth and IOPS of one report agree through the block size
    assert result.read_bytes_per_s == pytest.approx(result.read_iops * rw_bs, rel=0.01)
    assert list(result.clat_percentiles_s) == ["p50", "p90", "p99", "p99.9"]
    assert result.clat_percentiles_s["p50"] == raw["clat_ns"]["percentile"]["50.000000"] * 1e-9
    assert 0 < result.clat_percentiles_s["p50"] <= result.clat_percentiles_s["p99.9"] < 1.0
    assert 0 < result.mean_latency_s < 1.0 and 1.0 <= result.runtime_s < 3.0


def test_parser_skips_text_before_the_json() -> None:
    text = _fixture("seq_1job_note_before_json.json")
    assert text.startswith("note: both iodepth")
    assert parse_fio_json(text).read_bytes_per_s > 0
    assert parse_fio_json(text + "\nfio: trailing noise\n").read_bytes_per_s > 0


def test_parser_understands_older_field_names() -> None:
    """fio 2.x reported bw and io in KiB, clat in microseconds, and had no *_ns blocks."""
    old = {"fio version": "fio-2.2.10", "jobs": [{"jobname": "j", "error": 0, "job options": {"numjobs": "2"},
           "read": {"io_kbytes": 2048, "bw": 1024, "iops": 256.0, "runtime": 2000,
                    "clat": {"percentile": {"50.000000": 250, "99.000000": 900}}, "lat": {"mean": 300.0}}}]}
    result = parse_fio_json(json.dumps(old))
    assert result.read_bytes_per_s == 1024 * 1024 and result.read_bytes == 2048 * 1024
    assert result.clat_percentiles_s == {"p50": pytest.approx(250e-6), "p99": pytest.approx(900e-6)}
    assert result.mean_latency_s == pytest.approx(300e-6) and result.numjobs == 2


def test_parser_sums_jobs_reported_separately() -> None:
    doc = json.loads(_fixture("seq_1job_1m.json"))
    doc["jobs"] = [doc["jobs"][0], doc["jobs"][0]]
    result = parse_fio_json(json.dumps(doc))
    assert result.numjobs == 2
    assert result.read_bytes_per_s == 2 * doc["jobs"][0]["read"]["bw_bytes"]


@pytest.mark.parametrize("text, match", [
    ("fio: unrecognized option '--bogus'\n", "no JSON report"),
    ('{"fio version": "fio-3.33", "jobs": []}', "no jobs"),
    ('{"jobs": [{"jobname": "j", "error": 5, "read": {}}]}', "error 5"),
])
def test_parser_errors_are_user_errors_naming_the_problem(text: str, match: str) -> None:
    with pytest.raises(FioError, match=match) as err:
        parse_fio_json(text)
    assert isinstance(err.value, UserError)


def test_missing_fio_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without fio on it
    with pytest.raises(FioNotFound) as err:
        find_fio()
    assert "apt-get install fio" in str(err.value) and isinstance(err.value, UserError)
    with pytest.raises(FioNotFound):
        run_job(FioJob("j", "read", 4096, "f", 4096), tmp_path)
    with pytest.raises(FioNotFound):
        run_fio(["fio-that-does-not-exist", "--version"], tmp_path, timeout_s=5)


def _fake_fio(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fio"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_runner_kills_fio_at_the_timeout(tmp_path: Path) -> None:
    fake = _fake_fio(tmp_path, "sleep 30")
    t0 = time.monotonic()
    with pytest.raises(FioError, match="did not finish within 0.5 s"):
        run_fio([fake, "--name=x"], tmp_path, timeout_s=0.5)
    assert time.monotonic() - t0 < 10


def test_runner_reports_fio_failures_with_its_last_line(tmp_path: Path) -> None:
    fake = _fake_fio(tmp_path, "echo 'fio: pid=1, err=22/file:filesetup.c' >&2; echo 'fio: bad bs' >&2; exit 1")
    with pytest.raises(FioError, match="exit code 1: fio: bad bs"):
        run_fio([fake], tmp_path, timeout_s=10)


def test_runner_returns_stdout_in_the_given_directory(tmp_path: Path) -> None:
    fake = _fake_fio(tmp_path, 'echo "$(pwd)"')
    (tmp_path / "sub").mkdir()
    assert os.path.samefile(run_fio([fake], tmp_path / "sub", timeout_s=10).strip(), tmp_path / "sub")
