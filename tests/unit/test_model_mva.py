"""Exact MVA: against closed-form answers, the asymptotic bounds, and monotonicity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.model import Centre, CentreKind, asymptotic_knee, marginal_knee, solve_mva, throughput_bounds


def repairman_throughput(n: int, think_s: float, demand_s: float, servers: int = 1) -> float:
    """The exact birth-death solution of N customers, think time Z, one c-server queue."""
    weights = [1.0]
    for j in range(1, n + 1):
        arrive = (n - (j - 1)) / think_s
        serve = min(j, servers) / demand_s
        weights.append(weights[-1] * arrive / serve)
    total = sum(weights)
    return sum(w / total * min(j, servers) / demand_s for j, w in enumerate(weights))


def test_one_customer_is_exact():
    centres = [Centre("server", 0.004), Centre("disk", 0.002), Centre("pause", 0.003, CentreKind.DELAY)]
    res = solve_mva(centres, think_s=0.014, customers=1)
    assert res.throughput_per_s[1] == pytest.approx(1.0 / (0.014 + 0.004 + 0.002 + 0.003))
    assert res.response_s["server"][1] == pytest.approx(0.004)  # nobody to wait for


def test_hand_computed_two_customers():
    # Z = 14 ms, D = 4 ms: X(1) = 1/18 ms; Q(1) = 4/18; R(2) = 4 (1 + 4/18) ms.
    res = solve_mva([Centre("server", 0.004)], think_s=0.014, customers=2)
    r2 = 0.004 * (1 + 4 / 18)
    assert res.response_s["server"][2] == pytest.approx(r2)
    assert res.throughput_per_s[2] == pytest.approx(2 / (0.014 + r2))
    assert res.queue_length["server"][2] == pytest.approx(res.throughput_per_s[2] * r2)


@pytest.mark.parametrize("n", [1, 2, 5, 17, 40])
def test_single_queue_matches_machine_repairman(n):
    res = solve_mva([Centre("server", 0.003)], think_s=0.02, customers=n)
    assert res.throughput_per_s[n] == pytest.approx(repairman_throughput(n, 0.02, 0.003), rel=1e-9)


@pytest.mark.parametrize("n,cores", [(1, 2), (3, 2), (10, 2), (25, 4)])
def test_multi_server_centre_matches_machine_repairman(n, cores):
    res = solve_mva([Centre.multi_server("cpu", 0.01, cores)], think_s=0.015, customers=n)
    assert res.throughput_per_s[n] == pytest.approx(repairman_throughput(n, 0.015, 0.01, cores), rel=1e-7)


def test_delay_centre_never_queues():
    res = solve_mva([Centre("pause", 0.01, CentreKind.DELAY)], think_s=0.0, customers=50)
    np.testing.assert_allclose(res.throughput_per_s[1:], np.arange(1, 51) / 0.01)


def test_approaches_both_bounds_from_below():
    think, d = 0.014, 0.004
    res = solve_mva([Centre("server", d)], think, 400)
    x = res.throughput_per_s[1:]
    n = np.arange(1, 401)
    assert np.all(x <= n / (think + d) * (1 + 1e-12))
    assert np.all(x <= 1 / d * (1 + 1e-12))
    assert x[0] == pytest.approx(1 / (think + d))      # on the light-load line at N = 1
    assert x[-1] == pytest.approx(1 / d, rel=1e-6)      # on the cap far past N* = 4.5
    assert x[3] < 4 / (think + d) and x[3] < 1 / d      # strictly below both near the knee


def test_shards_raise_saturated_throughput_s_fold():
    # All demand per byte: S shards each serve M / S bytes, so D falls S-fold.
    per_byte_d = 0.008
    for shards in (2, 4, 8):
        one = solve_mva([Centre("server", per_byte_d)], 0.01, 600).throughput_per_s[-1]
        many = solve_mva([Centre("server", per_byte_d / shards)], 0.01, 600).throughput_per_s[-1]
        assert many / one == pytest.approx(shards, rel=1e-3)


def test_utilization_is_throughput_times_demand():
    res = solve_mva([Centre("server", 0.004), Centre.multi_server("cpu", 0.006, 2)], 0.01, 30)
    np.testing.assert_allclose(res.utilization("server"), res.throughput_per_s * 0.004)
    np.testing.assert_allclose(res.utilization("cpu"), res.throughput_per_s * 0.003)
    assert res.cycle_s()[30] == pytest.approx(30 / res.throughput_per_s[30])


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        solve_mva([Centre("a", 0.1), Centre("a", 0.2)], 0.0, 3)
    with pytest.raises(ValueError):
        solve_mva([Centre("a", 0.0)], 0.0, 3)
    with pytest.raises(ValueError):
        Centre("a", -1.0)
    with pytest.raises(ValueError):
        Centre("a", 1.0, CentreKind.LOAD_DEPENDENT, (1.0, 0.0))


def test_asymptotic_knee_is_z_plus_d_over_d():
    assert asymptotic_knee(0.014 + 0.004, 0.004) == pytest.approx(4.5)
    assert asymptotic_knee(0.01, 0.0) is None


def test_marginal_knee():
    linear = np.arange(1, 11) * 2.0
    assert marginal_knee(linear) is None
    capped = np.minimum(np.arange(1, 11), 4.2)  # gains 1, 1, 1, 0.2, 0, ...
    assert marginal_knee(capped) == 4
    with pytest.raises(ValueError):
        marginal_knee(np.array([1.0]))


centre_strategy = st.builds(
    lambda d, kind, cores: Centre.multi_server("c", d, cores) if kind == "multi" else Centre("c", d, CentreKind(kind)),
    st.floats(1e-5, 1.0), st.sampled_from(["queue", "delay", "multi"]), st.integers(1, 4))


@settings(max_examples=40, deadline=None)
@given(think=st.floats(0.0, 2.0), demands=st.lists(centre_strategy, min_size=1, max_size=3),
       customers=st.integers(1, 60))
def test_property_bounds_and_monotonicity(think, demands, customers):
    centres = [Centre(f"c{i}", c.demand_s, c.kind, c.rate_multipliers) for i, c in enumerate(demands)]
    res = solve_mva(centres, think, customers)
    x = res.throughput_per_s
    total = think + sum(c.demand_s for c in centres)
    assert x[1] == pytest.approx(1 / total, rel=1e-9)
    for n in range(1, customers + 1):
        assert x[n] <= throughput_bounds(think, centres, n) * (1 + 1e-9)
    assert np.all(np.diff(x) >= -1e-9 * x[1:])  # non-decreasing in N
    assert math.isfinite(x[-1]) and x[-1] > 0


def test_expected_max_factor_against_sampling():
    from testbed.model import expected_max_factor

    rng = np.random.default_rng(7)
    n = np.array([1, 2, 8])
    assert np.all(expected_max_factor("none", 0.5, n) == 1)
    np.testing.assert_allclose(expected_max_factor("exponential", 0.5, n), 1 + 0.5 * (np.array([1, 1.5, 761 / 280]) - 1))
    sigma = np.sqrt(np.log1p(0.3**2))
    draws = {"normal": np.maximum(0, rng.normal(1, 0.3, (200_000, 8))),
             "lognormal": rng.lognormal(-sigma**2 / 2, sigma, (200_000, 8))}
    for dist, d in draws.items():
        got = expected_max_factor(dist, 0.3, n)
        want = [d[:, :k].max(axis=1).mean() for k in n]
        np.testing.assert_allclose(got, want, rtol=5e-3)
