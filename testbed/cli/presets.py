"""``testbed presets``: the shipped model presets, their figures and where each comes from."""

from __future__ import annotations

from testbed.cli.app import app
from testbed.cli.common import out_console
from testbed.config.presets import PRESETS, Preset
from testbed.config.units import format_bytes

__all__ = ["presets", "format_presets"]


def _millions(n: int) -> str:
    return f"{n / 1e6:.1f} M"


def _rows(p: Preset) -> list[list[str]]:
    rows = []
    for i, t in enumerate(p.timings):
        name = p.name if i == 0 else f"{p.name}@{t.key}"
        step = "-" if t.seconds is None else f"{t.seconds:.3f} s"
        batch = "-" if t.batch is None else str(t.batch)
        first = i == 0
        rows.append([name, p.title if first else "", _millions(p.parameters) if first else "",
                     format_bytes(p.gradient_bytes) if first else "", t.gpu, batch, step,
                     ("-" if p.sample_bytes is None else format_bytes(p.sample_bytes)) if first else "",
                     ("-" if p.dataset_bytes is None else format_bytes(p.dataset_bytes)) if first else ""])
    return rows


def format_presets() -> str:
    """A plain-text table of every preset (one line per GPU timing), then each figure's source."""
    header = ["preset", "model", "parameters", "gradient (fp32)", "GPU", "batch", "step compute", "sample", "data set"]
    rows = [r for p in PRESETS.values() for r in _rows(p)]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows]
    lines += ["", "Step compute is one forward and backward pass over the batch on one GPU; "
              "'-': no per-step time could be checked, so a spec using it must give compute.seconds.",
              "A spec uses one with `preset: NAME` (or NAME@GPU) and `preset_scale: F` (gradient and compute times F).",
              "", "Sources:"]
    for p in PRESETS.values():
        lines.append(f"- {p.name}: parameters: {p.parameters_source}")
        for t in p.timings:
            if t.seconds is None:
                lines.append(f"    {t.gpu}: no step time: {t.note}")
                continue
            rate = f" ({t.samples_per_s:g} samples/s; time = batch / rate)" if t.samples_per_s else ""
            note = f"; {t.note}" if t.note else ""
            lines.append(f"    {t.gpu}, batch {t.batch}: {t.source}{rate}{note}")
        if p.data_source:
            lines.append(f"    data: {p.data_source}")
    return "\n".join(lines)


@app.command()
def presets() -> None:
    """List the model presets a spec can name (`preset: NAME`), with their figures and sources."""
    out_console.print(format_presets(), markup=False, highlight=False, soft_wrap=True)
