"""The validation space: parsing, the stratified draw, the spec's rules, refusals."""

import math

import numpy as np
import pytest
import yaml

from testbed.config.errors import UserError
from testbed.config.space import Dimension, Kind, load_space, parse_space, sample

SPACE_FILE = "experiments/validation_space.yaml"


@pytest.fixture(scope="module")
def space(request):
    return load_space(request.config.rootpath / SPACE_FILE)


def _text(space_data: dict) -> dict:
    return {"name": "s", "workload": {"steps": 5}, "space": space_data}


def _edges(dim: Dimension, m: int) -> np.ndarray:
    """The m + 1 edges of the m equal strata (equal in log space for the log kinds)."""
    u = np.linspace(0.0, 1.0, m + 1)
    lo, hi = dim.low, dim.high
    if dim.kind is Kind.LOG_UNIFORM:
        return np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    if dim.kind is Kind.LOG_INT:
        return np.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))
    if dim.kind is Kind.INT:
        return lo + u * (hi - lo + 1)
    return lo + u * (hi - lo)


def _one_per_stratum(dim: Dimension, values: list) -> bool:
    """A Latin hypercube: the j-th smallest value lies in the j-th stratum (integers: the
    stratum's floor range; a multiple: within half a multiple of it)."""
    edges = _edges(dim, len(values))
    slack = (dim.multiple_of or 0) / 2 + 1e-9
    for j, v in enumerate(sorted(values)):
        lo, hi = edges[j], edges[j + 1]
        if dim.kind in (Kind.INT, Kind.LOG_INT):
            lo, hi = math.floor(lo), math.floor(hi)
        if not lo - slack <= v <= hi + slack:
            return False
    return True


def _ranges(dim: Dimension):
    """The range dimensions inside dim (itself, or the ranges among a choice's values)."""
    if dim.kind is Kind.CHOICE:
        return [v for v in dim.values if isinstance(v, Dimension)]
    return [dim]


def test_every_dimension_is_covered_across_its_range_in_eight_draws(space):
    configs = sample(space, 8, seed=20261201)
    assert len(configs) == 8
    for dim in space.dimensions:
        values = [c.sweep_values[dim.path] for c in configs if dim.path in c.sweep_values]
        if dim.kind is Kind.CHOICE:
            plain = [v for v in dim.values if not isinstance(v, Dimension)]
            # balanced cycling: with at least as many draws as choices, every choice appears
            if len(values) >= len(dim.values):
                for v in plain:
                    assert v in values, (dim.path, v)
        for rng in _ranges(dim):
            inside = [v for v in values if rng.contains(v)]
            m = len(inside)
            if rng.kind is Kind.INT and rng.high - rng.low + 1 <= m:
                # a small integer range is cycled: every integer appears
                assert set(range(int(rng.low), int(rng.high) + 1)) <= set(inside), dim.path
            else:
                # one value per stratum: a Latin hypercube over the draws that use the range
                assert _one_per_stratum(rng, inside), (dim.path, inside)


def test_continuous_dimensions_span_their_range(space):
    configs = sample(space, 8, seed=3)
    grads = sorted(c.gradient_bytes for c in configs)
    # log-uniform over 4 KiB - 32 MiB in 8 strata: the lowest below 12 KiB, the highest above 10 MiB
    assert grads[0] < 12 * 1024 and grads[-1] > 10 * 2**20
    seconds = sorted(c.compute.seconds for c in configs)
    assert seconds[0] < 0.005 + 0.095 / 8 + 1e-9 and seconds[-1] >= 0.005 + 7 * 0.095 / 8 - 1e-9


def test_same_seed_same_draw_and_different_seed_different_draw(space):
    a = sample(space, 8, seed=11)
    b = sample(space, 8, seed=11)
    c = sample(space, 8, seed=12)
    assert [x.model_dump() for x in a] == [x.model_dump() for x in b]
    assert [x.config_id for x in a] == [x.config_id for x in b]
    assert [x.sweep_values for x in a] != [x.sweep_values for x in c]


