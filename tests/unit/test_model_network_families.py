"""Every model family predicts the shaped links (docs/model.md, "Network links"): a push or a
pull alone takes M / B + L more, a shard's links are shared by the transfers through them and
cap its throughput, and an unshaped network changes nothing."""

from __future__ import annotations

import dataclasses

import pytest

from testbed.model.families import Bound, ModelFamily, scaling_curve
from testbed.model.prediction import PHASES, predict
from testbed.model.simfamily import sim_spec
from testbed.model.simulation import simulate
from testbed.model.terms import step_terms
from tests import factories

MIB = 2**20
M = 16 * MIB
GBIT_BYTES_PER_S = 125e6
FAMILIES = tuple(ModelFamily)
# Calls of 1 ms, transfers and applies at 1 GB/s: the calibrated part of a 16 MiB push is ~17 ms.
PROFILE = factories.profile(transfer_bytes_per_s_local=1e9, server_apply_bytes_per_s=1e9)


def config(**fields):
    base = dict(gradient_bytes=M, compute={"seconds": 0.05})
    base.update(fields)
    return factories.config_fields(**base)


def fields_of(p) -> dict:
    row = dataclasses.asdict(p)
    row.pop("config_id")
    return row


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sync", ["async", "sync"])
def test_unshaped_between_nodes_predicts_as_without_a_network_section(family, sync):
    # The model reads the between-node figures for every pair: shaping only same_node changes nothing.
    plain = predict(config(workers=4, sync=sync), PROFILE, family)
    same_node = predict(config(workers=4, sync=sync, network={"same_node": {"bandwidth": "1Gbit"}}), PROFILE, family)
    assert fields_of(same_node) == fields_of(plain)


def test_unshaped_simulation_schedules_no_link_event():
    cfg = config(workers=4)
    spec = sim_spec(cfg, PROFILE, step_terms(cfg, PROFILE), steps=20)
    assert (spec.link_slice_s, spec.link_worker_s, spec.link_latency_s) == (0.0, 0.0, 0.0)
    unshaped = simulate(spec)
    shaped = simulate(dataclasses.replace(spec, link_slice_s=1e-4, link_worker_s=1e-4))
    assert unshaped.network_utilization is None
    assert shaped.events > unshaped.events


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sync", ["async", "sync"])
@pytest.mark.parametrize("latency_s", [0.0, 0.002])
def test_one_worker_pays_m_over_b_plus_latency_per_push_and_pull(family, sync, latency_s):
    net = {"bandwidth": "1Gbit", "latency": latency_s}
    base = predict(config(sync=sync), PROFILE, family)
    shaped = predict(config(sync=sync, network=net), PROFILE, family)
    link_s = M / GBIT_BYTES_PER_S + latency_s
    assert shaped.push_s - base.push_s == pytest.approx(link_s, rel=0.01)
    assert shaped.pull_s - base.pull_s == pytest.approx(link_s, rel=0.01)
    assert shaped.step_s > base.step_s + link_s  # push and a pull every step


@pytest.mark.parametrize("family", FAMILIES)
def test_latency_alone_adds_it_to_push_and_to_a_due_pull(family):
    base = predict(config(workers=2, pull_every=2), PROFILE, family)
    shaped = predict(config(workers=2, pull_every=2, network={"latency": "5ms"}), PROFILE, family)
    # +L on each, less what the longer cycle takes off the shard's queue (MVA: the two workers
    # then meet at the shard less often); never more than L
    for phase in ("push_s", "pull_s"):
        assert 0.85 * 0.005 <= getattr(shaped, phase) - getattr(base, phase) <= 1.01 * 0.005


@pytest.mark.parametrize("family", [ModelFamily.INITIAL, ModelFamily.UPDATED])
def test_the_studys_form_adds_a_workers_whole_gradient_with_s_shards(family):
    # With 4 shards each shard's link carries M/4, but the worker's own link all M: M / B.
    base = predict(config(servers=4), PROFILE, family)
    shaped = predict(config(servers=4, network={"bandwidth": "1Gbit"}), PROFILE, family)
    assert shaped.push_s - base.push_s == pytest.approx(M / GBIT_BYTES_PER_S, rel=0.01)


@pytest.mark.parametrize("family", [ModelFamily.QUEUEING, ModelFamily.SIMULATED])
def test_a_workers_own_link_outlasts_the_shards_part_with_s_shards(family):
    # The worker's link carries all 4 slices (M / B) while the shards take their slices and apply
    # them: the push is the worker's calibrated side plus M / B, the shards' part hidden under it.
    cfg = config(servers=4, network={"bandwidth": "1Gbit"})
    t = step_terms(cfg, PROFILE)
    push_side, pull_side = t.push_transfer_s, t.pull_transfer_s
    if family is ModelFamily.SIMULATED:
        # The simulation's worker side: the calibrated one less the 4 shards' contention for the
        # cores, which the simulation adds itself (sim_spec); here the link hides that part.
        spec = sim_spec(cfg, PROFILE, t)
        push_side, pull_side = spec.push_cpu_s + spec.push_wire_s, spec.pull_cpu_s + spec.pull_wire_s
        assert push_side < t.push_transfer_s and pull_side <= t.pull_transfer_s
    shaped = predict(cfg, PROFILE, family)
    assert shaped.push_s == pytest.approx(push_side + M / GBIT_BYTES_PER_S, rel=0.01)
    assert shaped.pull_s == pytest.approx(pull_side + M / GBIT_BYTES_PER_S, rel=0.01)


