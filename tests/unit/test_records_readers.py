"""What reads the records: the actors' crash state (no pickle), the notebook's summary, the
model's error tables without failed configs, the exit code of a sweep with holes (no Ray)."""

import io
import zipfile
from array import array

import numpy as np
import pandas as pd
import pytest
import typer

from actors.state import checkpoint_path, crash_path, decode_state, load_state, save_state
from testbed import analysis
from testbed.analysis.compare import error_table, knee_table, left_out
from testbed.cli.common import EXIT_CONFIGS_TROUBLED, exit_for_troubled
from testbed.config.spec import expand, parse_spec
from testbed.records.events import EVENT_SCHEMA, EventRecorder, Phase, export_durations_ns, export_phases
from testbed.records.manifest import RunStatus
from testbed.records.rundir import RunFolder


def test_a_crash_record_and_a_checkpoint_come_back_with_their_types(tmp_path):
    rec = EventRecorder(run_id="r", config_id="c", repeat=0, actor="worker-1", role="worker")
    rec.record(Phase.COMPUTE, 3, 100, 7)
    rng = np.random.default_rng(5)
    rng.random(3)
    crash = {"events": rec.export(), "crashed_wall_ns": 2**62,
             "position": {"steps_done": 4, "versions": [2, 3], "crashed_steps": [4], "rng": rng.bit_generator.state}}
    save_state(crash_path(tmp_path, "worker-1"), crash)
    back = load_state(crash_path(tmp_path, "worker-1"))
    assert back["position"] == crash["position"] and back["crashed_wall_ns"] == 2**62
    assert back["events"]["phase"] == rec.export()["phase"] and back["events"]["step"] == array("q", [3])
    again = EventRecorder(run_id="r", config_id="c", repeat=0, actor="worker-1", role="worker")
    again.restore(back["events"])
    assert again.events() == rec.events()
    other = np.random.default_rng(0)
    other.bit_generator.state = back["position"]["rng"]
    assert other.random() == rng.random()  # the jitter generator resumes where it stood

    ckpt = {"version": 8, "w": np.arange(6, dtype=np.float32), "pushes": {0: 4, 1: 4}, "last_step": {0: 3, 1: 3}}
    save_state(checkpoint_path(tmp_path, 0), ckpt)
    loaded = load_state(checkpoint_path(tmp_path, 0))
    assert loaded["pushes"] == {0: 4, 1: 4} and loaded["last_step"] == {0: 3, 1: 3}  # int keys stay ints
    assert loaded["w"].dtype == np.float32 and (loaded["w"] == ckpt["w"]).all()
    assert load_state(tmp_path / "absent.crash") is None


def test_a_state_file_holding_pickled_code_is_refused(tmp_path):
    """No code runs from a run folder: an object array (which only pickle can load) is refused."""
    buf = io.BytesIO()
    np.savez(buf, doc=np.frombuffer(b'{"x": {"__array__": "a0", "kind": "ndarray"}}', dtype=np.uint8),
             a0=np.array([{"evil": 1}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        decode_state(buf.getvalue())
    assert zipfile.is_zipfile(io.BytesIO(buf.getvalue()))


def test_one_decoder_of_the_recorders_export():
    rec = EventRecorder(run_id="r", config_id="c", repeat=0, actor="server-0", role="server")
    rec.record(Phase.QUEUE, 0, 1, 5)
    rec.record(Phase.APPLY, 0, 2, 9)
    rec.record(Phase.APPLY, 1, 3, 11)
    assert export_phases(rec.export()) == [Phase.QUEUE, Phase.APPLY, Phase.APPLY]
    assert export_durations_ns(rec.export(), Phase.APPLY) == [9, 11]


def _folder_with_lost_updates(path):
    spec = parse_spec({"name": "nb", "workers": 1, "workload": {"steps": 2}, "sweep": {"seed": [1, 2]}})
    configs = expand(spec)
    folder = RunFolder.create(path, run_id="r", experiment="nb", spec=spec.model_dump(mode="json"),
                              configs=[c.model_dump(mode="json") for c in configs], repeats=1)
    names = [n for n, _, _ in EVENT_SCHEMA]
    for k, cfg in enumerate(configs):
        rows = [("r", cfg.config_id, 0, "driver", "driver", "n", ph, -1, 10**18, 10**9, 0, -1)
                for ph in ("setup", "init", "train")]
        rows += [("r", cfg.config_id, 0, "worker-0", "worker", "n", "push", s, 10**18, 10**6, 0, -1) for s in range(2)]
        folder.write_config_events(cfg.config_id, 0, {n: [r[i] for r in rows] for i, n in enumerate(names)},
                                   status="ok" if k == 0 else "failed",
                                   info={"lost_updates": [3], "train_cpu_s": {"worker-0": 0.5, "server-0": 0.25},
                                         **({"error": "RayActorError: died"} if k else {})})
    folder.set_status(RunStatus.COMPLETE)
    folder.release()
    return folder.path


def test_a_notebook_on_a_folder_without_profile_has_lost_updates_and_cpu(tmp_path):
    run = analysis.load_run(_folder_with_lost_updates(tmp_path / "run"))
    assert run.comparison is None
    assert list(run.summary.lost_updates) == [3, 3]
    assert list(run.summary.worker_cpu_per_step_s) == [0.25, 0.25] and list(run.summary.server_cpu_per_step_s) == [
        0.125, 0.125]
    assert list(run.summary.status) == ["ok", "failed"]


def test_failed_and_timed_out_configs_leave_the_error_and_knee_tables():
    compared = pd.DataFrame({"config_id": ["a", "b", "c"], "repeat": [0, 0, 0], "group": ["g"] * 3,
                             "workers": [1, 2, 4], "steps": [10] * 3, "status": ["ok", "ok", "timed_out"],
                             "steps_per_s": [10.0, 20.0, 1.0], "job_s": [1.0, 1.0, 40.0],
                             "train_s_pred_m": [1.0, 1.0, 1.0], "job_s_pred_m": [1.0, 1.0, 1.0],
                             "train_err_m": [0.1, -0.2, 9.0]})
    errors = error_table(compared, models=["m"], phases=["train"])
    assert errors.n.tolist() == [2] and errors.max_abs_err.tolist() == [pytest.approx(0.2)]
    configs = [{"config_id": c, "sweep_values": {"workers": n}} for c, n in zip("abc", (1, 2, 4))]
    knees = knee_table(compared, configs, models=["m"])
    assert set(knees.grid) == {"[1, 2]"}  # the timed-out 4-worker point is not on the grid
    assert left_out(compared).to_dict("records") == [{"config_id": "c", "repeat": 0, "status": "timed_out"}]


def test_a_sweep_with_a_failed_config_exits_3(tmp_path):
    folder = RunFolder.open(_folder_with_lost_updates(tmp_path / "run"))
    with pytest.raises(typer.Exit) as exit_:
        exit_for_troubled(folder)
    assert exit_.value.exit_code == EXIT_CONFIGS_TROUBLED == 3
