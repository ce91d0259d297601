"""`testbed validate SPACE --sample 3` end to end on real local Ray: the draw runs, is predicted
and compared, and the held-out distribution is written with every family's rows."""

import json

import pandas as pd
import pytest

from testbed.analysis.compare import MODELS
from testbed.cli import main
from testbed.config.space import load_space, sample
from testbed.records.rundir import RunFolder

pytestmark = pytest.mark.integration

SEED = 20261201


@pytest.fixture(scope="module")
def sampled(ray_local, cache_dir, tmp_path_factory, request):
    base = tmp_path_factory.mktemp("space")
    data_dir = base / "data"
    # A quick calibration's profile from the fixtures (test_validate calibrates for real): what
    # is tested here is the draw, its runs and its distribution, not the figures it predicts with.
    fixtures = request.config.rootpath / "tests" / "fixtures"
    profile_path = fixtures / "profile-quick.json"
    space = fixtures / "small_space.yaml"
    code = main(["validate", str(space), "--sample", "3", "--seed", str(SEED), "--noise", "1",
                 "--out", str(base / "run"), "--profile", str(profile_path), "--set", f"data.dir={data_dir}",
                 "--monitor-interval", "0", "--no-level-check"])
    assert code == 0
    return RunFolder.open(base / "run"), space


def test_the_draw_is_run_and_recorded(sampled):
    folder, space = sampled
    record = folder.manifest["sample"]
    assert record["seed"] == SEED and record["k"] == 3 and record["seed_source"] == "given"
    assert record["space_data"]["space"]  # the space itself, so the draw can be re-made
    drawn = sample(load_space(space, overrides=[f"data.dir={folder.manifest['spec']['data']['dir']}"]), 3, SEED)
    assert [c["config_id"] for c in folder.manifest["configs"]] == [c.config_id for c in drawn]
    assert str(SEED) in folder.manifest["spec"]["description"]
    summary = pd.read_csv(folder.path / "summary.csv")
    # the first config ran 5 times back to back (the noise floor), the others once
    counts = summary.groupby("config_id").size().to_dict()
    assert counts == {drawn[0].config_id: 5, drawn[1].config_id: 1, drawn[2].config_id: 1}
    assert record["noise_config_ids"] == [drawn[0].config_id]
    assert summary["job_s"].to_numpy() == pytest.approx((summary["init_s"] + summary["train_s"]).to_numpy())
    # --no-level-check: predicted at the calibration's per-call level (test_validate holds the check)
    from testbed.model.profile import load_profile
    assert load_profile(folder.path / "profile.json").call_level is None


def test_distribution_csv_holds_every_familys_rows(sampled):
    folder, _ = sampled
    dist = pd.read_csv(folder.path / "distribution.csv")
    for model in MODELS:
        rows = dist[dist["model"] == model].set_index("phase")
        for phase in ("init", "train", "job", "compute", "push", "pull", "apply"):
            assert phase in rows.index, (model, phase)
            row = rows.loc[phase]
            assert row["n"] == 3  # each drawn config once, the noise repeats not counted again
            assert row["median_abs_err"] <= row["p90_abs_err"] <= row["max_abs_err"]
        # the noise floor sits beside the errors: the first config's 5 repeats differ a little
        assert rows.loc["train", "noise_spread"] > 0
        # and as an error: each repeat against the mean of the others, under the range
        assert 0 < rows.loc["train", "noise_abs_err"] < rows.loc["train", "noise_spread"]
    assert "setup" not in set(dist["phase"]) and "total" not in set(dist["phase"])


def test_report_has_the_held_out_section(sampled):
    folder, _ = sampled
    text = (folder.path / "report.md").read_text()
    assert "## Held-out accuracy" in text and f"seed {SEED}" in text
    assert "### Worst configs by job error" in text
    held = text.split("## Held-out accuracy")[1].split("## Knees")[0]
    for model in MODELS:
        assert f"**{model}**" in held, model
    assert "Noise floor" in held and "| noise |" in held and "| noise as error |" in held
    assert "| median / noise as error |" in held
    assert "missed" in held
    errors = pd.read_csv(folder.path / "errors.csv")
    assert "p90_abs_err" in errors and {"init", "train", "job"} <= set(errors["phase"])
    assert (folder.path / "plots" / "job_vs_workers.png").is_file()


def test_a_sampled_run_is_not_resumed(sampled):
    folder, _ = sampled
    code = main(["run", "--resume", str(folder.path)])
    assert code == 2
    assert json.loads((folder.path / "manifest.json").read_text())["status"] == "complete"


def test_the_draws_residuals_pool_its_configs_and_match_its_report(sampled, tmp_path, capsys):
    """`testbed residuals` on the draw: its three configs once each, the errors the distribution
    gives; re-predicted (this checkout, the folder's profile) the same, as the model is unchanged."""
    folder, _ = sampled
    from testbed.analysis.residuals import folder_residuals
    dist = pd.read_csv(folder.path / "distribution.csv").set_index(["model", "phase"])
    for family in ("queueing", "simulated"):
        res = folder_residuals(folder.path, family)
        train = res[res["phase"] == "train"]
        assert sorted(train["config_id"]) == sorted(c["config_id"] for c in folder.manifest["configs"])
        assert train["error"].abs().median() == pytest.approx(dist.loc[(family, "train"), "median_abs_err"])
        again = folder_residuals(folder.path, family, repredict=True)
        merged = res.merge(again, on=["config_id", "phase"], suffixes=("", "_again"))
        assert len(merged) == len(res)
        assert merged["measured_s_again"].to_numpy() == pytest.approx(merged["measured_s"].to_numpy())
        assert merged["predicted_s_again"].to_numpy() == pytest.approx(merged["predicted_s"].to_numpy(), rel=1e-6)
    rows = tmp_path / "rows.csv"
    assert main(["residuals", str(folder.path), "--csv", str(rows), "--min-n", "2"]) == 0
    assert "over 1 folders, 3 configs" in capsys.readouterr().out
    assert set(pd.read_csv(rows)["phase"]) >= {"init", "train", "push", "pull", "apply"}