@pytest.mark.parametrize("family", [ModelFamily.QUEUEING, ModelFamily.SIMULATED])
def test_four_workers_through_one_inbound_link_never_beat_its_bandwidth(family):
    p = predict(config(workers=4, compute={"seconds": 0.001}, network={"bandwidth": "1Gbit"}), PROFILE, family)
    pushed_bytes_per_s = 4 * M / p.step_s
    assert pushed_bytes_per_s <= GBIT_BYTES_PER_S * (1 + 1e-9)
    assert p.bound is Bound.NETWORK
    # The two links both carry a slice a step: more than the inbound link's N (M/S) / B, less than both in turn.
    assert 4 * M / GBIT_BYTES_PER_S < p.step_s < 2 * 4 * M / GBIT_BYTES_PER_S


@pytest.mark.parametrize("family", [ModelFamily.QUEUEING, ModelFamily.SIMULATED, ModelFamily.UPDATED])
def test_a_binding_inbound_link_makes_the_step_n_slices_long(family):
    # Pulls every 8 steps leave the outbound link lightly used: the inbound link binds alone.
    p = predict(config(workers=4, pull_every=8, compute={"seconds": 0.001}, network={"bandwidth": "1Gbit"}),
                PROFILE, family)
    assert p.step_s == pytest.approx(4 * M / GBIT_BYTES_PER_S, rel=0.03)
    assert p.bound is Bound.NETWORK
    assert p.queue_s < 0.1 * p.push_s  # the wait is at the link, not at the shard's lock


def test_link_bound_queueing_reports_the_link_utilisation():
    t = step_terms(config(workers=4, pull_every=8, compute={"seconds": 0.001}, network={"bandwidth": "1Gbit"}),
                   PROFILE)
    curve = scaling_curve(ModelFamily.QUEUEING, t, 8)
    assert curve.utilization[Bound.NETWORK][3] > 0.9
    assert curve.utilization[Bound.NETWORK][3] > curve.utilization[Bound.SERVER][3]


@pytest.mark.parametrize("family", [ModelFamily.UPDATED, ModelFamily.QUEUEING])
def test_two_shards_halve_each_shards_link_demand(family):
    one = config(workers=4, network={"bandwidth": "1Gbit"})
    two = config(workers=4, servers=2, network={"bandwidth": "1Gbit"})
    t1, t2 = step_terms(one, PROFILE), step_terms(two, PROFILE)
    assert t2.links.shard_push_demand_s == pytest.approx(t1.links.shard_push_demand_s / 2)
    assert t2.links.worker_bytes_s == pytest.approx(t1.links.worker_bytes_s)
    knee1, knee2 = predict(one, PROFILE, family).knee_asymptotic, predict(two, PROFILE, family).knee_asymptotic
    assert 1.8 < knee2 / knee1 <= 2.0  # the link saturates at twice the workers (the cycle shrinks a little)


def test_sync_shares_each_link_among_the_rounds_n_transfers():
    base = predict(config(workers=4, sync="sync"), PROFILE, ModelFamily.QUEUEING)
    p = predict(config(workers=4, sync="sync", network={"bandwidth": "1Gbit"}), PROFILE, ModelFamily.QUEUEING)
    assert p.push_s - base.push_s == pytest.approx(4 * M / GBIT_BYTES_PER_S, rel=0.01)
    assert p.pull_s - base.pull_s == pytest.approx(4 * M / GBIT_BYTES_PER_S, rel=0.01)
    sim = predict(config(workers=4, sync="sync", network={"bandwidth": "1Gbit"}), PROFILE, ModelFamily.SIMULATED)
    assert sim.push_s == pytest.approx(p.push_s, rel=0.05)


def test_simulation_and_mva_agree_on_a_link_bound_async_run():
    cfg = config(workers=8, compute={"seconds": 0.05, "jitter": {"distribution": "exponential", "cv": 1.0}},
                 network={"bandwidth": "1Gbit"})
    mva, sim = predict(cfg, PROFILE, ModelFamily.QUEUEING), predict(cfg, PROFILE, ModelFamily.SIMULATED)
    assert sim.step_s == pytest.approx(mva.step_s, rel=0.05)
    assert sim.push_s == pytest.approx(mva.push_s, rel=0.05)
    assert sim.bound is mva.bound is Bound.NETWORK


def test_phases_cover_every_predicted_phase():
    # The link time lands in push and pull (no phase of its own).
    p = predict(config(network={"bandwidth": "1Gbit"}), PROFILE, ModelFamily.QUEUEING)
    assert {f"{ph}_s" for ph in PHASES} <= set(dataclasses.asdict(p))
