"""The run folder as a record: versions, the journal, the lock, statuses after a crash (no Ray)."""

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pydantic
import pytest

from testbed.config.errors import UserError
from testbed.config.spec import expand, parse_spec
from testbed.records.events import EVENT_SCHEMA, RESOURCE_SCHEMA
from testbed.records.manifest import MANIFEST_SCHEMA_VERSION, ConfigStatus, RunStatus, load_manifest
from testbed.records.rundir import JOURNAL_FILE, RunFolder, check_out_path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VERSIONS = ["run_v1", "run_v1_early", "run_v2"]


def spec(**fields):
    return parse_spec({"name": "rec", "workload": {"steps": 2}, "compute": {"seconds": "1ms"}, **fields})


def new_folder(path, **fields):
    s = spec(**fields)
    return RunFolder.create(path, run_id="r1", experiment="rec", spec=s.model_dump(mode="json"),
                            configs=[c.model_dump(mode="json") for c in expand(s)], repeats=1)


def columns(config_id, steps=2, workers=1):
    names = [n for n, _, _ in EVENT_SCHEMA]
    rows = [("r1", config_id, 0, "driver", "driver", "n", ph, -1, 10**18 + i, 10**8, 0, -1)
            for i, ph in enumerate(["setup", "init", "train"])]
    for w in range(workers):
        for step in range(steps):
            rows.append(("r1", config_id, 0, f"worker-{w}", "worker", "n", "push", step, 10**18 + 10 + step, 10**6, 64, -1))
            rows.append(("r1", config_id, 0, "server-0", "server", "n", "apply", step, 10**18 + 10 + step, 10**5, 64, 0))
    return {n: [r[i] for r in rows] for i, n in enumerate(names)}


@pytest.mark.parametrize("name", VERSIONS)
def test_a_saved_folder_of_every_version_loads_as_the_current_record(tmp_path, name):
    folder = RunFolder.open(FIXTURES / name)
    assert folder.record.schema_version == MANIFEST_SCHEMA_VERSION
    assert folder.status is RunStatus.COMPLETE
    assert [f.status for f in folder.record.finished] == [ConfigStatus.OK, ConfigStatus.OK]
    assert all(c["apply_seconds"] == 0.0 for c in folder.record.configs)
    parse_spec(folder.record.spec)  # the migrated spec is a valid spec of today
    summary = folder.summary()
    assert list(summary.config_id) == [c["config_id"] for c in folder.record.configs]
    assert (summary.updates == 3).all() and (summary.lost_updates == 0).all()
    assert len(folder.events()) == sum(f.events for f in folder.record.finished) == 36
    # the summary it derives is the one its writer wrote
    saved = pd.read_csv(FIXTURES / name / "summary.csv")
    assert list(saved.train_s.round(9)) == list(summary.train_s.round(9))


def test_the_cpu_columns_come_from_the_manifest_where_it_has_them():
    assert RunFolder.open(FIXTURES / "run_v1").summary().worker_cpu_per_step_s.notna().all()
    assert RunFolder.open(FIXTURES / "run_v1_early").summary().worker_cpu_per_step_s.isna().all()


def test_a_newer_or_broken_manifest_is_one_clear_error():
    doc = json.loads((FIXTURES / "run_v2" / "manifest.json").read_text())
    with pytest.raises(UserError, match="newer ddnn-testbed"):
        load_manifest({**doc, "schema_version": MANIFEST_SCHEMA_VERSION + 1})
    with pytest.raises(UserError, match="bad or missing: status"):
        load_manifest({**doc, "status": "sleeping"})
    with pytest.raises(UserError, match="bad or missing: run_id"):
        load_manifest({k: v for k, v in doc.items() if k != "run_id"})


def test_the_record_is_frozen():
    record = RunFolder.open(FIXTURES / "run_v2").record
    with pytest.raises(pydantic.ValidationError):
        record.status = RunStatus.FAILED
    assert record.with_(status=RunStatus.FAILED).status is RunStatus.FAILED and record.status is RunStatus.COMPLETE
    view = RunFolder.open(FIXTURES / "run_v2").manifest
    view["finished"].clear()  # a copy: the record is untouched
    assert len(RunFolder.open(FIXTURES / "run_v2").manifest["finished"]) == 2


def test_a_config_costs_one_journal_line_not_a_manifest_rewrite(tmp_path):
    folder = new_folder(tmp_path / "run", sweep={"seed": [1, 2]})
    ids = [c["config_id"] for c in folder.record.configs]
    manifest = (folder.path / "manifest.json").read_bytes()
    folder.write_config_events(ids[0], 0, columns(ids[0]), info={"lost_updates": [2]})
    assert (folder.path / "manifest.json").read_bytes() == manifest
    assert len((folder.path / JOURNAL_FILE).read_text().splitlines()) == 1
    reader = RunFolder.open(folder.path)  # a reader folds the journal in
    assert reader.record.finished_keys() == {(ids[0], 0)} and reader.status is RunStatus.RUNNING
    assert reader.summary().lost_updates.tolist() == [2]
    folder.set_status(RunStatus.COMPLETE)
    assert not (folder.path / JOURNAL_FILE).exists()
    assert json.loads((folder.path / "manifest.json").read_text())["finished"][0]["lost_updates"] == [2]


