"""The report of a run folder built by hand: no Ray."""

import json

import pandas as pd

from testbed.config.spec import expand, parse_spec
from testbed.records.events import EVENT_SCHEMA, RESOURCE_SCHEMA
from testbed.records.rundir import RunFolder
from testbed.report.sections import clock_section, markdown_table, max_clock_offset_ns, write_report


def build_folder(path, with_monitor=True):
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
                                                          1e6, 2e6, 3e5, 3e5)):
                    samples[name].append(v)
        folder.append_resources(samples)
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
    assert "| nodeAnodeAno | 10.0.0.1 | 0 | 1 | yes | 50 | +0.000 |" in text
    assert "| nodeBnodeBno | 10.0.0.2 | 2 | 0 |  | 50 | -3.000 |" in text
    assert "at most 3.500 ms" in text  # |-3 ms| + 1 ms / 2
    assert "![utilisation per node](utilisation.png)" in text
    assert (folder.path / "utilisation.png").read_bytes()[:4] == b"\x89PNG"
    trace = json.loads((folder.path / "trace.json").read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == 3 + 4 + 4


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
