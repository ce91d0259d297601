"""The benchmark suite's cheap parts: the records, the results file, the table, the event
figure at a small size. No timing assertions: targets belong to the benchmarks."""

from __future__ import annotations

import json

import pytest

from testbed.bench import event_recording
from testbed.bench.__main__ import FIGURES, main
from testbed.bench.common import SCHEMA_VERSION, Check, Figure, format_table, read_results, write_results
from testbed.bench.scale import largest_passing


def _figure(name: str, value: float) -> Figure:
    return Figure(name, f"title {name}", (Check("c", value, 1.0, ">="), Check("d", 0.5, 1.0, "<=", "ms")),
                  {"x": [1, 2]}, (1.0, 2.0, 3.0), "2024-01-01T00:00:00+00:00")


def test_check_met_follows_the_operator_and_refuses_unknown_ones():
    assert Check("a", 2.0, 1.0, ">=").met and not Check("a", 0.5, 1.0, ">=").met
    assert Check("a", 0.5, 1.0, "<=").met and not Check("a", 2.0, 1.0, "<=").met
    assert not Check("a", None, 1.0, ">=").met and not Check("a", float("nan"), 1.0, "<=").met
    with pytest.raises(ValueError):
        Check("a", 1.0, 1.0, "==")


def test_figure_met_only_when_every_check_is():
    assert _figure("f", 2.0).met
    assert not _figure("f", 0.1).met
    with pytest.raises(ValueError):
        Figure("f", "t", (), {}, (0.0, 0.0, 0.0), "now")


def test_results_file_merges_figures_and_records_conditions(tmp_path):
    path = tmp_path / "results.json"
    write_results([_figure("a", 2.0), _figure("b", 2.0)], path, started="s", load_start=(1.0, 1.0, 1.0), quick=True)
    write_results([_figure("b", 0.1)], path, started="s2", load_start=(2.0, 2.0, 2.0), quick=False)
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert set(doc["figures"]) == {"a", "b"}
    assert doc["figures"]["a"]["met"] is True and doc["figures"]["b"]["met"] is False
    b = doc["figures"]["b"]
    assert b["load_average"] == [1.0, 2.0, 3.0] and "numpy" in b["versions"] and b["date"]
    assert [c["met"] for c in b["checks"]] == [False, True]
    assert doc["last_run"]["figures"] == ["b"] and doc["last_run"]["quick"] is False
    assert read_results(path) == doc
    assert not list(tmp_path.glob("*.tmp"))


def test_results_file_of_another_schema_is_refused(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema_version": 99, "figures": {}}))
    with pytest.raises(ValueError, match="schema_version"):
        read_results(path)


def test_table_has_a_line_per_check():
    doc = [_figure("a", 2.0).to_dict(), _figure("b", 0.1).to_dict()]
    lines = format_table(doc).splitlines()
    assert lines[0].split()[:3] == ["figure", "check", "value"]
    assert len(lines) == 2 + 4
    assert lines[2].startswith("a") and lines[2].split()[-2] == "yes"
    assert "NO" in lines[4] and "ms" in lines[3]


def test_event_recording_figure_structure():
    fig = event_recording.run(quick=True)
    assert fig.name == "event_recording" and len(fig.checks) == 2
    assert fig.raw["events"] > 0 and fig.raw["bytes_per_event"] >= 41  # 1 + 5 x 8 bytes per event at least
    assert all(c.value is not None and c.value > 0 for c in fig.checks)
    assert json.loads(json.dumps(fig.to_dict()))["name"] == "event_recording"


def test_largest_passing_worker_count():
    assert largest_passing({8: 0.01, 16: -0.05, 32: 0.2, 64: 0.09}) == 64
    assert largest_passing({8: 0.3, 16: float("nan")}) == 0


def test_unknown_figure_is_a_usage_error(capsys):
    assert main(["--only", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert list(FIGURES)[0] == "apply_bandwidth" and len(FIGURES) == 9


def test_capacity_takes_the_largest_n_at_each_threshold():
    from testbed.bench.capacity import largest_at
    ratios = {16: 0.98, 32: 0.95, 64: 0.91, 128: 0.82, 192: 0.55, 256: float("nan")}
    assert largest_at(ratios, 0.9) == 64 and largest_at(ratios, 0.8) == 128 and largest_at(ratios, 0.99) == 0


def test_new_figures_are_registered_and_the_peer_has_both_points():
    from testbed.bench import peer
    assert {"capacity", "setup", "peer"} <= set(FIGURES)
    assert set(peer.CASES) == {"8x16MiB", "32x64KiB"}
    worker = peer.DocsPeerWorker(0, 16, 0.0)
    first = worker.compute_gradients(None)
    assert worker.compute_gradients(None) is first  # computed once, returned every step
