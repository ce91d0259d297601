"""Residuals pooled over several compared run folders, and the groups of configs they miss alike.

One held-out draw has 24 configs: too few to tell a term that misses from the run-to-run noise.
Pooled over a dozen draws the misses that matter stand out as *groups*: configs that share a
value of a declared dimension (compute mode, sync, shard count, a band of workers or of gradient
sizes, the data read at init, the step reads) and miss the same way, e.g. every spinning worker's
one-call step read short. ``residuals`` reads the folders, ``phase_table`` gives the pooled error
per phase, ``biased_groups`` the groups whose median signed error is large and shared by most of
their configs: the term to look at (docs/validation.md, "Pooling draws").

Each config counts once: its first repeat that ran ok (as ``compare.distribution_table``), so
the configs repeated for the noise floor do not weigh more. Pure pandas over the folders'
``summary.csv`` (the predictions made when the folder was compared) and ``manifest.json``; with
``repredict`` the folder is compared again with the model of this checkout on the profile saved
in it (``validation.compare_run``): seen data then, for trying a change, not held-out figures.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from testbed.analysis.compare import MODELS, add_predictions, measured_column, predict_run
from testbed.config.errors import UserError

__all__ = ["RESIDUAL_PHASES", "DIMENSIONS", "residuals", "folder_residuals", "config_dimensions", "phase_table",
           "biased_groups", "sign_test_p", "worker_band", "gradient_band", "folders_from", "describe"]

# The phases the targets hold for: the driver's spans and the per-step phases a step is made of.
RESIDUAL_PHASES = ("init", "train", "read", "push", "pull", "apply")
# The dimensions a config is grouped by (``config_dimensions``), in the order the tables show them.
DIMENSIONS = ("compute", "sync", "servers", "workers", "gradient", "init data", "step reads", "jitter", "apply")

KIB, MIB = 2**10, 2**20
# Bands wide enough that a dozen draws fill each (workers are drawn log-uniform in 1..32).
_WORKER_BANDS = ((1, "1"), (4, "2-4"), (16, "5-16"), (math.inf, "17+"))
_GRADIENT_BANDS = ((64 * KIB, "<=64 KiB"), (MIB, "64 KiB-1 MiB"), (8 * MIB, "1-8 MiB"), (math.inf, ">8 MiB"))


def worker_band(workers: int) -> str:
    return next(label for top, label in _WORKER_BANDS if workers <= top)


def gradient_band(nbytes: float) -> str:
    return next(label for top, label in _GRADIENT_BANDS if nbytes <= top)


def config_dimensions(config: dict[str, Any]) -> dict[str, Any]:
    """The grouping values of one config (a manifest's config record)."""
    compute, data, workload = config.get("compute", {}), config.get("data", {}), config.get("workload", {})
    has_data = float(workload.get("dataset_bytes") or 0) > 0
    jitter = (compute.get("jitter") or {}).get("distribution", "none")
    return {
        "compute": compute.get("mode"), "sync": config.get("sync"), "servers": int(config.get("servers", 1)),
        "workers": worker_band(int(config.get("workers", 1))),
        "gradient": gradient_band(float(config.get("gradient_bytes", 0))),
        "init data": data.get("init_io", "?") if has_data else "none",
        "step reads": data.get("step_reads", "none") if has_data else "none",
        "jitter": jitter if float((compute.get("jitter") or {}).get("cv", 0) or 0) > 0 else "none",
        "apply": "emulated" if float(config.get("apply_seconds") or 0) > 0 else "real",
    }


def _compared(path: Path, family: str, repredict: bool) -> pd.DataFrame:
    if repredict:
        from testbed.config.spec import RunConfig
        from testbed.model.profile import load_profile
        from testbed.records.rundir import PROFILE_FILE, RunFolder
        folder = RunFolder.open(path)
        if not (path / PROFILE_FILE).is_file():
            raise UserError(f"{path} has no {PROFILE_FILE}: it was never compared with the model, so it cannot be "
                            f"re-predicted; run `testbed report {path} --profile PROFILE` first")
        configs = [RunConfig.model_validate(c) for c in folder.manifest["configs"]]
        # The predictions alone (no knees or curves over the worker counts, as a report makes).
        return add_predictions(folder.summary(), predict_run(configs, load_profile(path / PROFILE_FILE), (family,)))
    summary = path / "summary.csv"
    if not summary.is_file():
        raise UserError(f"{path} has no summary.csv: give a folder written by `testbed validate` "
                        f"(or one `testbed report` has compared with a profile)")
    frame = pd.read_csv(summary)
    if f"train_err_{family}" not in frame:
        raise UserError(f"{summary} holds no predictions of the {family} family: the folder was not compared "
                        f"with the model; run `testbed report {path} --profile PROFILE`, or pass --repredict")
    return frame


def _steal_by_config(path: Path) -> dict[tuple[str, int], float]:
    """Each config repeat's mean hypervisor steal over its monitor samples (``cpu_steal_percent``
    in ``resources.parquet``); empty for folders without monitors or made before the column."""
    file = path / "resources.parquet"
    if not file.is_file():
        return {}
    from testbed.records.summary import steal_by_config
    means = steal_by_config(pd.read_parquet(file))
    return {(str(c), int(k)): float(v) for (c, k), v in means.items()}


def folder_residuals(path: str | Path, family: str = "simulated", *, repredict: bool = False,
                     phases: Sequence[str] = RESIDUAL_PHASES) -> pd.DataFrame:
    """One row per config and phase of the folder at ``path``: the measured and predicted time
    (seconds: the span, or the per-step mean), the signed relative error, the hypervisor's steal
    while that repeat ran (``steal_percent``, its monitor samples' mean; NaN without them), on
    the read's row the part of the mean read its thread waited for a core (``runq_s``, from the
    ``read_runq`` events; NaN elsewhere, and for folders made before them), and
    the config's grouping values (``config_dimensions``). Phases a config did not measure are left
    out."""
    if family not in MODELS:
        raise UserError(f"unknown model family {family!r}: choose one of {', '.join(MODELS)}")
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"{path} is not a run folder (no manifest.json); give folders written by `testbed validate`")
    try:
        configs = {c["config_id"]: c for c in json.loads(manifest_path.read_text())["configs"]}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{manifest_path} cannot be read ({err}); the folder's configs are unknown") from None
    compared = _compared(path, family, repredict)
    if "status" in compared:
        compared = compared[compared["status"] == "ok"]
    first = compared[compared["repeat"] == compared.groupby("config_id")["repeat"].transform("min")]
    steal = _steal_by_config(path)
    rows = []
    for _, row in first.iterrows():
        config = configs.get(row["config_id"])
        if config is None:
            continue
        dims = config_dimensions(config)
        for phase in phases:
            measured = float(row.get(measured_column(phase), np.nan))
            predicted = float(row.get(f"{phase}_s_pred_{family}", np.nan))
            if not (measured > 0) or predicted != predicted:
                continue
            rows.append({"folder": path.name, "config_id": row["config_id"], "phase": phase, "workers_n": int(config["workers"]),
                         "measured_s": measured, "predicted_s": predicted, "error": (predicted - measured) / measured,
                         "steal_percent": steal.get((str(row["config_id"]), int(row["repeat"])), np.nan),
                         "runq_s": float(row.get("read_runq_mean_s", np.nan)) if phase == "read" else np.nan, **dims})
    return pd.DataFrame(rows, columns=["folder", "config_id", "phase", "workers_n", "measured_s", "predicted_s", "error",
                                       "steal_percent", "runq_s", *DIMENSIONS])


