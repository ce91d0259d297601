"""The notebooks: executed headless (nbclient) against run folders made here by small real
runs, and committed without outputs.

The runs are real (Ray actors, a real data set on disk, the node monitors); only the
hardware profile saved beside them is a fixed set of plausible figures, so the test does
not spend a minute calibrating. The notebooks read whatever ``profile.json`` a folder holds.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from testbed.model.profile import DiskProfile, HardwareProfile, save_profile
from testbed.records.atomic import atomic_write_text

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_S = 120

# Tiny versions of the reproduction experiments, shaped like experiments/*.yaml.
_BASE = {"seed": 1, "repeats": 1, "sync": "async", "pull_every": 1, "gradient_bytes": "64KiB",
         "workload": {"steps": 4, "dataset_bytes": "4MiB"}, "compute": {"mode": "sleep", "seconds": "3ms"}}
TINY = {
    "paper_cntk": {"servers": 1, "data": {"init_io": "sequential", "partition": "full"},
                   "sweep": {"workers": [1, 2]}},
    "fix_parallel_io": {"servers": 1, "data": {"init_io": "parallel", "partition": "shard"},
                        "sweep": {"workers": [1, 2]}},
    "fix_sharded_ps": {"data": {"init_io": "parallel", "partition": "shard"},
                       "sweep": {"servers": [1, 2], "workers": [1, 2]}},
}


def plausible_profile() -> HardwareProfile:
    return HardwareProfile(identity={"cpu_model": "test"}, cores_per_node=2, server_apply_bytes_per_s=4e9,
                           server_call_overhead_s=100e-6, actor_call_latency_s=400e-6,
                           transfer_bytes_per_s_local=1.5e9,
                           disk=DiskProfile(seq_read_bytes_per_s={1: 400e6, 2: 500e6, 4: 550e6},
                                            block_bytes=2**20, source="testbed-reader"))


def make_runs(root: Path) -> dict[str, Path]:
    """One small real run folder per reproduction experiment under ``root``, each with a
    profile and its report (summary.csv with the prediction columns); Ray must be up."""
    from testbed.cli.validate import validate
    from testbed.config.spec import parse_spec

    profile = save_profile(plausible_profile(), root / "profile.json", atomic_write_text)
    folders = {}
    for name, fields in TINY.items():
        data = {**_BASE, **fields, "name": name}
        data["data"] = {**fields["data"], "dir": str(root / "data"), "file_bytes": "1MiB", "block_bytes": "1MiB"}
        folder = validate(parse_spec(data), out=root / "results" / f"{name}-test", profile_path=profile,
                          monitor_interval_s=0.05)
        folders[name] = folder.path
    return folders


def _executed(name: str, cwd: Path):
    """Run a notebook headless in ``cwd``; nbclient raises on the first cell that errors."""
    from nbclient import NotebookClient
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _outputs(nb) -> list[dict]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]


def _images(nb) -> int:
    return sum("image/png" in o.get("data", {}) for o in _outputs(nb))


def _text(nb) -> str:
    return "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in _outputs(nb))


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def runs(ray_local, tmp_path_factory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("notebooks"))


@pytest.fixture
def kernel_env(monkeypatch):
    """No run named by the environment unless a test names one (the kernel inherits it)."""
    from testbed.analysis.notebook import PAPER_EXPERIMENTS, RUN_ENV
    for var in (RUN_ENV, *PAPER_EXPERIMENTS.values()):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.integration
def test_analysis_notebook_runs_on_a_named_run_folder(runs, kernel_env):
    from testbed.analysis.notebook import load_run
    folder = runs["paper_cntk"]
    run = load_run(folder)
    assert run.comparison is not None and run.has_staleness and run.has_resources
    kernel_env.setenv("DDNN_RUN", str(folder))
    before = _snapshot(folder)
    cwd = folder.parents[1] / "notebooks"  # the newest run under ../results would be another experiment's
    cwd.mkdir(exist_ok=True)
    nb = _executed("analysis.ipynb", cwd)
    assert not [o for o in _outputs(nb) if o.output_type == "error"]
    # init, train, total vs workers; speedup; phase breakdown; measured vs predicted; staleness; utilisation
    assert _images(nb) == 8
    text = _text(nb)
    assert f"run folder: {folder}" in text and "paper_cntk" in text and "median_abs_err" in text
    assert _snapshot(folder) == before, "the notebook must only read the run folder"


@pytest.mark.integration
def test_analysis_notebook_without_profile_or_monitors_shows_the_measurements(runs, kernel_env, tmp_path):
    import shutil
    folder = tmp_path / "bare"
    shutil.copytree(runs["paper_cntk"], folder)
    (folder / "profile.json").unlink()
    (folder / "resources.parquet").unlink()
    kernel_env.setenv("DDNN_RUN", str(folder))
    nb = _executed("analysis.ipynb", tmp_path)
    assert not [o for o in _outputs(nb) if o.output_type == "error"]
    assert _images(nb) == 6  # no measured-vs-predicted scatter, no utilisation; staleness still there
    text = _text(nb)
    assert "predictions: none" in text and "No predictions" in text and "no monitor samples" in text


@pytest.mark.integration
def test_paper_notebook_finds_the_newest_runs_and_quotes_the_numbers(runs, kernel_env):
    root = runs["paper_cntk"].parents[1]
    cwd = root / "notebooks"  # the notebook looks in ../results, as from the repository's notebooks/
    cwd.mkdir(exist_ok=True)
    nb = _executed("paper_reproduction.ipynb", cwd)
    assert not [o for o in _outputs(nb) if o.output_type == "error"]
    # (a) init and total vs workers; (b) speedup and breakdown; (c) both runs' init, sharded speedup and train
    assert _images(nb) == 7
    text = _text(nb)
    for name, folder in runs.items():
        assert f"{name}: ../results/{folder.name} (status complete" in text
    assert "s per worker, R^2 =" in text                               # (a)
    assert "Measured train knee:" in text and "the queueing model's" in text  # (b)
    assert "sequential full reads vs parallel sharded reads" in text   # (c), parallel I/O
    assert "The measured train knee " in text and "S=2:" in text       # (c), shards


@pytest.mark.parametrize("name", ["analysis.ipynb", "paper_reproduction.ipynb"])
def test_committed_notebooks_carry_no_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code cells"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, f"{name}: strip the outputs before committing"
