"""The command line as a user runs it: a real process, real Ray, one line per error."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def run_cli(*args, cwd=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def test_run_smoke_writes_a_folder_and_prints_it(repo, tmp_path):
    out = tmp_path / "smoke"
    r = run_cli("run", str(repo / "experiments" / "smoke.yaml"), "--out", str(out),
                "--set", "workload.steps=5", "--set", "compute.seconds=5ms")
    assert r.returncode == 0, r.stderr
    assert f"results: {out}" in r.stdout.replace("\n", "")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["spec"]["workload"]["steps"] == 5
    assert len(list((out / "events.parquet").glob("*.parquet"))) == 3
    assert (out / "summary.csv").read_text().count("\n") == 4


@pytest.mark.parametrize("args,needle", [
    (["run", "{tmp}/absent.yaml"], "no such spec file"),
    (["run", "{spec}", "--set", "workers=0"], "workers"),
    (["run", "{spec}", "--set", "workload.steps=0"], "workload.steps"),
    (["run", "{spec}", "--set", "gradient_bytes=-4"], "gradient_bytes"),
    (["run", "{spec}", "--set", "nonsense=1"], "nonsense: unknown field"),
    (["run", "{spec}", "--set", "gradient_bytes=200GiB", "--set", "workers=8"], "needs about"),
    (["run", "{spec}", "--address", "127.0.0.1:9"], "no Ray cluster answers at 127.0.0.1:9"),
    (["run", "{bad}"], "not valid YAML"),
])
def test_bad_input_gets_one_line_and_exit_2(repo, tmp_path, args, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkers: [1,\n")
    subst = {"tmp": str(tmp_path), "spec": str(repo / "experiments" / "smoke.yaml"), "bad": str(bad)}
    r = run_cli(*(a.format(**subst) for a in args), "--out", str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written