def test_a_journal_line_cut_short_by_a_kill_is_ignored(tmp_path):
    folder = new_folder(tmp_path / "run", sweep={"seed": [1, 2]})
    ids = [c["config_id"] for c in folder.record.configs]
    folder.write_config_events(ids[0], 0, columns(ids[0]))
    with open(folder.path / JOURNAL_FILE, "a") as f:
        f.write('{"config_id": "' + ids[1] + '", "rep')
    folder.release()
    assert RunFolder.open(folder.path).record.finished_keys() == {(ids[0], 0)}
    again = RunFolder.open_for_writing(folder.path)  # folds the good line, drops the journal
    assert again.record.finished_keys() == {(ids[0], 0)} and not (folder.path / JOURNAL_FILE).exists()
    again.write_config_events(ids[1], 0, columns(ids[1]))
    again.set_status(RunStatus.COMPLETE)
    assert RunFolder.open(folder.path).record.finished_keys() == {(ids[0], 0), (ids[1], 0)}


def test_an_events_file_no_entry_lists_is_not_the_truth(tmp_path):
    """A kill between the events file's rename and its journal line: the journal wins."""
    folder = new_folder(tmp_path / "run", sweep={"seed": [1, 2]})
    ids = [c["config_id"] for c in folder.record.configs]
    folder.write_config_events(ids[0], 0, columns(ids[0]))
    folder.write_config_events(ids[1], 0, columns(ids[1]))
    lines = (folder.path / JOURNAL_FILE).read_text().splitlines()
    (folder.path / JOURNAL_FILE).write_text(lines[0] + "\n")  # the second line never made it
    folder.release()
    reader = RunFolder.open(folder.path)
    assert set(reader.events().config_id) == {ids[0]}
    assert len(reader.missing()) == 1
    RunFolder.open_for_writing(folder.path).release()
    assert sorted(p.name for p in (folder.path / "events.parquet").iterdir()) == [f"{ids[0]}-r0.parquet"]


def test_monitor_samples_are_one_part_per_config_folded_at_the_end(tmp_path):
    folder = new_folder(tmp_path / "run")
    cid = folder.record.configs[0]["config_id"]
    samples = {n: [v] for (n, _), v in zip(RESOURCE_SCHEMA, ("n", cid, 0, 1, 50.0, 10, 1.0, 1e6, 2e6, 3e5, 3e5, 0.5))}
    folder.write_config_events(cid, 0, columns(cid), resources=samples)
    assert len(RunFolder.open(folder.path).resources()) == 1
    folder.set_status(RunStatus.COMPLETE)
    assert (folder.path / "resources.parquet").is_file() and not (folder.path / "resources.parts").exists()
    assert len(RunFolder.open(folder.path).resources()) == 1


def test_a_second_writer_is_refused_naming_the_owner(tmp_path):
    folder = new_folder(tmp_path / "run")
    with pytest.raises(UserError, match=r"is being written by pid \d+ on .*; wait for that run"):
        RunFolder.open_for_writing(folder.path)
    with pytest.raises(UserError, match="not empty"):
        new_folder(tmp_path / "run")
    folder.release()
    RunFolder.open_for_writing(folder.path).release()


def test_two_new_runs_given_the_same_out_at_once_do_not_both_start(tmp_path):
    barrier, results = threading.Barrier(2), []

    def start():
        barrier.wait()
        try:
            results.append(new_folder(tmp_path / "same"))
        except UserError as err:
            results.append(err)
    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    folders = [r for r in results if isinstance(r, RunFolder)]
    assert len(folders) == 1, results
    assert "being written" in str(*[r for r in results if isinstance(r, UserError)]) or \
        "not empty" in str(*[r for r in results if isinstance(r, UserError)])
    folders[0].release()


