"""The benchmark suite's cheap parts: the records, the results file, the table, the event
figure at a small size. No timing assertions: targets belong to the benchmarks."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import pytest

from testbed import bench
from testbed.bench import __main__ as bench_main
from testbed.bench import event_recording, simulate
from testbed.bench.__main__ import FIGURES, main, results_path
from testbed.bench.common import (
    SCHEMA_VERSION,
    Check,
    Figure,
    format_table,
    read_results,
    repo_results_dir,
    write_results,
)
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


def test_simulate_figure_measures_a_small_simulation():
    raw = simulate.measure(32, 12, 1)
    assert raw["events"] > 32 * 12 and raw["cpu_s"] > 0 and raw["events_per_s"] > 0
    assert 0 < raw["cpu_utilization"] <= 1 and 0 < raw["server_utilization"] <= 1


def test_largest_passing_worker_count():
    assert largest_passing({8: 0.01, 16: -0.05, 32: 0.2, 64: 0.09}) == 64
    assert largest_passing({8: 0.3, 16: float("nan")}) == 0


def test_unknown_figure_is_a_usage_error(capsys):
    assert main(["--only", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_the_registry_names_every_figure_module_and_only_those():
    """Every module of testbed.bench with a ``run(quick)`` is registered (a new figure that is not
    would never run), and every registered one imports and has that ``run``."""
    bench_dir = Path(bench.__file__).parent
    with_run = {f"testbed.bench.{p.stem}" for p in bench_dir.glob("*.py") if "\ndef run(" in p.read_text()}
    assert set(FIGURES.values()) == with_run
    assert len(set(FIGURES.values())) == len(FIGURES)
    for name, module in FIGURES.items():
        run = importlib.import_module(module).run
        assert "quick" in inspect.signature(run).parameters, name


def test_results_go_to_a_dated_folder_here_unless_told(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = results_path(None, False)
    assert default.name == "results.json" and default.parent.parent == Path("bench-results")
    assert not default.parent.exists()  # created only when the results are written
    assert results_path(tmp_path / "mine", False) == tmp_path / "mine" / "results.json"
    repo = repo_results_dir()
    assert repo is not None and (repo / "results.json").is_file()  # this is a checkout
    assert results_path(None, True) == repo / "results.json"


@pytest.mark.parametrize("argv, words", [
    (["--out", "x.json"], "give a folder"),
    (["--out", "somewhere", "--update-repo-results"], "give one"),
])
def test_bad_output_options_are_usage_errors(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert words in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_copy_outside_a_checkout_refuses_to_update_the_repository_results(monkeypatch, capsys):
    monkeypatch.setattr(bench_main, "repo_results_dir", lambda: None)
    assert main(["--update-repo-results"]) == 2
    assert "--out DIR" in capsys.readouterr().err


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
