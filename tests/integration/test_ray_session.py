"""How the testbed starts and joins Ray (``testbed.runner.cluster.ray_session``), on real Ray:
a local instance on loopback that dies with its driver, RAY_ADDRESS, and ``ray job submit``
against a head started with ``ray start --head`` and its dashboard."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TINY = "name: jobsmoke\nworkload: {steps: 3}\ncompute: {seconds: 1ms}\ngradient_bytes: 4KiB\n"
LOCAL_DRIVER = """
import sys, time
from testbed.runner.cluster import ray_session
with ray_session("local", num_cpus=1, object_store_bytes=128 * 2**20) as ray:
    ray.get(ray.remote(num_cpus=0)(lambda: 1).remote())
    print("ready", flush=True)
    time.sleep(600)
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gone(pids, timeout_s=90.0):
    """The pids still alive after waiting up to ``timeout_s`` (zombies count as gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(1.0)


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_local_driver():
    proc = subprocess.Popen([sys.executable, "-c", LOCAL_DRIVER], stdout=subprocess.PIPE, text=True, env=_env(),
                            cwd=REPO)
    line = proc.stdout.readline()
    assert line.strip() == "ready", line
    return proc, [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]


# How long the killed driver's processes may take to go: the GCS, the raylet and the workers go
# at once; the dashboard and runtime-env agents, finding the raylet gone, report its unexpected
# end to the GCS (gone too) and wait out that call's fixed 60 s before they exit.
GONE_WITHIN_S = 90.0


@pytest.fixture(scope="module", autouse=True)
def killed_driver():
    """A local driver killed with -9 as the module starts; the test that its processes went
    is the module's last (pytest runs a file's tests in order), so the minute they take
    passes while the other tests run. Whatever is left at the end is killed."""
    proc, ray_pids = _start_local_driver()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    yield ray_pids, time.monotonic()
    _kill(ray_pids)


def test_a_local_instance_listens_on_loopback_only():
    proc, ray_pids = _start_local_driver()
    try:
        listening = set()
        for pid in [proc.pid, *ray_pids]:
            try:
                listening |= {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet")
                              if c.status == psutil.CONN_LISTEN}
            except psutil.NoSuchProcess:
                pass
        assert listening, "no Ray process listens at all"
        assert listening <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening
    finally:
        # Not a test of the shutdown (the next test is): kill the Ray processes at once rather
        # than wait the minute they take to notice their driver is gone.
        proc.kill()
        proc.wait()
        _kill(ray_pids)
        _kill(_gone(ray_pids, timeout_s=10.0))


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A head started as docs/cluster.md says (``ray start --head`` with its dashboard), on
    loopback ports, in its own temporary folder. ``--block`` keeps its processes tied to one
    process that the fixture stops by its pid: ``ray stop`` would stop every Ray instance on
    the machine, other people's too."""
    temp_dir = tempfile.mkdtemp(prefix="ddnn-ray-")  # short: Ray's socket paths must stay < 108 chars
    port, dashboard = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("head") / "head.log"
    cmd = ["ray", "start", "--head", "--block", "--num-cpus", "3", "--include-dashboard", "true",
           "--node-ip-address", "127.0.0.1", "--dashboard-host", "127.0.0.1", "--port", str(port),
           "--dashboard-port", str(dashboard), "--dashboard-agent-listen-port", str(_free_port()),
           "--temp-dir", temp_dir, "--disable-usage-stats"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env())
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while "Ray runtime started" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"`ray start --head --include-dashboard true` did not come up: {log.read_text()[-800:]}")
            time.sleep(1)
        pids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        gcs = (Path(temp_dir) / "ray_current_cluster").read_text().split()[0]
        yield {"gcs": gcs, "dashboard": f"http://127.0.0.1:{dashboard}", "temp_dir": temp_dir}
    finally:
        proc.terminate()  # --block drains and stops what it started
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
        _kill(_gone(pids, timeout_s=60))
        shutil.rmtree(temp_dir, ignore_errors=True)


def _cli(*args, env, cwd=REPO, timeout=600):
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def test_ray_job_submit_runs_the_smoke_experiment_on_the_head(head, tmp_path):
    spec = tmp_path / "jobsmoke.yaml"
    spec.write_text(TINY)
    out = tmp_path / "run"
    # The commands docs/cluster.md gives; without RAY_AUTH_MODE=token the client is refused.
    r = subprocess.run(["ray", "job", "submit", "--address", head["dashboard"], "--working-dir", ".",
                        "--runtime-env-json", json.dumps({"excludes": [".git", "results", "__pycache__"]}), "--",
                        "python", "-m", "testbed", "run", str(spec), "--out", str(out), "--monitor-interval", "0"],
                       capture_output=True, text=True, cwd=REPO, timeout=600, env=_env(RAY_AUTH_MODE="token"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    # The job's driver joined the head (3 CPUs), not a local instance of its own (2 here).
    assert [n["cpus"] for n in manifest["cluster"]] == [3.0]
    assert len(list((out / "events.parquet").glob("*.parquet"))) == 1


def test_ray_address_is_used_without_address(head, tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    out = tmp_path / "run"
    r = _cli("run", str(spec), "--out", str(out), "--monitor-interval", "0",
             env=_env(RAY_ADDRESS=head["gcs"], RAY_AUTH_MODE="token"))
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [n["cpus"] for n in manifest["cluster"]] == [3.0]


def test_a_driver_without_the_token_is_told_to_set_ray_auth_mode(head, tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    env = {k: v for k, v in _env(RAY_ADDRESS=head["gcs"]).items() if k != "RAY_AUTH_MODE"}
    r = _cli("run", str(spec), "--out", str(tmp_path / "run"), "--monitor-interval", "0", env=env)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "export RAY_AUTH_MODE=token" in lines[0], r.stderr[-3000:]


def test_kill_9_of_the_driver_leaves_no_ray_process(killed_driver):
    """Last in the module (see ``killed_driver``): within GONE_WITHIN_S of the kill, nothing it
    started is alive."""
    ray_pids, killed_at = killed_driver
    assert len(ray_pids) >= 3  # at least the GCS, the raylet and a worker
    left = _gone(ray_pids, timeout_s=max(0.0, GONE_WITHIN_S - (time.monotonic() - killed_at)))
    _kill(left)  # never leave them running, even when the test fails
    assert not left, [psutil.Process(p).cmdline()[:2] for p in left if psutil.pid_exists(p)]