def test_every_value_is_inside_its_range(space):
    for seed in range(5):
        for c in sample(space, 24, seed=seed):
            for path, value in c.sweep_values.items():
                assert space.dimension(path).contains(value), (seed, path, value)
            assert c.gradient_bytes % 4 == 0
            assert 4096 <= c.gradient_bytes <= 32 * 2**20
            assert 1 <= c.workers <= 32 and 1 <= c.servers <= 4
            assert c.workload.dataset_bytes == 0 or 8 * 2**20 <= c.workload.dataset_bytes <= 256 * 2**20
            assert c.workload.dataset_bytes % (8 * 2**20) == 0
            assert c.apply_seconds == 0 or 0.0005 <= c.apply_seconds <= 0.01


def test_the_specs_rules_are_respected_by_the_draw(space):
    configs = [c for seed in range(4) for c in sample(space, 24, seed=seed)]
    for c in configs:
        if c.sync.value == "sync":
            assert c.pull_every == 1 and "pull_every" not in c.sweep_values
        if c.sync.value != "ssp":
            assert c.staleness == 0 and "staleness" not in c.sweep_values
        if c.workload.dataset_bytes == 0:
            assert c.data.step_reads.value == "none" and "data.step_reads" not in c.sweep_values
        if c.compute.jitter.distribution.value == "none":
            assert c.compute.jitter.cv == 0
        else:
            assert 0.05 <= c.compute.jitter.cv <= 0.5
    # every mode and every step-read kind occurs (nothing was thrown away to satisfy the rules)
    assert {c.sync.value for c in configs} == {"async", "sync", "ssp"}
    assert {c.data.step_reads.value for c in configs if c.workload.dataset_bytes} == {"none", "sequential", "random"}
    assert any(c.pull_every > 1 for c in configs) and any(c.staleness > 0 for c in configs)


def test_conditional_dimension_is_stratified_over_the_draws_that_use_it():
    s = parse_space(_text({"sync": {"choice": ["async", "ssp"]},
                           "staleness": {"int": [0, 3], "when": {"sync": "ssp"}}}))
    configs = sample(s, 8, seed=5)
    stale = sorted(c.staleness for c in configs if c.sync.value == "ssp")
    assert stale == [0, 1, 2, 3]  # 4 ssp draws, cycled over the 4 integers
    assert all(c.staleness == 0 for c in configs if c.sync.value == "async")


def test_a_draw_the_spec_refuses_is_an_error_naming_the_fields():
    s = parse_space(_text({"sync": {"choice": ["async", "sync"]}, "pull_every": {"int": [2, 4]}}))
    with pytest.raises(UserError, match=r"sync='sync'.*pull_every.*when:/unless:"):
        sample(s, 4, seed=1)


@pytest.mark.parametrize("space_data, message", [
    ({"compute.secnds": {"uniform": ["5ms", "10ms"]}}, r"'secnds' is not a field of compute; allowed: mode, seconds"),
    ({"workers": {"uniform": [1, 4], "int": [1, 4]}}, r"space.workers: 2 kinds given"),
    ({"workers": {"range": [1, 4]}}, r"space.workers: unknown key 'range'.*log_uniform: \[lo, hi\].*choice"),
    ({"workers": [1, 2]}, r"space.workers: a dimension is a mapping"),
    ({"workers": {"int": [4, 1]}}, r"space.workers.int: lo must not exceed hi"),
    ({"gradient_bytes": {"log_uniform": ["0KiB", "1MiB"]}}, r"space.gradient_bytes.log_uniform: a log range needs lo > 0"),
    ({"workers": {"int": [1, 5000]}}, r"space.workers: the value 5000 is not allowed"),
    ({"sync": {"choice": ["async", "lockstep"]}}, r"space.sync: the value 'lockstep' is not allowed.*async"),
    ({"compute.seconds": {"uniform": ["5 parsecs", "1s"]}}, r"space.compute.seconds.uniform"),
    ({"staleness": {"int": [0, 2], "when": {"sync": ["ssp"]}}, "sync": {"choice": ["ssp"]}},
     r"space.staleness: its condition on 'sync' needs sync declared above it"),
    ({"staleness": {"int": [0, 2], "when": {"synk": ["ssp"]}}}, r"space.staleness.when: 'synk' is not a field"),
])
def test_bad_space_files_are_refused_with_the_field_named(space_data, message):
    with pytest.raises(UserError, match=message):
        parse_space(_text(space_data))


