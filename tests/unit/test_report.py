"""The report of a run folder built by hand, its renderer, tables and writer: no Ray."""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from testbed.cli.calibrate import profile_table
from testbed.cli.common import summary_table
from testbed.config.spec import expand, parse_spec
from testbed.emulation.apply import APPLY_CHUNK_ELEMENTS, apply_in_place, apply_scratch
from testbed.model.profile import HardwareProfile, save_profile
from testbed.records.atomic import atomic_write_text
from testbed.records.events import EVENT_SCHEMA, RESOURCE_SCHEMA
from testbed.records.rundir import PROFILE_FILE, RunFolder
from testbed.records.summary import SHOWN_COLUMNS, shown_columns
from testbed.report import writer
from testbed.report.comparison import PLOTS, profile_markdown
from testbed.report.markdown import frame_table, markdown_table
from testbed.report.profile_rows import profile_rows
from testbed.report.sections import (
    STALENESS_PNG,
    UTILISATION_PNG,
    clock_section,
    max_clock_offset_ns,
    model_section,
    staleness_section,
    utilisation_section,
)
from testbed.report.writer import write_report
from tests import factories


def build_folder(path, with_monitor=True, settle=True):
    spec = parse_spec({"name": "rep", "workers": 2, "workload": {"steps": 2}})
    cfg = expand(spec)[0]
    folder = RunFolder.create(path, run_id="r1", experiment="rep", spec=spec.model_dump(mode="json"),
                              configs=[cfg.model_dump(mode="json")], repeats=1)
    folder.update(cluster=[{"node": "nodeA" * 4, "ip": "10.0.0.1", "cpus": 2.0},
                           {"node": "nodeB" * 4, "ip": "10.0.0.2", "cpus": 2.0}])
    if with_monitor:
        folder.update(clock_offsets={"nodeA" * 4: {"offset_ns": 0, "rtt_ns": 200_000},
                                     "nodeB" * 4: {"offset_ns": -3_000_000, "rtt_ns": 1_000_000}})
    names = [n for n, _, _ in EVENT_SCHEMA]
    t0 = 10**18
    rows = [("r1", cfg.config_id, 0, "driver", "driver", "nodeA" * 4, ph, -1, t0 + i * 10**8, 10**8, 0, -1)
            for i, ph in enumerate(["setup", "init", "train"])]
    for w in range(2):
        for step in range(2):
            rows.append(("r1", cfg.config_id, 0, f"worker-{w}", "worker", "nodeB" * 4, "push", step,
                         t0 + 2 * 10**8 + step * 10**7, 10**6, 64, -1))
    for step in range(4):
        rows.append(("r1", cfg.config_id, 0, "server-0", "server", "nodeA" * 4, "apply", step % 2,
                     t0 + 2 * 10**8 + step * 10**7, 10**5, 64, 0))
    folder.write_config_events(cfg.config_id, 0, {n: [r[i] for r in rows] for i, n in enumerate(names)})
    if with_monitor:
        samples = {n: [] for n, _ in RESOURCE_SCHEMA}
        for node in ("nodeA" * 4, "nodeB" * 4):
            for k in range(4):
                for (name, _), v in zip(RESOURCE_SCHEMA, (node, cfg.config_id, 0, t0 + k * 10**8, 50.0, 10, 1.0,
                                                          1e6, 2e6, 3e5, 3e5, 0.5)):
                    samples[name].append(v)
        folder.append_resources(samples)
    if settle:
        folder.set_status("complete")
        folder.release()
    return folder


