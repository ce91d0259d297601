import textwrap

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import ComputeMode, expand, load_spec, parse_spec

BASE = {"name": "t", "workload": {"steps": 10}}


def spec(**fields):
    return parse_spec({**BASE, **fields})


def test_defaults_and_units():
    s = spec(gradient_bytes="1MiB", compute={"mode": "spin", "seconds": "50ms"})
    assert s.gradient_bytes == 2**20
    assert s.compute.seconds == pytest.approx(0.05)
    assert s.compute.mode is ComputeMode.SPIN
    assert s.workers == 1 and s.servers == 1 and s.repeats == 1


def test_sweep_is_cartesian_product_in_order():
    s = spec(sweep={"workers": [1, 2, 4], "compute.seconds": ["5ms", "10ms"]})
    configs = expand(s)
    assert [(c.workers, c.compute.seconds) for c in configs] == [
        (1, 0.005), (1, 0.01), (2, 0.005), (2, 0.01), (4, 0.005), (4, 0.01)]
    assert len({c.config_id for c in configs}) == 6
    assert configs[3].sweep_values == {"workers": 2, "compute.seconds": "10ms"}


def test_config_ids_are_stable_and_depend_on_values():
    a = [c.config_id for c in expand(spec(sweep={"workers": [1, 2]}))]
    b = [c.config_id for c in expand(spec(sweep={"workers": [1, 2]}))]
    c = [c.config_id for c in expand(spec(seed=5, sweep={"workers": [1, 2]}))]
    assert a == b
    assert a != c


def test_a_run_folder_made_before_the_warm_pass_keeps_its_config_ids_and_its_spec(repo):
    import json

    from testbed.config.spec import spec_diff, with_reliability_defaults
    record = json.loads((repo / "tests" / "fixtures" / "run_v2" / "manifest.json").read_text())
    assert "warm_pass" not in record["spec"]["data"]
    old = with_reliability_defaults(record["spec"])
    assert old["data"]["warm_pass"] is True
    assert spec_diff(old, parse_spec(old).model_dump(mode="json")) == []
    assert [c.config_id for c in expand(parse_spec(old))] == [c["config_id"] for c in record["configs"]]
    # the field is part of the id once it is not its default
    cold = {**old, "data": {**old["data"], "warm_pass": False}}
    assert [c.config_id for c in expand(parse_spec(cold))] != [c["config_id"] for c in record["configs"]]


def test_no_sweep_gives_one_config():
    configs = expand(spec(workers=3))
    assert len(configs) == 1 and configs[0].workers == 3


def test_strong_scaling_splits_steps_over_workers():
    s = parse_spec({"name": "t", "workload": {"epochs": 1, "dataset_bytes": "1MiB", "sample_bytes": "1KiB",
                                              "minibatch": 8}, "sweep": {"workers": [1, 2, 3]}})
    assert [c.steps for c in expand(s)] == [128, 64, 43]


def test_shard_bounds_cover_every_element_once():
    c = expand(spec(gradient_bytes=4 * 10, servers=3))[0]
    assert c.shard_bounds() == [(0, 3), (3, 6), (6, 10)]


@pytest.mark.parametrize("fields,needle", [
    ({"wrkers": 2}, "wrkers: unknown field"),
    ({"compute": {"mode": "gpu"}}, "compute.mode: must be one of 'sleep', 'spin' or 'matmul'"),
    ({"gradient_bytes": "-1KiB"}, "gradient_bytes"),
    ({"gradient_bytes": 0}, "gradient_bytes"),
    ({"gradient_bytes": "10XB"}, "unknown size unit"),
    ({"gradient_bytes": 6}, "multiple of 4"),
    ({"workload": {"steps": 0}}, "workload.steps"),
    ({"workload": {}}, "exactly one of workload.steps"),
    ({"workload": {"steps": 1, "epochs": 1}}, "exactly one of workload.steps"),
    ({"workload": {"epochs": 1}}, "dataset_bytes > 0"),
    ({"workers": 0}, "workers"),
    ({"servers": 2, "gradient_bytes": 4}, "fewer than servers=2"),
    ({"compute": {"mode": "matmul"}}, "needs compute.flops"),
    ({"compute": {"seconds": "-5ms"}}, "compute.seconds"),
    ({"data": {"bogus": 1}}, "data.bogus: unknown field; allowed here: dir"),
    ({"data": {"block_bytes": 5000}}, "multiple of 4096"),
    ({"sweep": {"nope": [1]}}, "'nope' is not a field"),
    ({"sweep": {"workers": []}}, "non-empty list"),
    ({"sweep": {"workers": 3}}, "sweep.workers"),
    ({"sync": "eventually"}, "sync: must be one of"),
    ({"learning_rate": 0}, "learning_rate"),
])
def test_bad_values_name_the_field(fields, needle):
    with pytest.raises(UserError) as err:
        spec(**fields)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_value_inside_sweep_names_the_point():
    with pytest.raises(UserError, match=r"sweep point workers=0"):
        expand(spec(sweep={"workers": [1, 0]}))


def test_missing_name():
    with pytest.raises(UserError, match="name"):
        parse_spec({"workload": {"steps": 1}})


def test_not_a_mapping():
    with pytest.raises(UserError, match="YAML mapping"):
        parse_spec([1, 2])


def test_overrides(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nworkload: {steps: 10}\nworkers: 2\n")
    s = load_spec(p, overrides=["workers=4", "compute.seconds=5ms", "sweep.servers=[1, 2]"])
    assert s.workers == 4 and s.compute.seconds == pytest.approx(0.005)
    assert [c.servers for c in expand(s)] == [1, 2]
    with pytest.raises(UserError, match="expected key=value"):
        load_spec(p, overrides=["workers"])


def test_bad_yaml_names_the_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent("""\
        name: t
        workers: [1, 2
        servers: 1
        """))
    with pytest.raises(UserError, match=r"not valid YAML at line \d+"):
        load_spec(p)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such spec file"):
        load_spec(tmp_path / "absent.yaml")


def test_shipped_experiments_validate(repo):
    for path in sorted((repo / "experiments").glob("*.yaml")):
        text = path.read_text()
        if "\nname:" not in "\n" + text:  # e.g. a Ray cluster config, not an experiment
            continue
        if "\nspace:" in "\n" + text:  # a validation space: its draws must validate
            from testbed.config.space import load_space, sample
            assert sample(load_space(path), 4, seed=0), path
            continue
        assert expand(load_spec(path)), path
