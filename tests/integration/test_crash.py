"""`kill -9` of the driver at several moments, then `--resume`: real Ray, real processes.

After each kill the folder must end ``complete`` on resume, every config's events must come
from one attempt (each worker has exactly ``steps`` compute events, with distinct steps, all
after that attempt's setup began), and the finished config repeats must be those of an
uninterrupted run. Two resumes at once: one completes, the other is refused naming the owner.
"""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from testbed.records.manifest import RunStatus
from testbed.records.rundir import JOURNAL_FILE, RunFolder

pytestmark = pytest.mark.integration

STEPS = 8
# Two configs; worker 1 dies at step 4 of each and Ray restarts it (a crash file in between).
SPEC = f"""\
name: crashy
workers: 2
gradient_bytes: 4KiB
workload: {{steps: {STEPS}}}
compute: {{mode: sleep, seconds: 30ms}}
restarts: 1
faults:
  - {{kind: kill_worker, worker: 1, step: 4}}
sweep:
  seed: [1, 2]
"""


def cli(*args):
    return [sys.executable, "-m", "testbed", *args]


def start(*args):
    return subprocess.Popen(cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def journal_lines(run):
    try:
        return len((run / JOURNAL_FILE).read_text().splitlines())
    except OSError:
        return 0


def wait_for(what, proc, timeout_s=180):
    deadline = time.monotonic() + timeout_s
    while not what():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the moment to kill at never came"
        time.sleep(0.02)


def kill_9(proc):
    """SIGKILL the driver, then end what it started that outlived it (by pid). Not a test of
    fate sharing (test_ray_session's is): Ray's agents take a minute to notice, so what is
    left after a moment is killed rather than waited for."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    _, alive = psutil.wait_procs(children, timeout=2)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=15)


def one_attempt_each(run):
    """Assert every config's events come from one attempt; returns the finished (config, repeat) pairs."""
    folder = RunFolder.open(run)
    ev = folder.events()
    for (config_id, _repeat), frame in ev.groupby(["config_id", "repeat"]):
        setup = frame[(frame.role == "driver") & (frame.phase == "setup")]
        assert len(setup) == 1, (config_id, "driver spans of more than one attempt")
        assert (frame.start_ns >= setup.start_ns.iloc[0]).all(), (config_id, "events from before this attempt")
        for worker in ("worker-0", "worker-1"):
            steps = frame[(frame.actor == worker) & (frame.phase == "compute")].step
            assert sorted(steps) == list(range(STEPS)), (config_id, worker, sorted(steps))
        assert (frame.phase == "restart").sum() == 1  # this attempt's own fault, once
    assert not (run / "state").exists()
    return {(f.config_id, f.repeat, f.status.value) for f in folder.record.finished}


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("spec") / "crashy.yaml"
    path.write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def uninterrupted(spec_file, tmp_path_factory):
    run = tmp_path_factory.mktemp("whole") / "run"
    done = subprocess.run(cli("run", str(spec_file), "--out", str(run), "--monitor-interval", "0"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return one_attempt_each(run)


def resume(run):
    done = subprocess.run(cli("run", "--resume", str(run), "--monitor-interval", "0"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_kill_9_after_a_worker_fault_fired_then_resume_starts_the_config_clean(spec_file, uninterrupted, tmp_path):
    run = tmp_path / "run"
    proc = start("run", str(spec_file), "--out", str(run), "--monitor-interval", "0")
    # the second config's worker 1 has crashed and left its crash file: the driver is in train
    wait_for(lambda: journal_lines(run) == 1 and any((run / "state").glob("*/worker-1.crash")), proc)
    kill_9(proc)
    assert list((run / "state").glob("*/worker-1.crash"))  # what the killed attempt left
    assert RunFolder.open(run).status is RunStatus.INTERRUPTED
    done = resume(run)
    assert "interrupted, 1 of 2 config repeat(s) missing" in done.stderr
    assert RunFolder.open(run).status is RunStatus.COMPLETE
    assert one_attempt_each(run) == uninterrupted


def test_kill_9_during_the_final_write_then_resume_settles_complete(spec_file, uninterrupted, tmp_path):
    run = tmp_path / "run"
    proc = start("run", str(spec_file), "--out", str(run), "--monitor-interval", "0")
    wait_for(lambda: journal_lines(run) == 2, proc)  # every config recorded: Ray shuts down, then the summary
    kill_9(proc)
    status = json.loads((run / "manifest.json").read_text())["status"]
    assert status == "running", "killed too late to test the final write"
    done = resume(run)
    assert "interrupted, 0 of 2 config repeat(s) missing" in done.stderr
    folder = RunFolder.open(run)
    assert folder.status is RunStatus.COMPLETE and (run / "summary.csv").is_file() and (run / "trace.json").is_file()
    assert not (run / JOURNAL_FILE).exists()
    assert one_attempt_each(run) == uninterrupted


def test_kill_9_during_setup_then_two_resumes_at_once(spec_file, uninterrupted, tmp_path):
    run = tmp_path / "run"
    proc = start("run", str(spec_file), "--out", str(run), "--monitor-interval", "0")
    wait_for(lambda: (run / "manifest.json").is_file(), proc)  # the folder exists; Ray and the first actors start
    kill_9(proc)
    assert journal_lines(run) == 0 and RunFolder.open(run).status is RunStatus.INTERRUPTED

    first = start("run", "--resume", str(run), "--monitor-interval", "0")

    def first_owns_it():
        try:
            owner = json.loads((run / "manifest.json").read_text()).get("owner") or {}
        except ValueError:  # between the rename and... never half a file; but be safe about JSON
            return False
        return owner.get("pid") == first.pid
    wait_for(first_owns_it, first)
    second = subprocess.run(cli("run", "--resume", str(run), "--monitor-interval", "0"),
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert f"is being written by pid {first.pid} on {os.uname().nodename}" in second.stderr
    assert len([line for line in second.stderr.splitlines() if line.startswith("error:")]) == 1
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert RunFolder.open(run).status is RunStatus.COMPLETE
    assert one_attempt_each(run) == uninterrupted
    assert len(RunFolder.open(run).record.resumed) == 1  # the refused resume left no trace
