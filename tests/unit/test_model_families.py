"""The three families, phase by phase, on hand-computed cases.

The reference profile has round figures so every number can be checked by hand:
actor-call latency L = 1 ms, transfer W = 1 MB/s, server overhead o = 1 ms, apply
A = 1 MB/s, disk B(1) = 1 MB/s, B(2) = 1.5 MB/s, B(4) = 2 MB/s. With M = 1000 bytes
and S = 1: t_push = t_pull = 2 ms, a = 1 ms, s_push = s_pull = 2 ms, D = 4 ms (k = 1).
"""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest

from testbed.config.errors import UserError
from testbed.model import Bound, ModelFamily, init_seconds, predict, predict_all, step_terms
from testbed.model.profile import StepCpuLine
from tests import factories
from tests.factories import MS
from tests.factories import config_fields as config

# The round figures of the module's docstring (the factories' defaults), plus FLOPs and IOPS.
profile = functools.partial(factories.profile, identity={"test": True}, flops_per_s=1e9,
                            disk=factories.disk(rand_read_iops={4096: 500.0}))


def test_terms_by_hand():
    t = step_terms(config(), profile())
    assert (t.push_transfer_s, t.pull_transfer_s) == pytest.approx((2 * MS, 2 * MS))
    assert (t.apply_s, t.push_service_s, t.pull_service_s) == pytest.approx((MS, 2 * MS, 2 * MS))
    assert t.server_demand_s == pytest.approx(4 * MS)
    assert step_terms(config(pull_every=4), profile()).server_demand_s == pytest.approx(2.5 * MS)


def test_initial_family_phases():
    p = predict(config(workers=8), profile(), ModelFamily.INITIAL)
    # step = c + t_push + t_pull + s_push + s_pull = 10 + 2 + 2 + 2 + 2 ms, whatever N
    assert p.step_s == pytest.approx(18 * MS)
    assert p.phases == pytest.approx({"read": 0, "compute": 10 * MS, "push": 4 * MS, "pull": 4 * MS,
                                      "queue": 0, "apply": MS})
    assert p.train_s == pytest.approx(100 * 18 * MS)
    assert p.steps_per_s == pytest.approx(8 / (18 * MS))
    assert p.init_s == 0 and p.total_s == pytest.approx(p.train_s)
    assert p.knee_workers is None and p.knee_asymptotic is None
    assert p.bound is Bound.COMPUTE


def test_updated_family_caps_the_server():
    below = predict(config(workers=4), profile(), ModelFamily.UPDATED)
    assert below.step_s == pytest.approx(18 * MS) and below.queue_s == 0  # 4 x 4 ms < 18 ms
    above = predict(config(workers=8), profile(), ModelFamily.UPDATED)
    assert above.step_s == pytest.approx(32 * MS)                          # N D = 8 x 4 ms
    assert above.train_s == pytest.approx(8 * 100 * 4 * MS)               # total updates x D
    assert above.steps_per_s == pytest.approx(1 / (4 * MS))
    assert above.queue_s == pytest.approx(14 * MS)
    assert above.push_s == pytest.approx(4 * MS + 14 * MS)
    assert above.knee_asymptotic == pytest.approx(18 / 4)
    assert above.knee_train_workers == 5  # gains 1/18 ms^-1 up to 4, then 1/4 - 4/18 < half of it
    assert above.bound is Bound.SERVER and above.server_utilization == pytest.approx(1.0)


def test_queueing_family_async_two_workers():
    # jittered compute (mean unchanged): the workers drift apart and MVA's random arrivals hold
    jittered = {"seconds": 0.01, "jitter": {"distribution": "uniform", "cv": 0.2}}
    p = predict(config(workers=2, compute=jittered), profile(), ModelFamily.QUEUEING)
    r2 = 4 * MS * (1 + 4 / 18)  # exact MVA, Z = 14 ms, D = 4 ms
    assert p.step_s == pytest.approx(14 * MS + r2)
    wait = (r2 - 4 * MS) / 2    # a push and a pull per step share the waiting
    assert p.queue_s == pytest.approx(wait)
    assert p.push_s == pytest.approx(2 * MS + wait + 2 * MS)
    assert p.pull_s == pytest.approx(2 * MS + wait + 2 * MS)
    assert p.apply_s == pytest.approx(MS) and p.compute_s == pytest.approx(10 * MS)
    assert p.server_utilization == pytest.approx(2 / (14 * MS + r2) * 4 * MS)


def test_queueing_family_async_without_jitter_is_mva_not_a_lockstep_burst():
    # exactly equal compute: the workers' first pushes arrive together, but they settle into a
    # staggered order, so the family is MVA's (a burst of (N - 1) / 2 services per visit every
    # step, which it once added, over-predicted held-out runs: docs/model.md)
    p = predict(config(workers=2), profile(), ModelFamily.QUEUEING)
    lone = predict(config(workers=1), profile(), ModelFamily.QUEUEING).step_s
    assert lone < p.step_s < 18 * MS + 0.5 * (2 * MS + MS)
    assert p.queue_s < 0.5 * 2 * MS
    # far past saturation MVA's N D
    many = predict(config(workers=40), profile(), ModelFamily.QUEUEING)
    assert many.step_s == pytest.approx(40 * 4 * MS, rel=0.01)


