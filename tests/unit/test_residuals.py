"""Residuals pooled over compared run folders (``testbed.analysis.residuals``) and the
``testbed residuals`` command: synthetic folders (a manifest and a summary with predictions)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from testbed.analysis import residuals as r
from testbed.cli import main
from testbed.config.errors import UserError

KIB, MIB = 2**10, 2**20


def _config(cid, workers=4, mode="spin", sync="async", servers=1, grad=64 * KIB, data=0, init_io="parallel",
            step_reads="none", cv=0.0, apply=0.0):
    return {"config_id": cid, "workers": workers, "servers": servers, "sync": sync, "gradient_bytes": grad,
            "apply_seconds": apply, "workload": {"steps": 10, "dataset_bytes": data},
            "compute": {"mode": mode, "seconds": 0.02, "jitter": {"distribution": "lognormal" if cv else "none", "cv": cv}},
            "data": {"init_io": init_io, "step_reads": step_reads}}


def _folder(path, configs, rows, family="simulated"):
    """A compared folder: ``rows`` are (config_id, repeat, status, {phase: (measured, predicted)})."""
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"configs": configs}))
    out = []
    for cid, repeat, status, phases in rows:
        row = {"config_id": cid, "repeat": repeat, "status": status}
        for phase, (measured, predicted) in phases.items():
            row[r.measured_column(phase)] = measured
            row[f"{phase}_s_pred_{family}"] = predicted
        row.setdefault(f"train_err_{family}", 0.0)
        out.append(row)
    pd.DataFrame(out).to_csv(path / "summary.csv", index=False)
    return path


def test_bands_cover_the_validation_space_edges():
    assert [r.worker_band(n) for n in (1, 2, 4, 5, 16, 17, 32, 1024)] == ["1", "2-4", "2-4", "5-16", "5-16", "17+", "17+",
                                                                          "17+"]
    assert [r.gradient_band(b) for b in (4 * KIB, 64 * KIB, 64 * KIB + 4, MIB, 8 * MIB, 32 * MIB)] == \
        ["<=64 KiB", "<=64 KiB", "64 KiB-1 MiB", "64 KiB-1 MiB", "1-8 MiB", ">8 MiB"]


def test_a_configs_dimensions_say_what_it_reads_and_how_it_computes():
    plain = r.config_dimensions(_config("a", step_reads="random", init_io="sequential"))
    assert plain["init data"] == "none" and plain["step reads"] == "none"  # no data set: nothing is read
    assert plain["jitter"] == "none" and plain["apply"] == "real" and plain["workers"] == "2-4"
    reads = r.config_dimensions(_config("b", data=8 * MIB, init_io="sequential", step_reads="random", cv=0.3, apply=0.002))
    assert (reads["init data"], reads["step reads"], reads["jitter"], reads["apply"]) == ("sequential", "random",
                                                                                        "lognormal", "emulated")


def test_each_config_counts_once_from_its_first_repeat_that_ran_ok(tmp_path):
    folder = _folder(tmp_path / "d1", [_config("a"), _config("b")], [
        ("a", 0, "failed", {"train": (1.0, 3.0)}),
        ("a", 1, "ok", {"train": (2.0, 3.0), "read": (float("nan"), 0.001)}),
        ("a", 2, "ok", {"train": (4.0, 3.0)}),
        ("b", 0, "ok", {"train": (1.0, 0.5), "push": (0.0, 0.001), "pull": (0.002, 0.003)}),
    ])
    res = r.folder_residuals(folder)
    got = {(row.config_id, row.phase): row.error for row in res.itertuples()}
    # a: repeat 1 (the failed repeat 0 is not judged); its read was not measured: no row.
    # b: push measured 0 (no events): no row.
    assert got == {("a", "train"): pytest.approx(0.5), ("b", "train"): pytest.approx(-0.5),
                   ("b", "pull"): pytest.approx(0.5)}
    assert set(res["folder"]) == {"d1"} and list(res.loc[res.config_id == "a", "workers"]) == ["2-4"]


def test_a_folder_the_model_never_compared_is_refused_with_the_way_out(tmp_path):
    bare = tmp_path / "run"
    bare.mkdir()
    (bare / "manifest.json").write_text(json.dumps({"configs": []}))
    with pytest.raises(UserError, match="no summary.csv.*testbed validate"):
        r.folder_residuals(bare)
    folder = _folder(tmp_path / "other", [_config("a")], [("a", 0, "ok", {"train": (1.0, 1.0)})], family="queueing")
    with pytest.raises(UserError, match="no predictions of the simulated family.*--repredict"):
        r.folder_residuals(folder)
    with pytest.raises(UserError, match="unknown model family 'mva'"):
        r.folder_residuals(folder, "mva")
    with pytest.raises(UserError, match="not a run folder"):
        r.folder_residuals(tmp_path / "nothing")


def test_folders_are_named_one_by_one_or_by_the_folder_holding_them(tmp_path):
    for name in ("d2", "d1"):
        _folder(tmp_path / "draws" / name, [_config("a")], [("a", 0, "ok", {"train": (1.0, 1.0)})])
    (tmp_path / "draws" / "notes").mkdir()
    assert [p.name for p in r.folders_from([tmp_path / "draws"])] == ["d1", "d2"]
    assert [p.name for p in r.folders_from([tmp_path / "draws" / "d2"])] == ["d2"]
    with pytest.raises(UserError, match="neither a run folder nor a folder of run folders"):
        r.folders_from([tmp_path / "draws" / "notes"])


def test_two_folders_of_one_name_stay_apart(tmp_path):
    for parent, measured in (("a", 1.0), ("b", 2.0)):
        _folder(tmp_path / parent / "draw", [_config("c")], [("c", 0, "ok", {"train": (measured, 1.5)})])
    res = r.residuals([tmp_path / "a" / "draw", tmp_path / "b" / "draw"])
    assert sorted(res["error"]) == pytest.approx([-0.25, 0.5]) and res["folder"].nunique() == 2
    with pytest.raises(UserError, match="no folders given"):
        r.residuals([])


def test_the_sign_test_is_the_binomial_tail():
    assert r.sign_test_p(8, 8) == pytest.approx(1 / 256)
    assert r.sign_test_p(0, 10) == pytest.approx(1.0)
    assert r.sign_test_p(12, 14) == pytest.approx(sum(math.comb(14, k) for k in range(12, 15)) / 2**14)


def _pooled(groups):
    """A residual frame: for each (dimension values, errors) a config per error."""
    rows = []
    for i, (dims, errors) in enumerate(groups):
        for j, e in enumerate(errors):
            rows.append({"folder": f"d{j % 3}", "config_id": f"c{i}-{j}", "phase": "pull", "error": e,
                         **{d: "x" for d in r.DIMENSIONS}, **dims})
    return pd.DataFrame(rows)


def test_a_group_missed_alike_is_found_and_a_noisy_or_small_one_is_not():
    res = _pooled([
        ({"compute": "spin"}, [-0.4] * 11 + [0.1]),            # short, 11 of 12: found
        ({"compute": "sleep"}, [0.4, -0.4] * 5),               # two-sided: not
        ({"compute": "matmul"}, [-0.5] * 5),                   # too few: not
    ])
    found = r.biased_groups(res, pairs=False)
    assert list(found["group"]) == ["compute=spin"]
    row = found.iloc[0]
    assert row["n"] == 12 and row["median_signed_err"] == pytest.approx(-0.4) and row["agree"] == pytest.approx(11 / 12)
    assert row["p_value"] == pytest.approx(r.sign_test_p(11, 12)) and row["folders"] == 3
    # A stricter test, a larger bias or more configs asked for: none.
    assert r.biased_groups(res, pairs=False, alpha=0.001).empty
    assert r.biased_groups(res, pairs=False, bias=0.5).empty
    assert r.biased_groups(res, pairs=False, min_n=13).empty


def test_a_pair_is_shown_only_where_it_says_more_than_its_single_groups():
    # sync=sync alone: a mild bias; with compute=spin: a strong one. The pair adds to the
    # single groups and is kept; where its single group is as biased, it is not.
    res = _pooled([
        ({"compute": "spin", "sync": "sync"}, [-0.5] * 10),
        ({"compute": "sleep", "sync": "sync"}, [0.05] * 10),
        ({"compute": "spin", "sync": "async"}, [-0.5] * 10),
    ])
    groups = list(r.biased_groups(res, per_phase=None)["group"])
    assert "compute=spin" in groups
    assert "compute=spin, sync=sync" not in groups and "compute=spin, sync=async" not in groups  # as biased as spin alone
    res2 = _pooled([
        ({"compute": "spin", "sync": "sync"}, [-0.5] * 10),
        ({"compute": "spin", "sync": "async"}, [0.05] * 10),
        ({"compute": "sleep", "sync": "sync"}, [0.05] * 10),
    ])
    groups2 = list(r.biased_groups(res2, per_phase=None)["group"])
    assert groups2 == ["compute=spin, sync=sync"]


def test_a_group_says_what_its_other_phases_did():
    # Ten spinning configs whose train is 30 % short because their pushes are 40 % short.
    rows = []
    for j in range(10):
        for phase, e in (("train", -0.3), ("push", -0.4), ("pull", 0.02)):
            rows.append({"folder": "d0", "config_id": f"s{j}", "phase": phase, "error": e,
                         **{d: "x" for d in r.DIMENSIONS}, "compute": "spin"})
        rows.append({"folder": "d0", "config_id": f"z{j}", "phase": "train", "error": 0.01,
                     **{d: "x" for d in r.DIMENSIONS}, "compute": "sleep"})
    found = r.biased_groups(pd.DataFrame(rows), pairs=False)
    train = found[found["phase"] == "train"].iloc[0]
    assert train["group"] == "compute=spin" and train["other_phases"] == "push -40%, pull +2%"
    assert "push -40%, pull +2%" in r.describe(pd.DataFrame(rows), found, r.phase_table(pd.DataFrame(rows)), "simulated")


def test_the_phase_table_pools_every_config(tmp_path):
    res = _pooled([({"compute": "spin"}, [-0.1, 0.2, 0.3, -0.4])])
    table = r.phase_table(res)
    assert list(table["phase"]) == ["pull"] and table.iloc[0]["n"] == 4
    assert table.iloc[0]["median_abs_err"] == pytest.approx(0.25)
    assert table.iloc[0]["p90_abs_err"] == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4], 90))
    assert table.iloc[0]["median_signed_err"] == pytest.approx(0.05)


def test_the_command_prints_the_tables_and_writes_the_rows(tmp_path, capsys):
    configs = [_config(f"c{i}", mode="spin" if i < 10 else "sleep") for i in range(14)]
    rows = [(f"c{i}", 0, "ok", {"train": (1.0, 0.6 if i < 10 else 1.02), "push": (0.01, 0.0105)}) for i in range(14)]
    folder = _folder(tmp_path / "draws" / "d1", configs, rows)
    csv, out = tmp_path / "rows.csv", tmp_path / "tables.md"
    assert main(["residuals", str(folder.parent), "--csv", str(csv), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "over 1 folders, 14 configs" in printed
    assert "| train | compute=spin | 10 | -40.0% |" in printed
    assert len(pd.read_csv(csv)) == 28 and out.read_text().startswith("# Residuals of the simulated family")


@pytest.mark.parametrize("argv,needle", [
    (["residuals", "{tmp}/missing"], "no such folder"),
    (["residuals", "{tmp}", "--min-n", "1"], "--min-n 1"),
    (["residuals", "{tmp}", "--alpha", "0"], "--alpha 0"),
])
def test_the_command_refuses_bad_input_in_one_line(tmp_path, capsys, argv, needle):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_each_row_carries_the_hypervisors_steal_while_its_repeat_ran(tmp_path):
    folder = _folder(tmp_path / "d1", [_config("a"), _config("b")],
                     [("a", 0, "ok", {"train": (1.0, 1.0)}), ("b", 0, "ok", {"train": (1.0, 1.0)})])
    assert r.folder_residuals(folder)["steal_percent"].isna().all()  # no monitors: no figure
    pd.DataFrame({"config_id": ["a", "a", "a", "b"], "repeat": [0, 0, 1, 0],
                  "cpu_steal_percent": [10.0, 20.0, 90.0, float("nan")]}).to_parquet(folder / "resources.parquet")
    res = r.folder_residuals(folder).set_index("config_id")["steal_percent"]
    assert res["a"] == pytest.approx(15.0) and math.isnan(res["b"])  # its repeat's samples; NaN ones left out
    # a folder made before the column reads no figure, not an error
    pd.DataFrame({"config_id": ["a"], "repeat": [0], "cpu_percent": [50.0]}).to_parquet(folder / "resources.parquet")
    assert r.folder_residuals(folder)["steal_percent"].isna().all()


def test_the_reads_row_carries_its_wait_for_a_core(tmp_path):
    data = _config("a", data=8 * MIB, step_reads="random")
    folder = _folder(tmp_path / "d1", [data, _config("b", data=8 * MIB, step_reads="random")],
                     [("a", 0, "ok", {"train": (1.0, 1.0), "read": (0.010, 0.008)}),
                      ("b", 0, "ok", {"train": (1.0, 1.0), "read": (0.010, 0.008)})])
    summary = pd.read_csv(folder / "summary.csv")
    summary["read_runq_mean_s"] = [0.007, float("nan")]  # b: a folder made before the events
    summary.to_csv(folder / "summary.csv", index=False)
    res = r.folder_residuals(folder).set_index(["config_id", "phase"])["runq_s"]
    assert res["a", "read"] == pytest.approx(0.007)
    assert math.isnan(res["b", "read"]) and math.isnan(res["a", "train"])  # only the read's row has one
