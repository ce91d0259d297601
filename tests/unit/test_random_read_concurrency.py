"""Random step reads by several workers at once: the disk profile's curve of random 4 KiB
IOPS by concurrent readers, the rate multipliers the terms take from it, and what the
simulated disk does with them."""

from __future__ import annotations

import dataclasses

import pytest

from testbed.model.profile import DiskProfile, HardwareProfile
from testbed.model.simfamily import sim_spec
from testbed.model.simulation import simulate
from testbed.model.terms import step_terms
from tests.unit.test_model_simulated import config, profile

SEQ = {1: 1e9, 2: 1e9, 4: 1e9}


def test_the_multipliers_are_the_iops_over_one_readers_linear_between_the_measured_counts():
    disk = DiskProfile(seq_read_bytes_per_s=SEQ, block_bytes=2**20, rand_read_iops={4096: 10_000.0},
                       rand_read_iops_by_readers={1: 10_000.0, 2: 12_000.0, 4: 20_000.0, 8: 30_000.0})
    m = disk.random_rate_multipliers()
    assert len(m) == 8
    assert m[0] == 1.0 and m[1] == pytest.approx(1.2) and m[3] == pytest.approx(2.0) and m[7] == pytest.approx(3.0)
    assert m[2] == pytest.approx(1.6)  # half way between 2 and 4 readers
    assert m[5] == pytest.approx(2.5)


def test_a_disk_without_the_curve_serves_random_reads_at_one_readers_rate():
    assert DiskProfile(seq_read_bytes_per_s=SEQ, block_bytes=2**20).random_rate_multipliers() == (1.0,)
    # a curve that does not start at one reader has nothing to divide by
    odd = DiskProfile(seq_read_bytes_per_s=SEQ, block_bytes=2**20, rand_read_iops_by_readers={2: 5.0})
    assert odd.random_rate_multipliers() == (1.0,)


@pytest.mark.parametrize("bad", [{0: 10.0}, {1: 0.0}, {1: -5.0}])
def test_a_bad_curve_is_refused(bad):
    with pytest.raises(ValueError, match="rand_read_iops_by_readers"):
        DiskProfile(seq_read_bytes_per_s=SEQ, block_bytes=2**20, rand_read_iops_by_readers=bad)


def test_the_curve_round_trips_through_a_saved_profile(tmp_path):
    from testbed.model.profile import load_profile, save_profile
    from testbed.records.atomic import atomic_write_text
    disk = DiskProfile(seq_read_bytes_per_s=SEQ, block_bytes=2**20, rand_read_iops={4096: 10_000.0},
                       rand_read_iops_by_readers={1: 10_000.0, 4: 20_000.0})
    p = profile(cores_per_node=2, disk=disk)
    save_profile(p, tmp_path / "p.json", atomic_write_text)
    assert load_profile(tmp_path / "p.json").disk.rand_read_iops_by_readers == {1: 10_000.0, 4: 20_000.0}


def _reads(disk: DiskProfile, mode: str, workers: int = 8) -> tuple[tuple[float, ...], float]:
    cfg = config(workers=workers, compute={"mode": "sleep", "seconds": 0.002},
                 workload={"steps": 30, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
                 data={"step_reads": mode})
    prof: HardwareProfile = profile(cores_per_node=2, disk=disk)
    terms = step_terms(cfg, prof)
    return terms.read_rate_multipliers, simulate(sim_spec(cfg, prof, terms)).phases["read"]


def test_random_step_reads_of_several_workers_share_the_disk_by_the_measured_curve():
    # a slow disk (200 IOPS: 40 ms a step's 8 reads), so the workers' reads overlap
    flat = DiskProfile(seq_read_bytes_per_s=SEQ, block_bytes=4096, rand_read_iops={4096: 200.0})
    scaling = dataclasses.replace(flat, rand_read_iops_by_readers={1: 200.0, 2: 400.0, 4: 800.0, 8: 1600.0})
    alone, flat_read = _reads(flat, "random")
    alphas, scaled_read = _reads(scaling, "random")
    assert alone == (1.0,) and alphas == pytest.approx((1, 2, 3, 4, 5, 6, 7, 8))
    # eight readers at once: served at up to 8 times one reader's rate, not one reader's
    assert scaled_read < 0.6 * flat_read
    # a lone worker reads as before (one reader's rate either way)
    assert _reads(scaling, "random", workers=1)[1] == pytest.approx(_reads(flat, "random", workers=1)[1], rel=1e-9)
    # sequential reads keep the sequential curve
    assert _reads(scaling, "sequential")[0] == _reads(flat, "sequential")[0]


def test_validates_disk_over_the_data_set_keeps_the_calibrated_random_figures():
    from testbed.cli.validate import dataset_disk_profile
    from tests import factories
    disk = DiskProfile(seq_read_bytes_per_s=SEQ, block_bytes=2**20, rand_read_iops={4096: 10_000.0},
                       rand_read_iops_by_readers={1: 10_000.0, 4: 20_000.0}, latency_s={"p50": 1e-4}, fs_type="ext4")
    cfg = factories.run_config()
    out = dataset_disk_profile(profile(cores_per_node=2, disk=disk), {1: 2e9, 2: 2.2e9}, cfg)
    assert out.disk.seq_read_bytes_per_s == {1: 2e9, 2: 2.2e9} and out.disk.source == "testbed-reader (the data set)"
    assert out.disk.rand_read_iops_by_readers == {1: 10_000.0, 4: 20_000.0}
    assert out.disk.rand_read_iops == {4096: 10_000.0} and out.disk_reference == disk
