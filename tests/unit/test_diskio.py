"""Init read plans and step plans (pure), and the direct reader on small files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from testbed.data.dataset import MEMORY_FS_TYPES, fs_type, write_random_file
from testbed.data.diskio import ALIGN_BYTES, DirectReader, StepReader, init_read_plan, plan_bytes

KiB, MiB = 1024, 2**20
FILES = [("a", 4 * MiB), ("b", 4 * MiB), ("c", 2 * MiB)]  # 10 MiB, last file shorter


def _covered(plan: list[tuple[str, int, int]]) -> list[tuple[str, int]]:
    """Every 4 KiB unit the plan touches, for disjointness and coverage checks."""
    return [(p, off) for p, o, n in plan for off in range(o, o + n, ALIGN_BYTES)]


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_shards_are_disjoint_aligned_and_cover_the_data_set(workers: int) -> None:
    plans = [init_read_plan(FILES, 10 * MiB, i, workers, "shard") for i in range(workers)]
    units = [u for plan in plans for u in _covered(plan)]
    assert len(units) == len(set(units)) == 10 * MiB // ALIGN_BYTES
    assert sum(plan_bytes(p) for p in plans) == 10 * MiB
    for plan in plans:
        assert abs(plan_bytes(plan) - 10 * MiB / workers) <= ALIGN_BYTES
        assert all(o % ALIGN_BYTES == 0 for _, o, _ in plan)


def test_a_shard_spanning_files_is_cut_at_the_file_boundary() -> None:
    assert init_read_plan(FILES, 10 * MiB, 1, 2, "shard") == [("b", 1 * MiB, 3 * MiB), ("c", 0, 2 * MiB)]


def test_full_partition_reads_everything_for_every_worker() -> None:
    for i in range(3):
        assert init_read_plan(FILES, 10 * MiB, i, 3, "full") == [("a", 0, 4 * MiB), ("b", 0, 4 * MiB),
                                                                 ("c", 0, 2 * MiB)]


def test_plan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="worker_index"):
        init_read_plan(FILES, 10 * MiB, 3, 3, "shard")
    with pytest.raises(ValueError, match="dataset_bytes"):
        init_read_plan(FILES, 11 * MiB, 0, 1, "full")
    with pytest.raises(ValueError):
        init_read_plan(FILES, 10 * MiB, 0, 1, "striped")


class FakeReader:
    def __init__(self) -> None:
        self.plans: list[list[tuple[str, int, int]]] = []

    def read_plan(self, plan: list[tuple[str, int, int]]) -> int:
        self.plans.append(list(plan))
        return plan_bytes(plan)


def test_sequential_steps_walk_the_files_and_wrap() -> None:
    fake = FakeReader()
    steps = StepReader([("x", 12 * KiB), ("y", 8 * KiB)], 4 * KiB, 2, "sequential", np.random.default_rng(0), fake)
    assert [steps.read_step() for _ in range(4)] == [8 * KiB] * 4
    assert fake.plans == [
        [("x", 0, 8 * KiB)],
        [("x", 8 * KiB, 4 * KiB), ("y", 0, 4 * KiB)],
        [("y", 4 * KiB, 4 * KiB), ("x", 0, 4 * KiB)],  # wrapped around the 20 KiB data set
        [("x", 4 * KiB, 8 * KiB)],
    ]


def test_sequential_steps_stay_inside_the_workers_extents() -> None:
    fake = FakeReader()
    shard = init_read_plan(FILES, 10 * MiB, 1, 2, "shard")
    steps = StepReader(shard, 1 * MiB, 2, "sequential", np.random.default_rng(0), fake)
    for _ in range(5):
        steps.read_step()
    units = set(_covered(shard))
    assert all(u in units for plan in fake.plans for u in _covered(plan))


def test_random_steps_are_seeded_sample_aligned_and_sized() -> None:
    def draw(seed: int) -> list[list[tuple[str, int, int]]]:
        fake = FakeReader()
        steps = StepReader(FILES, 64 * KiB, 8, "random", np.random.default_rng(seed), fake)
        assert all(steps.read_step() == 8 * 64 * KiB for _ in range(3))
        return fake.plans
    first = draw(1)
    assert first == draw(1) and first != draw(2)
    for plan in first:
        assert len(plan) == 8 and all(o % (64 * KiB) == 0 and n == 64 * KiB for _, o, n in plan)


def test_step_reader_rejects_none() -> None:
    with pytest.raises(ValueError, match="none"):
        StepReader(FILES, 4096, 1, "none", np.random.default_rng(0), FakeReader())


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[str, bytes]:
    if fs_type(tmp_path) in MEMORY_FS_TYPES:
        pytest.skip(f"tmp_path is on {fs_type(tmp_path)}: no O_DIRECT to test")
    path = tmp_path / "f.bin"
    write_random_file(path, 300 * KiB + 123, seed=5)  # a tail that is not a multiple of 4 KiB
    return str(path), path.read_bytes()


@pytest.mark.parametrize("cache_bypass", [True, False])
def test_reader_returns_exactly_the_planned_bytes(data_file: tuple[str, bytes], cache_bypass: bool) -> None:
    path, content = data_file
    plan = [(path, 0, 100 * KiB), (path, 5000, 70001), (path, 290 * KiB, 10 * KiB + 123)]
    got: list[bytes] = []
    with DirectReader(64 * KiB, cache_bypass=cache_bypass) as reader:
        assert reader.read_plan(plan, sink=lambda view: got.append(bytes(view))) == plan_bytes(plan)
        assert reader.mode == ("o_direct" if cache_bypass else "cached")
    assert b"".join(got) == b"".join(content[o:o + n] for _, o, n in plan)


def test_reader_counts_only_what_exists_past_the_end(data_file: tuple[str, bytes]) -> None:
    path, content = data_file
    with DirectReader(64 * KiB) as reader:
        assert reader.read_plan([(path, 296 * KiB, 64 * KiB)]) == len(content) - 296 * KiB


def test_reader_falls_back_to_fadvise_when_o_direct_is_refused(data_file: tuple[str, bytes], no_o_direct) -> None:
    path, content = data_file
    got: list[bytes] = []
    with DirectReader(64 * KiB) as reader:
        assert reader.read_plan([(path, 0, len(content))], sink=lambda v: got.append(bytes(v))) == len(content)
        assert reader.mode == "fadvise"
    assert b"".join(got) == content


def test_step_reader_reads_real_samples_and_closes_its_reader(data_file: tuple[str, bytes]) -> None:
    path, content = data_file
    reader = DirectReader(64 * KiB)
    steps = StepReader([(path, len(content))], 4 * KiB, 3, "random", np.random.default_rng(3), reader)
    assert steps.read_step() == 12 * KiB
    steps.close()
    with pytest.raises(ValueError):  # the closed reader's buffer is gone
        steps.read_step()


def test_reader_rejects_unaligned_blocks() -> None:
    with pytest.raises(ValueError, match="multiple of 4096"):
        DirectReader(5000)


def _resident_bytes(address: int) -> int:
    """Rss of the mapping of this process holding ``address`` (from /proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no mapping holds the address")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps (Linux)")
@pytest.mark.parametrize("block", [64 * KiB, 2 * 2**20])
def test_the_buffer_is_resident_from_construction_not_from_the_first_read(block: int) -> None:
    import ctypes
    with DirectReader(block) as reader:
        probe = ctypes.c_char.from_buffer(reader._view)
        address = ctypes.addressof(probe)
        del probe
        assert _resident_bytes(address) >= block
