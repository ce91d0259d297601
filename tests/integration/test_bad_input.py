"""Every bad input answered: the real CLI in a subprocess, one `error:` line naming the problem
and the fix, exit code 2, no traceback, and nothing already on disk changed. Each row fails
before Ray starts (or, for an address, before it connects), so the table runs in seconds."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.config.spec import expand, parse_spec
from testbed.model.profile import HardwareProfile, save_profile
from testbed.records.atomic import atomic_write_text
from testbed.records.rundir import RunFolder

pytestmark = pytest.mark.integration

GOOD = "name: good\nworkload: {steps: 2}\ncompute: {seconds: 1ms}\n"


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def spec_with(tmp: Path, extra: str, name: str = "s.yaml") -> str:
    return write(tmp / name, GOOD + extra)


def profile(tmp: Path, host: str) -> str:
    p = HardwareProfile(identity={"host": host, "cpu_model": "Imaginary CPU"}, cores_per_node=2,
                        server_apply_bytes_per_s=1e9, server_call_overhead_s=1e-5, actor_call_latency_s=1e-4,
                        transfer_bytes_per_s_local=1e9)
    return str(save_profile(p, tmp / f"profile-{host}.json", atomic_write_text))


def run_folder(tmp: Path) -> str:
    """A run folder as an interrupted `testbed run` leaves it (no Ray needed to make one)."""
    spec = parse_spec({"name": "good", "workload": {"steps": 2}, "compute": {"seconds": "1ms"}})
    folder = RunFolder.create(tmp / "run", run_id="abc", experiment="good", spec=spec.model_dump(mode="json"),
                              configs=[c.model_dump(mode="json") for c in expand(spec)], repeats=1)
    folder.set_status("incomplete", "interrupted")
    return str(folder.path)


def read_only_dir(tmp: Path) -> str:
    if os.geteuid() != 0:
        ro = tmp / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return str(ro / "data")
    return "/sys/ddnn-testbed-data"  # root writes anywhere on a disk; sysfs refuses even root


# (id, argv builder, what the error line must say). Builders get the test's tmp folder and
# return (argv, paths that exist before the command and must not change).
ROWS = [
    ("bad-yaml", lambda t: (["run", write(t / "b.yaml", "name: x\nworkers: [1,\n")], []), "not valid YAML at line"),
    ("not-a-mapping", lambda t: (["run", write(t / "b.yaml", "- a\n- b\n")], []), "must be a YAML mapping"),
    ("missing-spec", lambda t: (["run", str(t / "absent.yaml")], []), "no such spec file"),
    ("unknown-key", lambda t: (["run", spec_with(t, "wrokers: 2\n")], []), "wrokers: unknown field; allowed here"),
    ("unknown-nested-key", lambda t: (["run", spec_with(t, "data: {dri: /x}\n")], []), "data.dri: unknown field"),
    ("wrong-type", lambda t: (["run", spec_with(t, "workers: many\n")], []), "workers: Input should be a valid integer"),
    ("wrong-enum", lambda t: (["run", spec_with(t, "sync: eventually\n")], []), "sync: must be one of"),
    ("negative-size", lambda t: (["run", spec_with(t, ""), "--set", "gradient_bytes=-4"], []), "gradient_bytes"),
    ("absurd-size", lambda t: (["run", spec_with(t, "gradient_bytes: 3000TiB\n")], []),
     "gradient_bytes: Input should be less than or equal to"),
    ("bad-unit", lambda t: (["run", spec_with(t, "gradient_bytes: 12 parsecs\n")], []), "gradient_bytes"),
    ("negative-duration", lambda t: (["run", spec_with(t, ""), "--set", "compute.seconds=-1s"], []),
     "compute.seconds"),
    ("zero-workers", lambda t: (["run", spec_with(t, ""), "--set", "workers=0"], []), "workers"),
    ("set-without-equals", lambda t: (["run", spec_with(t, ""), "--set", "workers"], []), "expected key=value"),
    ("fault-out-of-range", lambda t: (["run", spec_with(t, "faults: [{kind: kill_worker, worker: 5, step: 1}]\n")],
                                      []), "worker 5 does not exist"),
    ("fault-unknown-kind", lambda t: (["run", spec_with(t, "faults: [{kind: meteor}]\n")], []),
     "expected tags: 'kill_worker', 'straggler', 'kill_server'"),
    ("data-dir-through-a-file", lambda t: (["run", spec_with(
        t, f"workload: {{steps: 2, dataset_bytes: 1MiB}}\ndata: {{dir: {write(t / 'file', 'x')}/sub}}\n")],
        [t / "file"]), "cannot be written"),
    ("data-dir-read-only", lambda t: (["run", spec_with(
        t, f"workload: {{steps: 2, dataset_bytes: 1MiB}}\ndata: {{dir: {read_only_dir(t)}}}\n")], []),
     "cannot be written"),
    ("data-dir-on-tmpfs", lambda t: (["run", spec_with(
        t, "workload: {steps: 2, dataset_bytes: 1MiB}\ndata: {dir: /dev/shm/ddnn-testbed-test}\n")], []),
     "memory-backed file system"),
    ("disk-too-small", lambda t: (["run", spec_with(
        t, f"workload: {{steps: 2, dataset_bytes: 1000TiB}}\ndata: {{dir: {t / 'data'}, file_bytes: 1TiB}}\n")], []),
     "free; free some space, set data.dir to a larger disk"),
    ("gradient-too-large-for-memory", lambda t: (["run", spec_with(t, "gradient_bytes: 200GiB\nworkers: 8\n")], []),
     "needs about"),
    ("unreachable-address", lambda t: (["run", spec_with(t, ""), "--address", "127.0.0.1:9"], []),
     "no Ray cluster answers at 127.0.0.1:9"),
    ("malformed-address", lambda t: (["run", spec_with(t, ""), "--address", "headnode"], []), "expected HOST:PORT"),
    # Ray's convention: without --address, RAY_ADDRESS names the cluster.
    ("unreachable-ray-address", lambda t: (["run", spec_with(t, "")], [], {"RAY_ADDRESS": "127.0.0.1:9"}),
     "no Ray cluster answers at 127.0.0.1:9 (Connection refused); start one with `ray start --head` on that host, "
     "or unset RAY_ADDRESS"),
    ("dashboard-url-as-ray-address", lambda t: (["run", spec_with(t, "")], [],
                                                {"RAY_ADDRESS": "http://127.0.0.1:8265"}),
     "RAY_ADDRESS='http://127.0.0.1:8265' is a dashboard address"),
    ("bad-monitor-interval", lambda t: (["run", spec_with(t, ""), "--monitor-interval", "soon"], []),
     "--monitor-interval"),
    ("out-not-empty", lambda t: (["run", spec_with(t, ""), "--out", run_folder(t)], [t / "run"]),
     "already exists and is not empty"),
    ("corrupt-profile", lambda t: (["validate", spec_with(t, ""), "--profile", write(t / "p.json", "{not json")],
                                   [t / "p.json"]), "not valid JSON"),
    ("profile-of-another-machine", lambda t: (["validate", spec_with(t, ""), "--profile", profile(t, "elsewhere")],
                                              [t / "profile-elsewhere.json"]), "measured on host 'elsewhere'"),
    ("report-profile-of-another-machine", lambda t: (["report", run_folder(t), "--profile", profile(t, "elsewhere")],
                                                     [t / "run", t / "profile-elsewhere.json"]),
     "not on the machine this run used"),
    ("report-not-a-run-folder", lambda t: (["report", str(t)], []), "is not a run folder"),
    ("report-corrupt-manifest", lambda t: (["report", str(_corrupt_run(t))], [t / "bad-run"]), "is corrupt"),
    ("resume-not-a-run-folder", lambda t: (["run", "--resume", str(t)], []), "is not a run folder"),
    ("resume-changed-spec", lambda t: (["run", spec_with(t, ""), "--resume", run_folder(t), "--set", "workers=3",
                                        "--set", "compute.seconds=2ms"], [t / "run"]),
     "differs from the one this run was started with in: compute.seconds, workers"),
    ("resume-with-out", lambda t: (["run", "--resume", run_folder(t), "--out", str(t / "x")], [t / "run"]),
     "leave out --out"),
    ("no-spec-no-resume", lambda t: (["run"], []), "give a spec file"),
    # Inputs that would run away: each names the field and the limit.
    ("epochs-past-the-step-cap", lambda t: (["run", spec_with(
        t, "workload: {epochs: 1000, dataset_bytes: 64MiB, sample_bytes: 1, minibatch: 1}\n")], []),
     "workload.epochs: 1000 epochs of 64 MiB"),
    ("flops-infinite", lambda t: (["run", spec_with(t, "compute: {mode: matmul, flops: .inf}\n")], []),
     "compute.flops: Input should be a finite number"),
    ("flops-too-many", lambda t: (["run", spec_with(t, "compute: {mode: matmul, flops: 1e15}\n")], []),
     "compute.flops: Input should be less than or equal to 10000000000000"),
    ("matmul-too-large-for-memory", lambda t: (["run", spec_with(
        t, "workers: 256\ncompute: {mode: matmul, flops: 1e13}\n")], []), "lower compute.flops or workers"),
    ("events-too-many-for-memory", lambda t: (["run", spec_with(
        t, "workers: 64\nworkload: {steps: 10000000}\ncompute: {seconds: 0}\n")], []),
     "lower workload.steps (or workload.epochs) or workers"),
    ("sweep-past-the-hard-limit", lambda t: (["run", spec_with(
        t, "sweep: {seed: [" + ", ".join(map(str, range(200))) + "], learning_rate: ["
        + ", ".join(f"{i + 1}.5" for i in range(100)) + "]}\n")], []), "sweep: 20000 configs (200 x 100 values)"),
    ("sweep-without-large-sweep", lambda t: (["run", spec_with(
        t, "repeats: 3\nsweep: {seed: [" + ", ".join(map(str, range(200))) + "]}\n")], []),
     "600 config runs (200 configs x 3 repeats), estimated at least"),
    ("yaml-alias-bomb", lambda t: (["run", write(t / "bomb.yaml", ALIAS_BOMB)], []),
     "expands to more than 100000 YAML nodes"),
    ("yaml-recursive-alias", lambda t: (["run", write(t / "loop.yaml", "name: x\nsweep: &a {workers: [*a]}\n")], []),
     "an alias refers to itself"),
    ("set-alias-bomb", lambda t: (["run", spec_with(t, ""), "--set", "description=" + ONE_LINE_BOMB], []),
     "--set description: the document expands"),
    # Accepted silently before: each now refused, naming the field.
    ("workers-true", lambda t: (["run", spec_with(t, "workers: true\n")], []),
     "workers: must be a number, not a boolean (got True)"),
    ("staleness-under-async", lambda t: (["run", spec_with(t, "staleness: 2\n")], []),
     "staleness applies to sync 'ssp' only"),
    ("step-reads-without-data", lambda t: (["run", spec_with(t, "data: {step_reads: random}\n")], []),
     "data.step_reads 'random' reads the data set every step, but there is none"),
    ("sequential-init-without-data", lambda t: (["run", spec_with(t, "data: {init_io: sequential}\n")], []),
     "data.init_io 'sequential' orders the reads of the data set, but there is none"),
    ("empty-data-dir", lambda t: (["run", spec_with(t, "data: {dir: ''}\n")], []), "data.dir: must name a directory"),
    ("duplicate-sweep-value", lambda t: (["run", spec_with(t, "sweep: {workers: [1, 2, 2]}\n")], []),
     "sweep.workers lists 2 twice"),
    ("sweep-points-that-are-one-config", lambda t: (["run", spec_with(
        t, "sweep: {gradient_bytes: [1MiB, 1048576]}\n")], []), "give the same config"),
    ("deadline-below-a-millisecond", lambda t: (["run", spec_with(t, "deadline_s: 0.5ms\n")], []),
     "deadline_s: Input should be greater than or equal to 0.001"),
    ("monitor-interval-below-a-millisecond", lambda t: (["run", spec_with(t, ""), "--monitor-interval", "100us"], []),
     "--monitor-interval '100us': must be at least 1ms"),
    # Mistyped commands and options: click's answer (usage line, one line with its suggestions).
    ("unknown-command", lambda t: (["valdate", spec_with(t, "")], []),
     "No such command 'valdate'. Did you mean 'validate'"),
    ("unknown-option", lambda t: (["run", spec_with(t, ""), "--monitor-intervall", "1s"], []),
     "No such option: --monitor-intervall (Possible options: --monitor-interval)"),
    ("option-without-value", lambda t: (["run", spec_with(t, ""), "--address"], []),
     "Option '--address' requires an argument"),
]


# Eight lines that expand to 10^8 values (the "billion laughs", a smaller cousin).
ALIAS_BOMB = "name: bomb\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
ONE_LINE_BOMB = "[" + ", ".join(["&a0 [" + ", ".join(["1"] * 10) + "]"] + [
    f"&a{k} [" + ", ".join([f"*a{k - 1}"] * 10) + "]" for k in range(1, 7)]) + "]"


def _corrupt_run(tmp: Path) -> Path:
    bad = tmp / "bad-run"
    (bad / "events.parquet").mkdir(parents=True)
    (bad / "manifest.json").write_text('{"schema_version": 1, "run_id": ')
    return bad


def fingerprint(paths: list[Path]) -> dict[str, str]:
    out = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def test_the_table_is_big_enough():
    assert len(ROWS) >= 20


@pytest.mark.parametrize("name,build,needle", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_gets_one_line_exit_2_and_damages_nothing(tmp_path, name, build, needle):
    argv, kept, *extra = build(tmp_path)
    before = fingerprint(kept)
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "CI": "1", **(extra[0] if extra else {})}
    r = subprocess.run([sys.executable, "-m", "testbed", *argv], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    # "error:" from the testbed, "Error:" from click's usage errors
    lines = [ln for ln in r.stderr.splitlines() if ln.lower().startswith("error:")]
    assert len(lines) == 1, r.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    assert fingerprint(kept) == before
    assert not (tmp_path / "results").exists()  # no run folder was started
    if name == "resume-changed-spec":
        assert json.loads((tmp_path / "run" / "manifest.json").read_text())["status"] == "incomplete"
