"""Inputs that would run away or that the testbed would silently misread: each refused with
one line naming the field and the limit (or the fix)."""

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import MAX_STEPS, expand, load_spec, parse_spec

BASE = {"name": "t", "workload": {"steps": 10}}


def spec(**fields):
    return parse_spec({**BASE, **fields})


def refused(match, **fields):
    with pytest.raises(UserError, match=match) as err:
        expand(spec(**fields))
    assert "\n" not in str(err.value)
    return str(err.value)


def test_steps_derived_from_epochs_are_capped():
    msg = refused("workload.epochs", workload={"epochs": 1000, "dataset_bytes": "64MiB", "sample_bytes": 1,
                                                "minibatch": 1})
    assert f"{MAX_STEPS}" in msg and "per worker" in msg


def test_steps_from_epochs_within_the_cap_pass():
    (cfg,) = expand(spec(workload={"epochs": 1, "dataset_bytes": "64MiB", "sample_bytes": 4096, "minibatch": 32}))
    assert cfg.steps == 512


def test_a_sweep_point_past_the_step_cap_is_named():
    msg = refused("sweep point workers=1", workload={"epochs": 100, "dataset_bytes": "64MiB", "sample_bytes": 1,
                                                      "minibatch": 1}, sweep={"workers": [1, 1024]})
    assert "workload.epochs" in msg


@pytest.mark.parametrize("flops,needle", [(float("inf"), "finite"), (1e15, "less than or equal to"),
                                          (float("nan"), "finite")])
def test_matmul_flops_are_bounded(flops, needle):
    msg = refused("compute.flops", compute={"mode": "matmul", "flops": flops})
    assert needle in msg


@pytest.mark.parametrize("field,value", [("workers", True), ("servers", True), ("repeats", False), ("seed", True),
                                         ("restarts", False), ("learning_rate", True)])
def test_a_boolean_is_not_a_number(field, value):
    refused(f"{field}: must be a number, not a boolean", **{field: value})


def test_numbers_written_as_yaml_reads_them_still_pass():
    # YAML 1.1 reads 2e8 (no dot) as a string; 4.0 is a whole number
    (cfg,) = expand(spec(compute={"mode": "matmul", "flops": "2e8"}, workers=4.0))
    assert cfg.compute.flops == 2e8 and cfg.workers == 4
    refused("workers: Input should be a valid integer", workers=2.5)


def test_a_boolean_is_not_a_number_of_steps_or_a_float():
    with pytest.raises(UserError, match="workload.steps"):
        parse_spec({"name": "t", "workload": {"steps": True}})
    with pytest.raises(UserError, match="learning_rate"):
        spec(learning_rate=True)


def test_staleness_needs_ssp():
    refused("staleness applies to sync 'ssp' only", staleness=2)
    refused("staleness applies to sync 'ssp' only", sync="sync", staleness=2)
    refused("staleness", sweep={"staleness": [1, 2]})
    assert len(expand(spec(sync="ssp", staleness=2))) == 1
    # a sweep over the consistency mode: staleness applies to its ssp points
    assert len(expand(spec(staleness=2, sweep={"sync": ["async", "ssp"]}))) == 2


@pytest.mark.parametrize("data,needle", [({"step_reads": "random"}, "data.step_reads"),
                                         ({"init_io": "sequential"}, "data.init_io")])
def test_reads_need_a_data_set(data, needle):
    msg = refused(needle, data=data)
    assert "workload.dataset_bytes" in msg
    ok = expand(spec(data=data, workload={"steps": 2, "dataset_bytes": "1MiB"}))
    assert len(ok) == 1
    swept = expand(spec(data=data, sweep={"workload.dataset_bytes": [0, "1MiB"]}))
    assert len(swept) == 2


@pytest.mark.parametrize("value", ["", "   "])
def test_data_dir_must_not_be_empty(value):
    refused("data.dir", data={"dir": value})


def test_duplicate_sweep_values_are_refused():
    refused(r"sweep.workers lists 2 twice", sweep={"workers": [1, 2, 2]})
    refused("give the same config", sweep={"gradient_bytes": ["1MiB", 1048576]})


@pytest.mark.parametrize("value", ["0.5ms", "100us", 1e-6])
def test_deadline_below_a_millisecond_is_refused(value):
    refused("deadline_s", deadline_s=value)


def test_deadline_of_a_millisecond_passes():
    assert expand(spec(deadline_s="1ms"))[0].deadline_s == pytest.approx(1e-3)


def test_a_sweep_past_the_hard_limit_is_refused_before_expanding():
    with pytest.raises(UserError, match="sweep: 1000000 configs") as err:
        spec(sweep={"seed": list(range(1000)), "learning_rate": [0.1 * (i + 1) for i in range(1000)]})
    assert "at most" in str(err.value)


BOMB = """name: bomb
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(UserError, match="aliases") as err:
        load_spec(path)
    assert "at most" in str(err.value)


def test_recursive_yaml_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: x\nsweep: &a {workers: [*a]}\n")
    with pytest.raises(UserError, match="refers to itself"):
        load_spec(path)


def test_a_few_aliases_are_fine(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("name: x\nworkload: &w {steps: 3}\nsweep: {workers: [1, 2]}\n")
    assert load_spec(path).workload.steps == 3


def one_line_bomb(levels: int = 7) -> str:
    parts = ["&a0 [" + ", ".join(["1"] * 10) + "]"]
    parts += [f"&a{k} [" + ", ".join([f"*a{k - 1}"] * 10) + "]" for k in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def test_set_values_get_the_same_budget():
    with pytest.raises(UserError, match="--set") as err:
        parse_spec(BASE, overrides=["description=" + one_line_bomb()])
    assert "aliases" in str(err.value)


def test_a_huge_spec_file_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("name: x\n" + "# padding\n" * 200_000)
    with pytest.raises(UserError, match="at most 1 MiB"):
        load_spec(path)


def test_a_boolean_is_not_a_fault_index():
    refused(r"faults.0.kill_worker.worker: must be a number, not a boolean",
            workers=2, faults=[{"kind": "kill_worker", "worker": True, "step": 1}])