def residuals(paths: Iterable[str | Path], family: str = "simulated", *, repredict: bool = False,
              progress=lambda _msg: None) -> pd.DataFrame:
    """``folder_residuals`` of every folder, one frame (the folder's name in ``folder``)."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise UserError("no folders given: name one or more folders written by `testbed validate`")
    # Each folder by its name, or by its whole path where two share a name (a config's rows are
    # told apart by folder and config id).
    names = [p.name for p in paths]
    frames = []
    for path in paths:
        progress(f"reading {path.name}")
        frame = folder_residuals(path, family, repredict=repredict)
        if names.count(path.name) > 1:
            frame["folder"] = str(path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def phase_table(res: pd.DataFrame, phases: Sequence[str] = RESIDUAL_PHASES) -> pd.DataFrame:
    """Per phase over the pooled configs: n, the median and p90 of |error|, the median signed error."""
    rows = []
    for phase in phases:
        err = res.loc[res["phase"] == phase, "error"].dropna()
        if len(err):
            rows.append({"phase": phase, "n": len(err), "median_abs_err": float(err.abs().median()),
                         "p90_abs_err": float(np.percentile(err.abs(), 90)), "median_signed_err": float(err.median())})
    return pd.DataFrame(rows, columns=["phase", "n", "median_abs_err", "p90_abs_err", "median_signed_err"])


def sign_test_p(agreeing: int, n: int) -> float:
    """One-sided sign test: the chance that ``agreeing`` or more of ``n`` errors fall on one side
    when each is as likely short as long."""
    return sum(math.comb(n, k) for k in range(agreeing, n + 1)) / 2.0**n


def biased_groups(res: pd.DataFrame, *, min_n: int = 8, bias: float = 0.15, alpha: float = 0.01,
                  dimensions: Sequence[str] = DIMENSIONS, pairs: bool = True, per_phase: Optional[int] = 6) -> pd.DataFrame:
    """The groups of configs, per phase, that one value of a dimension (or of two, with
    ``pairs``) picks out and the model misses alike: at least ``min_n`` configs, a median signed
    error of at least ``bias`` either way, and so many of them on the median's side that a sign
    test gives at most ``alpha`` (``sign_test_p``: 8 of 8, 12 of 14, 17 of 21 at 0.01). Many
    groups are tried, so a weak one can pass by chance: hold it against the folders it spans and
    look again on new draws. A pair is kept only where it is more biased than both of its single
    groups (else the single group already says it). Sorted by phase, then by how far the group
    stands from no bias (|median| x sqrt(n)); at most ``per_phase`` a phase (None: all)."""
    singles: dict[tuple[str, str, Any], float] = {}
    rows = []
    # Each config's error in every phase, to say what the rest of a group's step did.
    by_config = res.pivot_table(index=["folder", "config_id"], columns="phase", values="error", aggfunc="first") \
        if len(res) else pd.DataFrame()
    keys = [(d,) for d in dimensions] + (list(itertools.combinations(dimensions, 2)) if pairs else [])
    for phase, sub in res.groupby("phase", sort=False):
        for key in keys:
            for values, group in sub.groupby(list(key), sort=True, dropna=True):
                values = values if isinstance(values, tuple) else (values,)
                err = group["error"].dropna()
                if len(err) < min_n or len(group) == len(sub):  # a value every config shares is no group
                    continue
                median = float(err.median())
                if len(key) == 1:
                    singles[(phase, key[0], values[0])] = median
                if abs(median) < bias:
                    continue
                same = int((np.sign(err) == np.sign(median)).sum())
                p_value = sign_test_p(same, len(err))
                if p_value > alpha:
                    continue
                if len(key) == 2 and any(abs(singles.get((phase, d, v), 0.0)) >= abs(median) for d, v in zip(key, values)):
                    continue
                rows.append({"phase": phase, "group": ", ".join(f"{d}={v}" for d, v in zip(key, values)), "n": len(err),
                             "median_signed_err": median, "median_abs_err": float(err.abs().median()), "agree": same / len(err),
                             "p_value": p_value, "folders": int(group["folder"].nunique()),
                             "other_phases": _other_phases(by_config, group, phase),
                             "_score": abs(median) * math.sqrt(len(err))})
    out = pd.DataFrame(rows, columns=["phase", "group", "n", "median_signed_err", "median_abs_err", "agree", "p_value",
                                      "folders", "other_phases", "_score"])
    order = {p: i for i, p in enumerate(RESIDUAL_PHASES)}
    out = out.assign(_phase=out["phase"].map(lambda p: order.get(p, len(order))))
    out = out.sort_values(["_phase", "_score"], ascending=[True, False])
    if per_phase is not None:
        out = out.groupby("phase", sort=False).head(per_phase)
    return out.drop(columns=["_phase", "_score"]).reset_index(drop=True)


def _other_phases(by_config: pd.DataFrame, group: pd.DataFrame, phase: str) -> str:
    """The median signed error of every other phase over the configs of ``group``: a train miss
    is a push, pull, apply or read miss somewhere (the model right on train and wrong on its
    phases is right for the wrong reasons)."""
    rows = by_config.loc[list(zip(group["folder"], group["config_id"]))]
    parts = []
    for other in RESIDUAL_PHASES:
        if other == phase or other not in rows:
            continue
        err = rows[other].dropna()
        if len(err):
            parts.append(f"{other} {float(err.median()):+.0%}")
    return ", ".join(parts)


def folders_from(paths: Iterable[str | Path]) -> list[Path]:
    """The folders named, each either a compared run folder or a folder holding several (its
    subfolders with a manifest.json, sorted by name)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "manifest.json").is_file():
            out.append(p)
        elif p.is_dir():
            found = sorted(q for q in p.iterdir() if (q / "manifest.json").is_file())
            if not found:
                raise UserError(f"{p} is neither a run folder nor a folder of run folders (no manifest.json in it "
                                f"or in its subfolders)")
            out.extend(found)
        else:
            raise UserError(f"{p}: no such folder")
    return out