def test_queueing_equals_initial_for_one_worker():
    one = {f: predict(config(workers=1), profile(), f) for f in ModelFamily}
    assert one[ModelFamily.QUEUEING].step_s == pytest.approx(one[ModelFamily.INITIAL].step_s)
    assert one[ModelFamily.UPDATED].step_s == pytest.approx(one[ModelFamily.INITIAL].step_s)


def test_queueing_family_sync_step():
    p = predict(config(workers=4, sync="sync"), profile(), ModelFamily.QUEUEING)
    # c + t_push + t_pull + N D = 10 + 4 + 16 ms; pushes wait (N - 1) / 2 services on average
    assert p.step_s == pytest.approx(30 * MS)
    assert p.queue_s == pytest.approx(1.5 * 2 * MS)
    assert p.push_s == pytest.approx(2 * MS + 3 * MS + 2 * MS)
    assert p.knee_asymptotic == pytest.approx(18 / 4)  # X(1) = 1/18 ms meets the cap 1/D at 4.5


def test_sync_pays_for_the_slowest_worker():
    plain = predict(config(workers=8, sync="sync"), profile(), ModelFamily.QUEUEING)
    uniform = config(workers=8, sync="sync", compute={"seconds": 0.01, "jitter": {"distribution": "uniform", "cv": 0.2}})
    jittered = predict(uniform, profile(), ModelFamily.QUEUEING)
    a = 0.2 * 3 ** 0.5
    assert jittered.step_s - plain.step_s == pytest.approx(10 * MS * (2 * a * 8 / 9 - a))
    assert jittered.compute_s == pytest.approx(plain.compute_s)  # the mean event is unchanged


# The updated and queueing families add the driver's call (L = 1 ms) and, when sequential, two
# gate calls per worker (4 x 2 ms); the initial family is the study's ideal reading alone.
@pytest.mark.parametrize("partition,io,initial_s,other_s", [
    ("shard", "parallel", 0.25, 0.5 + MS),          # V = 0.25 MB at 1 MB/s alone; 1 MB over B(4) = 2 MB/s
    ("shard", "sequential", 0.25, 1.0 + 9 * MS),    # N V / B(1) = 1 MB / 1 MB/s
    ("full", "sequential", 1.0, 4.0 + 9 * MS),      # 4 x 1 MB / 1 MB/s
    ("full", "parallel", 1.0, 2.0 + MS),            # 4 MB over 2 MB/s
])
def test_init_phase(partition, io, initial_s, other_s):
    cfg = config(workers=4, workload={"steps": 10, "dataset_bytes": 1_000_000},
                 data={"partition": partition, "init_io": io})
    got = {p.model: p.init_s for p in predict_all(cfg, profile())}
    assert got[ModelFamily.INITIAL] == pytest.approx(initial_s)
    assert got[ModelFamily.UPDATED] == pytest.approx(other_s)
    assert got[ModelFamily.QUEUEING] == pytest.approx(other_s)


def test_sequential_init_is_linear_in_n():
    cfg = config(workload={"steps": 10, "dataset_bytes": 3_000_000}, data={"partition": "full", "init_io": "sequential"})
    times = [init_seconds(cfg, profile(), n, ideal=False) for n in range(1, 40)]
    # N x (V / B(1) + two gate calls) after the driver's call: a straight line in N
    assert times == pytest.approx([MS + (3.0 + 2 * MS) * n for n in range(1, 40)])
    assert np.diff(times) == pytest.approx([3.0 + 2 * MS] * 38)


def test_sequential_full_init_puts_the_job_knee_at_one_worker():
    cfg = config(workers=8, workload={"steps": 10, "dataset_bytes": 10_000_000},
                 data={"partition": "full", "init_io": "sequential"})
    p = predict(cfg, profile(), ModelFamily.UPDATED)
    assert p.bound is Bound.DISK  # 80 s of init against 0.32 s of training
    assert p.knee_workers == 1  # each extra worker adds 10 s of init for 0.18 s of training


def test_strong_scaling_splits_the_steps():
    cfg = config(workers=4, workload={"epochs": 2, "dataset_bytes": 1_000_000, "sample_bytes": 1000, "minibatch": 10})
    p = predict(cfg, profile(), ModelFamily.INITIAL)
    assert p.steps == 50  # 2 x 1000 samples / 10 per step / 4 workers
    assert p.train_s == pytest.approx(50 * 18 * MS)
    weak = predict(config(workers=4, workload={"steps": 50}), profile(), ModelFamily.INITIAL)
    assert weak.train_s == pytest.approx(p.train_s)


