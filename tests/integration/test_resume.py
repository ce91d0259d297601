"""Ctrl-C in the middle of a sweep, then --resume: the same configs as an uninterrupted run."""

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from testbed.config.errors import UserError
from testbed.records.rundir import RunFolder

pytestmark = pytest.mark.integration

SPEC = """\
name: resumable
workers: 1
gradient_bytes: 16KiB
workload: {steps: 25}
compute: {mode: sleep, seconds: 20ms}
sweep:
  seed: [1, 2, 3, 4]
"""


def cli(*args, **kwargs):
    return [sys.executable, "-m", "testbed", *args]


def counts(folder):
    """(config, repeat) -> events per phase, without the driver's and the timing itself."""
    ev = RunFolder.open(folder).events()
    ev = ev[ev.role != "driver"]
    return {k: dict(g.phase.value_counts()) for k, g in ev.groupby(["config_id", "repeat"])}


def finished(folder):
    """The config repeats recorded so far (the manifest plus the journal a running writer appends to)."""
    try:
        return RunFolder.open(folder).manifest["finished"]
    except UserError:  # no manifest yet
        return []


def test_sigint_mid_sweep_then_resume_gives_the_uninterrupted_configs(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    run = tmp_path / "interrupted"
    # A shell's background job may inherit SIGINT ignored; a user's Ctrl-C arrives to a default handler.
    proc = subprocess.Popen(cli("run", str(spec), "--out", str(run), "--monitor-interval", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    deadline = time.monotonic() + 120
    while len(finished(run)) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.5)  # into the next config: actors and a placement group exist
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "incomplete"
    done = {(f["config_id"], f["repeat"]) for f in manifest["finished"]}
    assert 1 <= len(done) < 4
    assert set(counts(run)) == done  # finished configs intact, nothing half-written
    _, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, f"Ray processes left behind: {alive}"
    run_id = manifest["run_id"]

    # The uninterrupted run to compare with, made meanwhile (its own local Ray instance).
    whole = tmp_path / "whole"
    straight = subprocess.Popen(cli("run", str(spec), "--out", str(whole), "--monitor-interval", "0"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    try:
        changed = subprocess.run(cli("run", str(spec), "--resume", str(run), "--set", "workload.steps=5"),
                                 capture_output=True, text=True, timeout=60)
        assert changed.returncode == 2 and "workload.steps" in changed.stderr and "Traceback" not in changed.stderr

        resumed = subprocess.run(cli("run", "--resume", str(run), "--monitor-interval", "0"),
                                 capture_output=True, text=True, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["status"] == "complete" and manifest["run_id"] == run_id
        assert len(manifest["resumed"]) == 1 and manifest["resumed"][0]["missing"] == 4 - len(done)
    except BaseException:
        straight.terminate()  # a failure above: do not leave the other run going
        straight.communicate(timeout=60)
        raise
    _, straight_err = straight.communicate(timeout=180)
    assert straight.returncode == 0, straight_err
    assert counts(run) == counts(whole)
    assert len(counts(run)) == 4
    assert RunFolder.open(run).summary().config_id.tolist() == RunFolder.open(whole).summary().config_id.tolist()