def describe(res: pd.DataFrame, groups: pd.DataFrame, table: pd.DataFrame, family: str,
             folders: Optional[int] = None) -> str:
    """The tables as markdown (for the terminal and for a notes file)."""
    n_folders = folders if folders is not None else res["folder"].nunique()
    lines = [f"# Residuals of the {family} family over {n_folders} folders, "
             f"{res['config_id'].nunique()} configs", "",
             "| phase | n | median | p90 | bias (median signed) |", "|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['phase']} | {r['n']} | {r['median_abs_err']:.1%} | {r['p90_abs_err']:.1%} | "
                     f"{r['median_signed_err']:+.1%} |")
    lines += ["", "## Groups missed alike", ""]
    if groups.empty:
        lines.append("None: no group of enough configs shares a large bias.")
    else:
        lines += ["| phase | group | n | bias (median signed) | median | same sign | sign test p | folders | "
                  "its other phases (median signed) |", "|---|---|---|---|---|---|---|---|---|"]
        for _, g in groups.iterrows():
            lines.append(f"| {g['phase']} | {g['group']} | {g['n']} | {g['median_signed_err']:+.1%} | "
                         f"{g['median_abs_err']:.1%} | {g['agree']:.0%} | {g['p_value']:.1g} | {g['folders']} | "
                         f"{g['other_phases']} |")
    return "\n".join(lines) + "\n"