def test_step_reads():
    seq = config(workers=1, workload={"steps": 10, "dataset_bytes": 10**6, "sample_bytes": 1000, "minibatch": 10},
                 data={"step_reads": "sequential"})
    assert predict(seq, profile(), ModelFamily.INITIAL).read_s == pytest.approx(10 * MS)  # 10 kB at 1 MB/s
    rand = seq.model_copy(update={"data": seq.data.model_copy(update={"step_reads": "random"})})
    assert predict(rand, profile(), ModelFamily.INITIAL).read_s == pytest.approx(10 / 500)  # 10 IOs at 500 IOPS
    many = seq.model_copy(update={"workers": 16})
    assert predict(many, profile(), ModelFamily.QUEUEING).read_s > 10 * MS  # readers queue at the disk


def test_matmul_compute_uses_the_flop_rate():
    cfg = config(compute={"mode": "matmul", "flops": 2e7})
    assert predict(cfg, profile(), ModelFamily.INITIAL).compute_s == pytest.approx(0.02)
    with pytest.raises(UserError, match="flops_per_s"):
        predict(cfg, profile(flops_per_s=0.0), ModelFamily.INITIAL)


def test_missing_disk_is_a_user_error():
    cfg = config(workload={"steps": 10, "dataset_bytes": 1000})
    with pytest.raises(UserError, match="disk"):
        predict(cfg, profile(disk=None), ModelFamily.UPDATED)


def test_shards_raise_saturated_throughput_s_fold():
    per_byte = profile(server_call_overhead_s=0.0)
    rates = {s: predict(config(workers=1000, servers=s, gradient_bytes=4000), per_byte).steps_per_s for s in (1, 4)}
    assert rates[4] / rates[1] == pytest.approx(4, rel=0.01)


def test_cpu_centre_only_when_calibrated():
    cfg = config(workers=32, gradient_bytes=100)
    cheap_server = dict(server_call_overhead_s=0.05 * MS)  # D = 0.3 ms: the server is not the limit
    without = predict(cfg, profile(**cheap_server), ModelFamily.QUEUEING)
    with_cpu = predict(cfg, profile(**cheap_server, step_cpu=StepCpuLine(1.5 * MS)), ModelFamily.QUEUEING)
    # 32 workers x 1.5 ms of RPC work on 2 cores: a step can't be shorter than 24 ms
    assert without.step_s < 20 * MS
    assert with_cpu.step_s >= 24 * MS and with_cpu.bound is Bound.COMPUTE
    one = config(workers=1, gradient_bytes=100)
    assert predict(one, profile(step_cpu=StepCpuLine(1.5 * MS))).step_s == pytest.approx(
        predict(one, profile()).step_s)  # alone, the RPC work only moves from delay to centre


def test_remote_bandwidth_when_spread_over_nodes():
    two_nodes = profile(transfer_bytes_per_s_remote=0.5e6, nodes=2)
    spread = config(placement={"strategy": "spread"})
    assert step_terms(spread, two_nodes).push_transfer_s == pytest.approx(3 * MS)
    assert step_terms(config(), two_nodes).push_transfer_s == pytest.approx(2 * MS)
    assert step_terms(spread, profile(transfer_bytes_per_s_remote=0.5e6)).push_transfer_s == pytest.approx(2 * MS)


def test_importing_the_model_does_not_import_ray():
    code = ("import sys, testbed.model, testbed.model.mva; "
            "bad = [m for m in ('ray', 'pydantic', 'pandas') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_sync_matmul_workers_time_share_the_cores():
    # 1e7 FLOPs at 1 GFLOP/s: 10 ms of work each
    p = predict(config(workers=8, sync="sync", compute={"mode": "matmul", "flops": 1e7}), profile(),
                ModelFamily.QUEUEING)
    # 8 x 10 ms of busy CPU on 2 cores take 40 ms; then t_push + t_pull + N D = 4 + 32 ms
    assert p.step_s == pytest.approx(76 * MS)
    assert p.compute_s == pytest.approx(40 * MS)


def test_spin_lasts_its_duration_however_many_share_the_cores():
    # spin busy-waits until a wall-clock deadline: 8 workers on 2 cores still spin 10 ms each
    p = predict(config(workers=8, sync="sync", compute={"mode": "spin", "seconds": 0.01}), profile(),
                ModelFamily.QUEUEING)
    assert p.compute_s == pytest.approx(10 * MS)
    assert p.step_s == pytest.approx(46 * MS)  # 10 ms, then t_push + t_pull + N D = 4 + 32 ms


def test_setup_follows_the_measured_start_up_curve():
    from testbed.model.profile import interpolate_setup_s
    points = [(2, 1.0), (8, 4.0), (16, 12.0)]
    assert interpolate_setup_s(points, 2) == pytest.approx(1.0)
    assert interpolate_setup_s(points, 5) == pytest.approx(2.5)    # between 2 and 8
    assert interpolate_setup_s(points, 20) == pytest.approx(16.0)  # beyond: the last segment's slope
    assert interpolate_setup_s([], 5) is None
    # 4 workers + 1 shard = 5 actors on the curve
    p = predict(config(workers=4), profile(setup_s_by_actors={2: 1.0, 8: 4.0, 16: 12.0}), ModelFamily.QUEUEING)
    assert p.setup_modelled and p.setup_s == pytest.approx(2.5)
