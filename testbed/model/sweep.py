"""The model's predictions for every config of a spec, as a table (``testbed predict``
prints and writes it: ``testbed.cli.predict``).

A thin layer over ``testbed.model``: it expands the spec, loads the profile, runs the
chosen families and returns one row per config and family. It needs no Ray.

    frame = predict_spec("experiments/smoke.yaml", "profile.json", "initial,queueing")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from testbed.config.errors import UserError
from testbed.config.spec import ConfigFields, ExperimentSpec, RunConfig, expand, load_spec
from testbed.model import ModelFamily, predict
from testbed.model.profile import HardwareProfile, load_profile

__all__ = ["predict_spec", "predict_configs", "parse_models", "CSV_COLUMNS"]

# The columns every predictions CSV has, in this order (more may follow).
CSV_COLUMNS = ["config_id", "model", "workers", "servers", "init_s", "train_s", "total_s", "step_s",
               "steps_per_s", "bound", "knee_workers"]


def parse_models(models: str | Iterable[ModelFamily | str] | None) -> list[ModelFamily]:
    """``"initial,queueing"`` or a list of names -> families; None -> all three."""
    if models is None:
        return list(ModelFamily)
    names = models.split(",") if isinstance(models, str) else list(models)
    allowed = ", ".join(f.value for f in ModelFamily)
    out: list[ModelFamily] = []
    for name in names:
        key = name.value if isinstance(name, ModelFamily) else str(name).strip().lower()
        if not key:
            continue
        try:
            family = ModelFamily(key)
        except ValueError:
            raise UserError(f"--models: unknown model family {name!r}; allowed: {allowed}") from None
        if family not in out:
            out.append(family)
    if not out:
        raise UserError(f"--models: name at least one model family ({allowed})")
    return out


def _configs(spec: Any) -> list[Any]:
    if isinstance(spec, (str, Path)):
        return expand(load_spec(spec))
    if isinstance(spec, ExperimentSpec):
        return expand(spec)
    if isinstance(spec, ConfigFields):  # a RunConfig or a bare ConfigFields
        return [spec]
    if isinstance(spec, (list, tuple)) and all(isinstance(c, ConfigFields) for c in spec):
        return list(spec)
    raise TypeError(f"expected a spec path, an ExperimentSpec or run configs, got {type(spec).__name__}")


def predict_configs(configs: Sequence[Any], profile: HardwareProfile,
                    models: str | Iterable[ModelFamily | str] | None = None) -> pd.DataFrame:
    """One row per config and family, columns ``CSV_COLUMNS`` first, then the phase means
    (``<phase>_mean_s``), utilisation, the other knees and ``experiment``."""
    families = parse_models(models)
    rows = []
    for config in configs:
        for family in families:
            row = predict(config, profile, family).to_row()
            if not row["config_id"]:
                row["config_id"] = f"c{getattr(config, 'index', len(rows) // len(families)):03d}"
            row["experiment"] = getattr(config, "experiment", "")
            rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=CSV_COLUMNS)
    # Knees are counts; Int64 keeps "no knee" as <NA> instead of turning the column into floats.
    for column in ("knee_workers", "knee_train_workers"):
        frame[column] = frame[column].astype("Int64")
    rest = [c for c in frame.columns if c not in CSV_COLUMNS]
    return frame[CSV_COLUMNS + rest]


def predict_spec(spec: str | Path | ExperimentSpec | RunConfig | Sequence[RunConfig],
                 profile: HardwareProfile | str | Path,
                 models: str | Iterable[ModelFamily | str] | None = None) -> pd.DataFrame:
    """Predict every config of a spec (a YAML path, a loaded spec, or run configs) on a
    profile (a ``HardwareProfile`` or a JSON path) with the named families (default all).

    Raises ``UserError`` for a bad spec, profile or family name, or a profile that lacks
    a figure a config needs.
    """
    if not isinstance(profile, HardwareProfile):
        profile = load_profile(profile)
    return predict_configs(_configs(spec), profile, models)