def test_report_regenerates_the_summary_and_writes_trace_plot_and_markdown(tmp_path):
    folder = build_folder(tmp_path / "run")
    assert not (folder.path / "summary.csv").exists()
    report = write_report(folder.path)
    text = report.read_text()
    assert text.startswith("# rep: run r1")
    summary = pd.read_csv(folder.path / "summary.csv")
    assert list(summary.updates) == [4] and list(summary.workers) == [2]
    assert "| nodeAnodeAno | 10.0.0.1 | 0 | 1 | yes | 50 | 0.5 | 0.5 (" in text and " r0) | +0.000 |" in text
    assert "| nodeBnodeBno | 10.0.0.2 | 2 | 0 |  | 50 | 0.5 | 0.5 (" in text and " r0) | -3.000 |" in text
    assert "at most 3.500 ms" in text  # |-3 ms| + 1 ms / 2
    assert "![utilisation per node](utilisation.png)" in text
    assert (folder.path / "utilisation.png").read_bytes()[:4] == b"\x89PNG"
    trace = json.loads((folder.path / "trace.json").read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == 3 + 4 + 4


def test_the_report_states_when_the_run_ended_also_when_written_just_before_it_settles(tmp_path):
    settled = write_report(build_folder(tmp_path / "a").path).read_text()
    assert re.search(r"Status: complete; started \S+, ended 20\d\d-\S+\.", settled)
    writing = build_folder(tmp_path / "b", settle=False)  # as testbed validate: report first, status after
    text = write_report(writing, status="complete").read_text()
    assert re.search(r"Status: complete; started \S+, ended 20\d\d-\S+\.", text), text.splitlines()[2]
    writing.release()
    running = build_folder(tmp_path / "c", settle=False)
    assert "not ended" in write_report(running).read_text()
    running.release()


def test_a_run_without_monitor_samples_gets_a_report_without_plot(tmp_path):
    folder = build_folder(tmp_path / "run", with_monitor=False)
    text = write_report(folder.path).read_text()
    assert "no clock-offset estimate" in text
    assert "utilisation" not in text
    assert not (folder.path / "utilisation.png").exists()


def test_markdown_table_and_clock_bound():
    assert markdown_table([(1, 0.123456, float("nan"))], ["a", "b", "c"]) == [
        "| a | b | c |", "|---|---|---|", "| 1 | 0.1235 | - |"]
    assert max_clock_offset_ns({}) is None
    assert "no clock-offset estimate" in clock_section({})[2]


def test_the_renderer_formats_every_cell_type_and_says_when_a_table_is_empty():
    frame = pd.DataFrame({"name": ["a", None], "x": [np.float32(0.5), float("nan")], "n": [1, 2],
                          "flag": pd.array([True, pd.NA], dtype="boolean")})
    assert frame_table(frame) == ["| name | x | n | flag |", "|---|---|---|---|", "| a | 0.5 | 1 | True |",
                                  "| - | - | 2 | - |"]
    assert frame_table(frame.iloc[:0]) == ["_(none)_"]
    assert markdown_table([], ["a"]) == ["_(none)_"]


def test_profile_rows_list_every_figure_once_in_its_unit_and_survive_new_fields():
    p = factories.profile(identity={"cpu_model": "Imaginary CPU", "nodes": [{}, {}]}, flops_per_s=2e10,
                          object_store_call_s=2e-3, setup_s_by_actors={2: 0.5, 8: 1.5},
                          init_fanout_s_by_actors={1: 1.6e-3, 2: 2.2e-3}, created="2026-01-01T00:00:00+00:00")
    rows = dict(profile_rows(p))
    assert len(rows) == len(profile_rows(p))  # no figure twice
    assert rows["nodes"] == "2" and rows["CPU"] == "Imaginary CPU" and rows["cores per node"] == "2"
    assert rows["actor-call latency L"] == "1 ms" and rows["transfer bandwidth W (same node)"] == "977 KiB/s"
    assert rows["matmul rate"] == "20.0 GFLOP/s" and rows["object_store_call_s"] == "2 ms"
    assert rows["start-up of 8 actors at once"] == "1.5 s"
    assert rows["the driver's call to 1 idle actor at once"] == "1.6 ms"  # one: no plural (a profile may hold it)
    assert rows["the driver's call to 2 idle actors at once"] == "2.2 ms"
    assert rows["disk sequential read, 4 reader(s)"] == "1.91 MiB/s" and rows["disk figures from"] == "fio (?)"
    assert "transfer bandwidth (between nodes)" not in rows and not any("fio (reference)" in k for k in rows)
    # a figure added to the profile later shows up under its own name, in its unit, without an edit
    later = dataclasses.make_dataclass("LaterProfile", [("pull_copy_bytes_per_s", float, 3 * 2**30)],
                                       bases=(HardwareProfile,), frozen=True)
    assert dict(profile_rows(later(**dataclasses.asdict(p) | {"disk": p.disk})))["pull_copy_bytes_per_s"] == "3 GiB/s"
    # both tables show these rows: the report's and calibrate's
    assert "| matmul rate | 20.0 GFLOP/s |" in profile_markdown(p)
    table = profile_table(p)
    assert table.row_count == len(rows) and list(table.columns[1].cells) == [v for _, v in profile_rows(p)]


def test_profile_rows_show_the_scheduler_curves_and_the_calls_beyond_the_curves_on_readable_lines():
    from testbed.model.scheduler import SchedulerCosts
    p = dataclasses.replace(factories.profile(), scheduler=SchedulerCosts(
        spin_overshoot_s=((0, 0.0), (4, 0.003)), wake_s=((0, 0.0), (4, 0.001)), cores=2, samples=14),
        small_calls_by_shards={4: {"worker_push_s": 0.0025, "worker_pull_s": 0.0007}}, load_average=(2.36,))
    rows = dict(profile_rows(p))
    assert rows["load average (1 min) as calibration began"] == "2.36"
    assert rows["scheduler: a spin's overshoot, by spinners per core"] == "0: 0 s; 4: 3 ms"
    wake_row = "scheduler: a woken read call's wait for a core, by processes wanting one per core (measured among spinners)"
    assert rows[wake_row] == "0: 0 s; 4: 1 ms"
    assert rows["the worker's calls with 4 shards at the smallest size: worker_push_s"] == "2.5 ms"
    assert rows["the worker's calls with 4 shards at the smallest size: worker_pull_s"] == "700 us"


def test_shown_columns_come_from_one_list_and_drop_what_was_not_measured_or_does_not_vary():
    frame = pd.DataFrame({"config_id": ["a", "b"], "repeat": [0, 0], "workers": [1, 2], "servers": [1, 1],
                          "sync": ["async", "async"], "init_io": ["parallel", "sequential"], "init_s": [1.0, 2.0],
                          "read_mean_s": [float("nan")] * 2, "not_shown": [1, 2]})
    assert shown_columns(frame) == ["config_id", "repeat", "workers", "servers", "sync", "init_io", "init_s"]
    assert shown_columns(frame, varying_knobs_only=True) == ["config_id", "repeat", "workers", "servers", "init_io",
                                                             "init_s"]
    assert all(c in SHOWN_COLUMNS for c in shown_columns(frame))
    console = summary_table(frame)
    assert [c.header for c in console.columns] == ["config", "rep", "N", "S", "init io", "init s"]


def test_sections_return_content_and_write_nothing(tmp_path):
    folder = build_folder(tmp_path / "run")
    before = sorted(p.relative_to(folder.path) for p in folder.path.rglob("*"))
    events = folder.events()
    staleness = staleness_section(events)
    utilisation = utilisation_section(folder.manifest, events, folder.resources())
    assert set(staleness.files) == {STALENESS_PNG} and set(utilisation.files) == {UTILISATION_PNG}
    assert f"![staleness]({STALENESS_PNG})" in staleness.lines
    assert model_section(None).files == {} and "No hardware profile" in model_section(None).lines[2]
    assert sorted(p.relative_to(folder.path) for p in folder.path.rglob("*")) == before


def test_the_report_writes_summary_csv_once_with_the_prediction_columns(tmp_path, monkeypatch):
    folder = build_folder(tmp_path / "run")
    save_profile(factories.profile(), folder.path / PROFILE_FILE, atomic_write_text)
    writes = []
    real = writer.atomic_write_text
    monkeypatch.setattr(writer, "atomic_write_text", lambda path, text: (writes.append(Path(path).name),
                                                                       real(path, text)))
    text = write_report(folder.path).read_text()
    assert writes.count("summary.csv") == 1 and writes[-1] == "report.md"  # the report last, once
    summary = pd.read_csv(folder.path / "summary.csv")
    assert {"group", "init_s_pred_queueing", "train_err_updated", "bound_initial"} <= set(summary.columns)
    assert (folder.path / "plots" / "staleness.png").read_bytes()[:4] == b"\x89PNG"
    for name in PLOTS:
        assert (folder.path / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
    assert "## Measured vs predicted" in text and "| server apply bandwidth A | 977 KiB/s |" in text
    assert not list(folder.path.rglob(".*.tmp-*"))  # every temporary file renamed into place


def test_the_apply_kernel_updates_in_place_across_chunk_boundaries():
    n = 2 * APPLY_CHUNK_ELEMENTS + 7  # two full chunks and a partial one
    rng = np.random.default_rng(0)
    w = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    g.flags.writeable = False  # a gradient as Ray hands it over
    expected = w - np.float32(0.25) * g
    buffer = w
    apply_in_place(w, g, np.float32(0.25), apply_scratch(n))
    assert w is buffer and np.array_equal(w, expected)
    assert apply_scratch(10).shape == (10,) and apply_scratch(n).shape == (APPLY_CHUNK_ELEMENTS,)


def test_the_nodes_section_gives_the_hypervisors_steal_and_its_most_stolen_config(tmp_path):
    from testbed.report.sections import nodes_section
    folder = build_folder(tmp_path / "run")
    resources = folder.resources()
    cid = resources["config_id"].iloc[0]
    resources.loc[resources["config_id"] == cid, "cpu_steal_percent"] = 30.0
    text = "\n".join(nodes_section(folder, folder.events(), resources))
    assert "mean steal %" in text and f"30.0 ({cid} r0)" in text
    # folders made before the column: no figure, no error
    text = "\n".join(nodes_section(folder, folder.events(), resources.drop(columns=["cpu_steal_percent"])))
    assert "mean steal %" in text and "| - |" in text
