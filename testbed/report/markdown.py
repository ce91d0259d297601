"""The one Markdown renderer of the report: every table of ``report.md`` goes through it,
so a number looks the same in every section.

Cells: floats with 4 significant digits, NaN, None and ``pd.NA`` as ``-``, anything else
as ``str``. A table without rows renders as ``_(none)_``, so an empty section still says so.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

__all__ = ["markdown_table", "frame_table", "cell", "NONE"]

NONE = "_(none)_"


def cell(value: Any) -> str:
    """One table cell."""
    if value is None or value is pd.NA:
        return "-"
    if isinstance(value, (float, np.floating)):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def markdown_table(rows: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[str]:
    """A GitHub-flavoured Markdown table of ``rows`` under ``columns``, as lines."""
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    if not body:
        return [NONE]
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns), *body]


def frame_table(frame: pd.DataFrame) -> list[str]:
    """A data frame as a Markdown table (its columns as the header, its index dropped)."""
    return markdown_table(frame.itertuples(index=False, name=None), [str(c) for c in frame.columns])