def test_a_space_needs_a_space_part_and_no_sweep():
    with pytest.raises(UserError, match="non-empty `space:`"):
        parse_space({"name": "s", "workload": {"steps": 5}})
    with pytest.raises(UserError, match="not lists under sweep"):
        parse_space({**_text({"workers": {"int": [1, 2]}}), "sweep": {"workers": [1, 2]}})
    with pytest.raises(UserError, match="workload"):
        parse_space({"name": "s", "workload": {"steps": 0}, "space": {"workers": {"int": [1, 2]}}})


def test_bad_sample_size_and_seed_are_refused(space):
    with pytest.raises(UserError, match="--sample"):
        sample(space, 0, seed=1)
    with pytest.raises(UserError, match="--seed"):
        sample(space, 3, seed=-1)


def test_the_shipped_space_declares_the_documented_ranges(space):
    dims = {d.path: d for d in space.dimensions}
    assert (dims["gradient_bytes"].kind, dims["gradient_bytes"].low, dims["gradient_bytes"].high) == \
        (Kind.LOG_UNIFORM, 4096, 32 * 2**20)
    assert (dims["compute.seconds"].low, dims["compute.seconds"].high) == pytest.approx((0.005, 0.1))
    assert (dims["workers"].low, dims["workers"].high) == (1, 32)
    assert set(dims["sync"].values) == {"async", "sync", "ssp"}
    data = yaml.safe_load(open(space.source))
    assert "space" in data and data["workload"]["steps"] >= 1


def test_draws_are_independent_across_dimensions(space):
    # each dimension has its own permutation: over many draws two range dimensions are not
    # ranked alike (a shared permutation would correlate them perfectly)
    configs = sample(space, 24, seed=2)
    g = np.array([c.gradient_bytes for c in configs], float)
    s = np.array([c.compute.seconds for c in configs])
    rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
    assert abs(np.corrcoef(rank(g), rank(s))[0, 1]) < 0.9


def test_validate_refuses_a_space_without_sample_and_sample_options_without_a_space(space, tmp_path):
    from testbed.cli import main
    assert main(["validate", space.source]) == 2  # a space file needs --sample K
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nworkload: {steps: 2}\n")
    assert main(["validate", str(spec), "--seed", "3"]) == 2
    assert main(["validate", str(spec), "--noise", "1"]) == 2
    assert main(["validate", space.source, "--sample", "3", "--seed", "-4"]) == 2
    assert main(["validate", space.source, "--sample", "3", "--set", "workload.steps=0"]) == 2


def test_validate_space_refuses_more_noise_configs_than_draws(space):
    from testbed.cli.validate import validate_space
    with pytest.raises(UserError, match="--noise 5"):
        validate_space(space, 3, seed=1, noise=5)


def test_without_a_seed_the_draw_is_seeded_by_the_date_and_says_so(space, monkeypatch):
    from testbed.cli import validate as cli
    seen = {}

    def fake_validate(spec, *, plan, manifest_extra, **options):
        seen.update(spec=spec, plan=plan, record=manifest_extra["sample"])
        raise KeyboardInterrupt  # stop before anything runs
    monkeypatch.setattr(cli, "validate", fake_validate)
    with pytest.raises(KeyboardInterrupt):
        cli.validate_space(space, 4, noise=2)
    record = seen["record"]
    assert record["seed"] == cli.date_seed() and record["seed_source"] == "the date, UTC"
    assert str(record["seed"]) in seen["spec"].description
    drawn = sample(space, 4, record["seed"])
    # the first two configs 5 times back to back, the others once, in draw order
    assert [(c.config_id, r) for c, r in seen["plan"]] == \
        [(drawn[0].config_id, r) for r in range(5)] + [(drawn[1].config_id, r) for r in range(5)] + \
        [(drawn[2].config_id, 0), (drawn[3].config_id, 0)]
    assert record["noise_config_ids"] == [drawn[0].config_id, drawn[1].config_id]
    # the command passes no seed on when none is given, so the record says where it came from
    calls = {}
    monkeypatch.setattr(cli, "validate_space", lambda space, k, **kw: calls.update(kw) or (_ for _ in ()).throw(
        KeyboardInterrupt()))
    from testbed.cli import main
    assert main(["validate", space.source, "--sample", "2"]) == 130
    assert calls["seed"] is None
