"""predict_spec and the table/CSV, plus property-based checks of the families on random configs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.cli.predict import format_table, write_csv
from testbed.config.errors import UserError
from testbed.config.spec import ConfigFields
from testbed.model import ModelFamily, predict, scaling_curve, step_terms
from testbed.model.profile import StepCpuLine, save_profile
from testbed.model.sweep import CSV_COLUMNS, parse_models, predict_spec
from testbed.records.atomic import atomic_write_text
from tests.factories import profile

SPEC = """\
name: demo
gradient_bytes: 1000
compute: {seconds: 10ms}
workload: {steps: 100, dataset_bytes: 1000000}
data: {init_io: sequential, partition: full}
sweep:
  workers: [1, 8]
"""


@pytest.fixture
def files(tmp_path):
    spec = tmp_path / "demo.yaml"
    spec.write_text(SPEC)
    return spec, save_profile(profile(), tmp_path / "profile.json", atomic_write_text)


def test_predict_spec_rows_and_columns(files):
    spec, prof = files
    frame = predict_spec(spec, prof, "initial,updated,queueing")
    assert list(frame.columns[:len(CSV_COLUMNS)]) == CSV_COLUMNS
    assert len(frame) == 6 and set(frame["model"]) == {"initial", "updated", "queueing"}
    for phase in ("read", "compute", "push", "pull", "queue", "apply"):
        assert f"{phase}_mean_s" in frame.columns
    eight = frame[(frame.workers == 8) & (frame.model == "updated")].iloc[0]
    assert eight.init_s == pytest.approx(8.017)        # 8 workers x 1 MB one after another at 1 MB/s, 17 calls of 1 ms
    assert eight.train_s == pytest.approx(100 * 8 * 4e-3)  # saturated server: N x steps x D
    assert eight.total_s == pytest.approx(8.017 + 3.2)
    assert eight.bound == "disk"                        # 8 s of init outweigh 3.2 s of training
    assert eight.knee_workers == 1
    initial = frame[(frame.workers == 8) & (frame.model == "initial")].iloc[0]
    assert pd.isna(initial.knee_workers)


def test_models_subset_and_errors(files):
    spec, prof = files
    assert set(predict_spec(spec, prof, "queueing")["model"]) == {"queueing"}
    assert parse_models(None) == list(ModelFamily)
    assert parse_models(" Initial ,queueing,initial") == [ModelFamily.INITIAL, ModelFamily.QUEUEING]
    with pytest.raises(UserError, match="allowed: initial, updated, queueing"):
        parse_models("initial,mva")
    with pytest.raises(UserError):
        predict_spec(spec, spec.with_name("missing.json"))


def test_table_and_csv(files, tmp_path):
    spec, prof = files
    frame = predict_spec(spec, prof)
    text = format_table(frame)
    assert text.count("workers=") == 2 and "queueing" in text and "server" in text
    initial_lines = [line.split() for line in text.splitlines() if line.startswith("initial")]
    assert len(initial_lines) == 2 and all(cells[-3:] == ["-", "-", "-"] for cells in initial_lines)
    out = write_csv(frame, tmp_path / "out" / "pred.csv")
    back = pd.read_csv(out)
    assert list(back.columns[:len(CSV_COLUMNS)]) == CSV_COLUMNS and len(back) == 2 * len(ModelFamily)
    with pytest.raises(UserError):
        write_csv(frame, out, overwrite=False)


configs = st.fixed_dictionaries({
    "workers": st.integers(1, 48),
    "servers": st.integers(1, 4),
    "pull_every": st.integers(1, 5),
    "gradient_bytes": st.integers(4, 20_000).map(lambda n: 4 * n),  # >= one float32 per shard
    "compute": st.fixed_dictionaries({
        "mode": st.sampled_from(["sleep", "spin"]), "seconds": st.floats(0.0, 0.05),
        "jitter": st.fixed_dictionaries({"distribution": st.sampled_from(["none", "uniform", "normal", "lognormal",
                                                                          "exponential"]),
                                         "cv": st.floats(0.0, 1.0)})}),
    "workload": st.fixed_dictionaries({"steps": st.integers(1, 500), "dataset_bytes": st.integers(0, 10**7)}),
    "data": st.fixed_dictionaries({"step_reads": st.sampled_from(["none", "sequential"]),
                                   "init_io": st.sampled_from(["parallel", "sequential"])}),
})
profiles = st.builds(
    lambda apply_bw, overhead, latency, bw, cpu: profile(
        server_apply_bytes_per_s=apply_bw, server_call_overhead_s=overhead, actor_call_latency_s=latency,
        transfer_bytes_per_s_local=bw, step_cpu=None if cpu is None else StepCpuLine(cpu)),
    st.floats(1e6, 1e10), st.floats(0.0, 1e-3), st.floats(0.0, 1e-3), st.floats(1e6, 1e10),
    st.one_of(st.none(), st.floats(0.0, 1e-3)))


@settings(max_examples=30, deadline=None)
@given(fields=configs, prof=profiles)
def test_property_families_respect_the_bounds(fields, prof):
    cfg = ConfigFields.model_validate(fields)
    t = step_terms(cfg, prof)
    ideal = t.read_s + t.compute_s + t.transfer_s + t.server_demand_s
    # The simulated family's own property test (test_model_simulated) checks the same invariants
    # on smaller configs: simulating these 30 examples would cost ten times the rest of the test.
    got = {f: predict(cfg, prof, f) for f in ModelFamily if f is not ModelFamily.SIMULATED}
    n = cfg.workers
    assert got[ModelFamily.INITIAL].steps_per_s == pytest.approx(n / ideal)
    assert got[ModelFamily.UPDATED].steps_per_s == pytest.approx(min(n / ideal, 1 / t.server_demand_s))
    # Every resource the queueing family adds can only slow things down.
    assert got[ModelFamily.QUEUEING].steps_per_s <= got[ModelFamily.UPDATED].steps_per_s * (1 + 1e-9)
    for p in got.values():
        assert p.total_s == pytest.approx(p.setup_s + p.init_s + p.train_s)
        assert p.train_s == pytest.approx(p.steps * p.step_s)
        assert all(v >= 0 for v in p.phases.values())


@settings(max_examples=20, deadline=None)
@given(fields=configs, prof=profiles, sync=st.sampled_from(["async", "sync"]))
def test_property_throughput_non_decreasing_in_workers(fields, prof, sync):
    # sync mode pulls after every step (the barrier is the pull): the spec requires pull_every 1
    extra = {"pull_every": 1} if sync == "sync" else {}
    cfg = ConfigFields.model_validate({**fields, "sync": sync, **extra})
    # The simulated family has no curve from the terms alone (it needs the config's seed, mode,
    # faults) and its rates carry simulation noise; its knee tests are in test_model_simulated.
    for family in (f for f in ModelFamily if f is not ModelFamily.SIMULATED):
        x = scaling_curve(family, step_terms(cfg, prof), 80).throughput_per_s
        assert np.all(np.diff(x) >= -1e-9 * x[1:]), family
