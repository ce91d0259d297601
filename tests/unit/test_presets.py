"""Model presets: their figures, a spec's preset and preset_scale, the `testbed presets` command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed.config.errors import UserError
from testbed.config.presets import PRESETS, preset_names, preset_summary, resolve_preset, scaled_gradient_bytes
from testbed.config.spec import Network, expand, parse_spec
from testbed.records.rundir import RunFolder
from testbed.report.writer import write_report
from tests.unit.test_report import build_folder  # a run folder built by hand

REQUIRED = ["alexnet", "vgg16", "resnet50", "inception3", "bert-base", "bert-large", "gpt2", "gpt2-medium"]


def _spec(**fields):
    return parse_spec({"name": "p", **fields})


def test_every_required_model_is_shipped_with_sources():
    assert set(REQUIRED) <= set(PRESETS)
    for p in PRESETS.values():
        assert p.gradient_bytes == 4 * p.parameters and p.parameters_source
        for t in p.timings:
            # A time comes with its GPU, batch and source; a missing one says why.
            assert (t.seconds is not None and t.batch and t.source and t.gpu) or (t.seconds is None and t.note)
            assert "/" not in t.source.split("repository ")[0]  # references, not paths of a machine


def test_throughput_figures_are_converted_as_batch_over_rate():
    t = PRESETS["vgg16"].timing("p100")
    assert t.samples_per_s == 154 and t.seconds == pytest.approx(64 / 154)
    assert PRESETS["resnet50"].timing().seconds == 0.195 and PRESETS["resnet50"].timing("h100").seconds == 0.103


def test_a_preset_fills_the_spec():
    spec = _spec(preset="resnet50")
    p, t = resolve_preset("resnet50")
    assert spec.gradient_bytes == 4 * p.parameters
    assert spec.compute.seconds == t.seconds
    assert spec.workload.minibatch == t.batch and spec.workload.sample_bytes == p.sample_bytes
    assert spec.workload.steps == 20  # the default workload, less the two fields the preset gives
    assert spec.preset == "resnet50" and spec.preset_scale == 1.0


def test_a_gpu_variant_takes_its_own_timing():
    spec = _spec(preset="ResNet50@H100")
    assert spec.preset == "resnet50@h100" and spec.compute.seconds == 0.103


@pytest.mark.parametrize("scale", [0.1, 0.01, 0.5])
def test_scale_multiplies_gradient_and_compute_together(scale):
    spec = _spec(preset="resnet50", preset_scale=scale)
    p, t = resolve_preset("resnet50")
    assert spec.gradient_bytes % 4 == 0
    assert abs(spec.gradient_bytes - 4 * p.parameters * scale) <= 2  # rounded to whole float32 values
    assert spec.compute.seconds == pytest.approx(t.seconds * scale)
    # The ratio of communication to compute is the real model's.
    ratio = spec.gradient_bytes / spec.compute.seconds
    assert ratio == pytest.approx(p.gradient_bytes / t.seconds, rel=1e-5)
    assert spec.workload.minibatch == t.batch  # the batch is not scaled


def test_scaled_gradient_is_whole_float32_values_and_at_least_one():
    assert scaled_gradient_bytes(25_557_032, 0.1) == 4 * 2_555_703
    assert scaled_gradient_bytes(10, 1e-9) == 4


def test_explicit_fields_win_over_the_preset():
    spec = _spec(preset="bert-large", preset_scale=0.01, gradient_bytes="1MiB",
                 compute={"seconds": "5ms"}, workload={"steps": 3, "minibatch": 8})
    assert spec.gradient_bytes == 2**20 and spec.compute.seconds == 0.005
    assert spec.workload.minibatch == 8 and spec.workload.sample_bytes == PRESETS["bert-large"].sample_bytes


def test_set_overrides_win_over_the_preset():
    spec = parse_spec({"name": "p", "preset": "resnet50"}, overrides=["compute.seconds=7ms", "gradient_bytes=4KiB"])
    assert spec.compute.seconds == 0.007 and spec.gradient_bytes == 4096


def test_the_resolved_spec_records_the_values_and_revalidates_to_itself():
    spec = _spec(preset="resnet50", preset_scale=0.1, sweep={"workers": [1, 2]})
    dumped = spec.model_dump(mode="json")
    assert dumped["preset"] == "resnet50" and dumped["preset_scale"] == 0.1
    assert dumped["gradient_bytes"] == spec.gradient_bytes
    assert parse_spec(dumped) == spec  # a resumed run re-reads its manifest's spec
    assert [c.gradient_bytes for c in expand(spec)] == [spec.gradient_bytes] * 2


def test_unknown_preset_is_refused_naming_the_known_ones():
    with pytest.raises(UserError) as err:
        _spec(preset="resnet51")
    for name in REQUIRED:
        assert name in str(err.value)
    with pytest.raises(UserError, match="no timing for GPU 'tpu'.*v100"):
        _spec(preset="resnet50@tpu")


def test_a_preset_without_a_step_time_needs_compute_seconds():
    with pytest.raises(UserError, match="gpt2.*no per-step compute time.*give compute.seconds"):
        _spec(preset="gpt2")
    spec = _spec(preset="gpt2", compute={"seconds": "30ms"}, preset_scale=0.01)
    assert spec.compute.seconds == 0.03 and spec.gradient_bytes == scaled_gradient_bytes(124_000_000, 0.01)


@pytest.mark.parametrize("fields, needle", [
    ({"preset": "resnet50", "preset_scale": 0}, "preset_scale must be in"),
    ({"preset": "resnet50", "preset_scale": "big"}, "preset_scale must be a number"),
    ({"preset_scale": 0.5}, "give preset too"),
    ({"preset": "resnet50", "sweep": {"preset_scale": [0.1, 1]}}, "cannot be swept"),
    ({"preset": 3}, "preset must be a name"),
])
def test_bad_preset_fields_are_refused(fields, needle):
    with pytest.raises(UserError, match=needle):
        _spec(**fields)


def test_a_spec_without_preset_or_network_keeps_its_config_id():
    # The new fields are left out of the id while at their defaults.
    plain = expand(_spec(workers=2))[0]
    spelled = expand(_spec(workers=2, network={"bandwidth": None, "latency": 0}))[0]
    assert plain.config_id == spelled.config_id
    assert expand(_spec(workers=2, network={"bandwidth": "1Gbit"}))[0].config_id != plain.config_id
    from testbed.config import spec as spec_module
    assert spec_module._ID_OMITS_DEFAULTS["network"] == Network().model_dump(mode="json")


def test_preset_names_list_the_gpu_variants():
    names = preset_names()
    assert "resnet50@h100" in names and "resnet50" in names and "resnet50@v100" not in names


def test_the_report_header_names_preset_source_and_scale(tmp_path):
    spec = _spec(preset="resnet50@h100", preset_scale=0.1)
    line = preset_summary(spec.model_dump(mode="json"))
    assert "resnet50@h100" in line and "scale 0.1" in line and "resnet50_h100.yaml" in line
    assert preset_summary(_spec().model_dump(mode="json")) is None
    folder = RunFolder.open_for_writing(build_folder(tmp_path / "run").path)
    folder.update(spec=spec.model_dump(mode="json"))
    folder.release()
    text = write_report(folder.path).read_text()
    assert f"\n{line}\n" in text
    assert text.index("Preset:") < text.index("## ")  # in the header, before the first section


def test_the_presets_command_lists_every_preset_through_the_cli(repo):
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-m", "testbed", "presets"], capture_output=True, text=True, env=env,
                         cwd=repo, timeout=120, check=True).stdout
    for name in REQUIRED + ["resnet50@h100"]:
        assert f"\n{name} " in out
    assert "0.195 s" in out and "97.5 MiB" in out  # ResNet-50 on V100; its fp32 gradient
    assert "dlio_benchmark/configs/workload/resnet50_v100.yaml" in out
    assert "no step time" in out  # the GPT-2 and BERT-base rows say why they have none