def test_a_folder_whose_writer_died_reads_as_interrupted(tmp_path):
    path = tmp_path / "run"
    code = ("import os, sys; from testbed.records.rundir import RunFolder; from testbed.config.spec import parse_spec, expand; "
            "s = parse_spec({'name': 'rec', 'workload': {'steps': 2}}); "
            "RunFolder.create(sys.argv[1], run_id='r1', experiment='rec', spec=s.model_dump(mode='json'), "
            "configs=[c.model_dump(mode='json') for c in expand(s)], repeats=1); os._exit(9)")
    subprocess.run([sys.executable, "-c", code, str(path)], check=False, timeout=60,
                   env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert json.loads((path / "manifest.json").read_text())["status"] == "running"
    folder = RunFolder.open(path)
    assert folder.status is RunStatus.INTERRUPTED and folder.manifest["status"] == "interrupted"
    writer = RunFolder.open_for_writing(path)  # the lock went with its process
    assert writer.status is RunStatus.RUNNING  # held by this process now
    writer.release()


def test_out_naming_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="--out .*file is an existing file"):
        check_out_path(tmp_path / "file")
    with pytest.raises(UserError, match="existing file"):
        new_folder(tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"
    check_out_path(tmp_path / "absent")


def test_the_status_write_on_a_full_disk_does_not_raise_on_the_way_out(tmp_path, monkeypatch):
    from testbed.records import rundir
    from testbed.runner.run import _finish
    folder = new_folder(tmp_path / "run")

    def full(path, data):
        raise UserError(f"cannot write {path}: No space left on device")
    monkeypatch.setattr(rundir, "atomic_write_text", lambda p, t: full(p, t))
    monkeypatch.setattr(rundir, "atomic_write_bytes", full)
    _finish(folder, RunStatus.FAILED, "the error being handled", quiet=True)  # no raise
    with pytest.raises(UserError, match="No space left"):
        _finish(folder, RunStatus.COMPLETE)
    monkeypatch.undo()
    folder.release()
    assert RunFolder.open(folder.path).status is RunStatus.INTERRUPTED  # not "running" for ever


def test_the_report_and_the_helpers_show_interrupted(tmp_path):
    from testbed.analysis.notebook import find_runs, manifest_table
    from testbed.report.writer import write_report
    folder = new_folder(tmp_path / "results" / "run")
    cid = folder.record.configs[0]["config_id"]
    folder.write_config_events(cid, 0, columns(cid))
    folder.release()  # as the kernel does for a killed writer
    text = write_report(folder.path).read_text()
    assert "Status: interrupted" in text and "testbed run --resume" in text
    assert find_runs(results_dir=tmp_path / "results", statuses=("interrupted",)) == [folder.path]
    table = manifest_table(RunFolder.open(folder.path).manifest).set_index("field")["value"]
    assert table["status"] == "interrupted"


def test_cleaning_a_killed_writers_leftovers(tmp_path):
    folder = new_folder(tmp_path / "run")
    (folder.path / ".manifest.json.tmp-123").write_text("half")
    (folder.path / "events.parquet" / ".x.parquet.tmp-123").write_text("half")
    folder.release()
    RunFolder.open_for_writing(folder.path).release()
    assert not list(folder.path.rglob("*.tmp-*"))


def test_fixture_folders_are_not_changed_by_reading():
    before = {p: p.read_bytes() for name in VERSIONS for p in (FIXTURES / name).rglob("*") if p.is_file()}
    for name in VERSIONS:
        RunFolder.open(FIXTURES / name).summary()
    assert before == {p: p.read_bytes() for name in VERSIONS for p in (FIXTURES / name).rglob("*") if p.is_file()}
    assert not any((FIXTURES / name / ".lock").exists() for name in VERSIONS)


def test_writing_without_the_lock_is_a_bug_not_a_silent_write(tmp_path):
    shutil.copytree(FIXTURES / "run_v2", tmp_path / "run")
    with pytest.raises(RuntimeError, match="without holding its lock"):
        RunFolder.open(tmp_path / "run").set_status(RunStatus.FAILED)


def test_testbed_report_does_not_race_a_writer(tmp_path):
    from testbed.cli import main
    folder = new_folder(tmp_path / "run")
    cid = folder.record.configs[0]["config_id"]
    folder.write_config_events(cid, 0, columns(cid))
    assert main(["report", str(folder.path)]) == 2  # one error line naming the owner
    assert not (folder.path / "report.md").exists()
    folder.set_status(RunStatus.COMPLETE)
    folder.release()
    assert main(["report", str(folder.path)]) == 0 and (folder.path / "report.md").is_file()
    assert not RunFolder.open(folder.path).troubled()


def test_out_naming_a_file_is_refused_before_the_data_set_is_written(tmp_path):
    from testbed.runner.run import run_experiment
    (tmp_path / "file").write_text("x")
    s = spec(workload={"steps": 2, "dataset_bytes": "1MiB"}, data={"dir": str(tmp_path / "data"), "file_bytes": "1MiB"})
    with pytest.raises(UserError, match="existing file"):
        run_experiment(s, out=tmp_path / "file", monitor_interval_s=None)
    assert not (tmp_path / "data").exists() or not any(p.is_file() for p in (tmp_path / "data").rglob("*"))
    assert (tmp_path / "file").read_text() == "x"
