"""Resume planning, spec differences, default deadlines and the resource guard: pure parts."""

import math

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import DEADLINE_SLACK_S, expand, parse_spec, spec_diff, with_reliability_defaults
from testbed.records.summary import summarize
from testbed.runner.deadlines import deadline_from_prediction
from testbed.runner.guard import check_disk, check_object_store, object_store_bytes_needed
from testbed.runner.run import missing_runs


def spec(**fields):
    return parse_spec({"name": "t", "workload": {"steps": 2}, **fields})


def test_spec_diff_names_dotted_fields():
    old = spec(workers=2, sweep={"servers": [1, 2]}).model_dump(mode="json")
    new = spec(workers=3, compute={"seconds": "5ms"}, sweep={"servers": [1, 2, 4]}).model_dump(mode="json")
    assert spec_diff(old, new) == ["compute.seconds", "sweep.servers", "workers"]
    assert spec_diff(old, old) == []
    assert spec_diff({"a": 1}, {"b": 1}) == ["a", "b"]


def test_a_spec_saved_before_the_reliability_fields_is_the_same_spec():
    new = spec().model_dump(mode="json")
    old = {k: v for k, v in new.items() if k not in ("faults", "checkpoint_every", "restarts", "deadline_margin")}
    assert spec_diff(with_reliability_defaults(old), new) == []


def test_missing_runs_are_those_not_finished_in_sweep_order():
    configs = expand(spec(sweep={"workers": [1, 2, 3]}, repeats=2))
    done = {(configs[0].config_id, 0), (configs[1].config_id, 1)}
    todo = [(c.config_id, r) for c, r in missing_runs(done, configs, 2)]
    assert todo == [(configs[0].config_id, 1), (configs[1].config_id, 0), (configs[2].config_id, 0),
                    (configs[2].config_id, 1)]
    assert missing_runs(set(), configs, 2).__len__() == 6


def test_default_deadline_is_margin_times_prediction_plus_slack():
    assert deadline_from_prediction(3.0, 10.0) == 30.0 + DEADLINE_SLACK_S
    assert deadline_from_prediction(math.inf, 10.0) == DEADLINE_SLACK_S


def test_object_store_refusal_has_the_numbers():
    cfgs = expand(spec(workers=4, gradient_bytes="64MiB"))
    assert object_store_bytes_needed(cfgs[0]) == 512 * 2**20
    with pytest.raises(UserError, match=r"512 MiB in Ray's object store at once, but the store holds 256 MiB"):
        check_object_store(cfgs, 256 * 2**20)
    check_object_store(cfgs, 0)  # unknown: no check
    check_object_store(cfgs, 2**30)


def test_disk_refusal_adds_up_data_sets_and_counts_what_is_there():
    cfgs = expand(spec(workload={"steps": 2, "dataset_bytes": "3MiB"}, data={"dir": "/d"},
                       sweep={"workload.dataset_bytes": ["3MiB", "2MiB"]}))
    with pytest.raises(UserError, match=r"need 5 MiB \(5242880 bytes\) more but its disk has 4 MiB"):
        check_disk(cfgs, lambda d: 4 * 2**20)
    check_disk(cfgs, lambda d: 4 * 2**20, present_bytes=lambda c: 2**20)
    check_disk(expand(spec()), lambda d: 0)  # no data set: nothing needed


def test_summary_takes_status_and_lost_updates_from_the_manifest():
    import pandas as pd
    cfg = expand(spec())[0]
    ev = pd.DataFrame([dict(run_id="r", config_id=cfg.config_id, repeat=0, actor="server-0", role="server",
                            node="n", phase=p, step=s, start_ns=0, duration_ns=d, bytes=0, staleness=-1)
                       for p, s, d in [("apply", 0, 5), ("restart", -1, 2_000_000_000), ("train", -1, 10)]])
    row = summarize(ev, [cfg.model_dump(mode="json")], finished=[
        {"config_id": cfg.config_id, "repeat": 0, "status": "timed_out", "lost_updates": [2, 1]}]).iloc[0]
    assert (row.status, row.lost_updates, row.restarts, row.restart_s) == ("timed_out", 3, 1, 2.0)
