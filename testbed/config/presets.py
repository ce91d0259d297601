"""Presets of the models people size parameter-server clusters for.

Pure data and functions. A preset gives a model's parameter count (so its float32 gradient,
4 bytes a parameter), one or more per-step compute times each measured on a named GPU with
a stated batch, and the size of a sample and of the training set where they are known. Every
figure carries its source; where no per-step time could be checked against a source, the
timing says so (``seconds`` None, with the reason) instead of inventing one, and a spec using
it must give ``compute.seconds`` itself.

A spec names one with ``preset: NAME`` (the first timing listed) or ``preset: NAME@GPU``
(e.g. ``resnet50@h100``); ``preset_scale: F`` multiplies the gradient and the compute time
together, so a laptop keeps the job's ratio of communication to compute. ``fill_from_preset``
does that on a spec's raw data; fields the spec gives itself are left as they are.

Step times given by the source as a throughput (images or sequences a second) are converted
here as batch / throughput, and the throughput is kept beside it so the conversion shows.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["StepTiming", "Preset", "PRESETS", "preset_names", "resolve_preset", "scaled_gradient_bytes",
           "fill_from_preset", "preset_summary", "MAX_PRESET_SCALE"]

# A scale above 1 emulates a larger model of the same shape; past this it is a typo.
MAX_PRESET_SCALE = 100.0


@dataclass(frozen=True)
class StepTiming:
    """One forward and backward pass over ``batch`` samples on one ``gpu``.

    ``seconds`` None: no per-step time could be checked for this GPU; ``note`` says why.
    ``samples_per_s``: the source's throughput when the time is derived from one.
    """
    key: str
    gpu: str
    batch: Optional[int]
    seconds: Optional[float]
    source: str
    samples_per_s: Optional[float] = None
    note: str = ""


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    parameters: int
    parameters_source: str
    timings: tuple[StepTiming, ...]
    sample_bytes: Optional[int] = None
    samples: Optional[int] = None
    dataset_bytes: Optional[int] = None
    data_source: str = ""

    @property
    def gradient_bytes(self) -> int:
        """The full-precision gradient: 4 bytes (float32) a parameter."""
        return 4 * self.parameters

    def timing(self, key: Optional[str] = None) -> StepTiming:
        if key is None:
            return self.timings[0]
        for t in self.timings:
            if t.key == key:
                return t
        raise KeyError(key)


def _from_rate(key: str, gpu: str, batch: int, samples_per_s: float, source: str, note: str = "") -> StepTiming:
    return StepTiming(key, gpu, batch, batch / samples_per_s, source, samples_per_s, note)


_TF_BENCH = ("TensorFlow benchmarks, tf_cnn_benchmarks, May 2017: repository tensorflow/docs, "
             "site/en/r1/guide/performance/benchmarks.md")
_TF_P100 = _TF_BENCH + ", NVIDIA DGX-1, 1 GPU, real data"
_TF_K80 = _TF_BENCH + ", Google Compute Engine, 1 GPU, real data"
_IMAGENET = ("ImageNet ILSVRC-2012 training set, 1,281,167 images; mean JPEG size 114,660 bytes from "
             "repository argonne-lcf/dlio_benchmark, dlio_benchmark/configs/workload/resnet50_v100.yaml")
_IMAGENET_SAMPLES = 1_281_167
_IMAGENET_SAMPLE_BYTES = 114_660
_NO_TRANSFORMER_TIME = ("no per-step training time on a named GPU with its batch was found in a source "
                        "that could be checked")

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("alexnet", "AlexNet", 61_100_840,
           "torchvision model documentation, alexnet (AlexNet_Weights.IMAGENET1K_V1, num_params); "
           "Krizhevsky, Sutskever, Hinton 2012, ImageNet Classification with Deep Convolutional Neural Networks "
           "(about 60 million)",
           (_from_rate("p100", "NVIDIA Tesla P100", 512, 2890, _TF_P100),
            _from_rate("k80", "NVIDIA Tesla K80", 512, 639, _TF_K80)),
           _IMAGENET_SAMPLE_BYTES, _IMAGENET_SAMPLES, _IMAGENET_SAMPLES * _IMAGENET_SAMPLE_BYTES, _IMAGENET),
    Preset("vgg16", "VGG-16", 138_357_544,
           "torchvision model documentation, vgg16 (VGG16_Weights.IMAGENET1K_V1, num_params); Keras "
           "Applications table (138.4M); "
           "Simonyan, Zisserman 2015, Very Deep Convolutional Networks for Large-Scale Image Recognition",
           (_from_rate("p100", "NVIDIA Tesla P100", 64, 154, _TF_P100),
            _from_rate("k80", "NVIDIA Tesla K80", 32, 34.2, _TF_K80)),
           _IMAGENET_SAMPLE_BYTES, _IMAGENET_SAMPLES, _IMAGENET_SAMPLES * _IMAGENET_SAMPLE_BYTES, _IMAGENET),
    Preset("resnet50", "ResNet-50", 25_557_032,
           "torchvision model documentation, resnet50 (ResNet50_Weights.IMAGENET1K_V1, num_params); "
           "He, Zhang, Ren, Sun 2016, Deep Residual Learning for Image Recognition",
           (StepTiming("v100", "NVIDIA V100", 64, 0.195, "repository argonne-lcf/dlio_benchmark, "
                       "dlio_benchmark/configs/workload/resnet50_v100.yaml (computation_time, batch_size)"),
            StepTiming("h100", "NVIDIA H100", 64, 0.103, "repository argonne-lcf/dlio_benchmark, "
                       "dlio_benchmark/configs/workload/resnet50_h100.yaml (computation_time, batch_size)"),
            StepTiming("a100", "NVIDIA A100", 400, 0.435, "repository argonne-lcf/dlio_benchmark, "
                       "dlio_benchmark/configs/workload/resnet50_a100.yaml (computation_time, batch_size)"),
            _from_rate("p100", "NVIDIA Tesla P100", 64, 218, _TF_P100)),
           _IMAGENET_SAMPLE_BYTES, _IMAGENET_SAMPLES, _IMAGENET_SAMPLES * _IMAGENET_SAMPLE_BYTES, _IMAGENET),
    Preset("inception3", "Inception-v3", 23_851_784,
           "Keras Applications table, InceptionV3 (23.9M, with the classifier; torchvision's inception_v3 "
           "counts about 27.2M with its auxiliary classifier); Szegedy et al. 2016, Rethinking the "
           "Inception Architecture for Computer Vision",
           (_from_rate("p100", "NVIDIA Tesla P100", 64, 142, _TF_P100),
            _from_rate("k80", "NVIDIA Tesla K80", 64, 30.6, _TF_K80)),
           _IMAGENET_SAMPLE_BYTES, _IMAGENET_SAMPLES, _IMAGENET_SAMPLES * _IMAGENET_SAMPLE_BYTES, _IMAGENET),
    Preset("bert-base", "BERT-base", 110_000_000,
           "Devlin, Chang, Lee, Toutanova 2019, BERT: Pre-training of Deep Bidirectional Transformers for "
           "Language Understanding (110M)",
           (StepTiming("none", "-", None, None, "",
                       note=_NO_TRANSFORMER_TIME + "; NVIDIA's BERT tables (repository NVIDIA/DeepLearningExamples) "
                       "are for BERT-large"),)),
    Preset("bert-large", "BERT-large", 340_000_000,
           "Devlin, Chang, Lee, Toutanova 2019, BERT: Pre-training of Deep Bidirectional Transformers for "
           "Language Understanding (340M)",
           (StepTiming("v100", "NVIDIA V100", 48, 0.968,
                       "repository argonne-lcf/dlio_benchmark, dlio_benchmark/configs/workload/bert_v100.yaml "
                       "(computation_time, batch_size; MLPerf Training's BERT, which is BERT-large)"),
            _from_rate("v100-32gb", "NVIDIA V100 32GB", 32, 46.78,
                       "repository NVIDIA/DeepLearningExamples, TensorFlow/LanguageModeling/BERT/README.md, "
                       "pre-training, DGX-1 32GB, 1 GPU, FP32, sequence length 128",
                       note="one micro-batch; that recipe accumulates gradients over many before an update")),
           2_500, 500 * 313_532, 500 * 313_532 * 2_500,
           "repository argonne-lcf/dlio_benchmark, dlio_benchmark/configs/workload/bert_v100.yaml "
           "(500 files of 313,532 records of 2,500 bytes)"),
    Preset("gpt2", "GPT-2 small", 124_000_000,
           "repository openai/gpt-2, README.md (124M; the paper's 117M was a counting error); Radford et al. "
           "2019, Language Models are Unsupervised Multitask Learners",
           (StepTiming("none", "-", None, None, "",
                       note=_NO_TRANSFORMER_TIME + "; the GPT-2 paper and repository publish none"),),
           dataset_bytes=40_000_000_000,
           data_source="Radford et al. 2019: WebText, about 40 GB of text"),
    Preset("gpt2-medium", "GPT-2 medium", 355_000_000,
           "repository openai/gpt-2, README.md (355M; the paper's 345M was a counting error); Radford et al. "
           "2019, Language Models are Unsupervised Multitask Learners",
           (StepTiming("none", "-", None, None, "",
                       note=_NO_TRANSFORMER_TIME + "; the GPT-2 paper and repository publish none"),),
           dataset_bytes=40_000_000_000,
           data_source="Radford et al. 2019: WebText, about 40 GB of text"),
)}


def preset_names() -> list[str]:
    """Every preset a spec may name, with its GPU variants (``resnet50@h100``)."""
    names = []
    for p in PRESETS.values():
        names.append(p.name)
        names += [f"{p.name}@{t.key}" for t in p.timings[1:]]
    return names


def resolve_preset(name: Any) -> tuple[Preset, StepTiming]:
    """The preset and the timing ``NAME`` or ``NAME@GPU`` stands for; ValueError naming the known ones."""
    if not isinstance(name, str):
        raise ValueError(f"preset must be a name such as 'resnet50', got {name!r}")
    base, _, key = name.strip().lower().partition("@")
    preset = PRESETS.get(base)
    if preset is None:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)} (`testbed presets` lists them)")
    try:
        return preset, preset.timing(key or None)
    except KeyError:
        raise ValueError(f"preset {base!r} has no timing for GPU {key!r}; "
                         f"known: {', '.join(t.key for t in preset.timings)}") from None


def scaled_gradient_bytes(parameters: int, scale: float) -> int:
    """The gradient of ``parameters`` float32 values times ``scale``, a whole number of float32 values
    (so a multiple of 4 bytes), at least one."""
    return 4 * max(1, round(parameters * scale))


def _scale(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"preset_scale must be a number in (0, {MAX_PRESET_SCALE:g}], got {value!r}")
    if not 0 < value <= MAX_PRESET_SCALE:
        raise ValueError(f"preset_scale must be in (0, {MAX_PRESET_SCALE:g}] (1 is the real model; 0.1 a tenth "
                         f"of its gradient and of its compute), got {value!r}")
    return float(value)


def fill_from_preset(data: dict[str, Any], workload_default: dict[str, Any]) -> dict[str, Any]:
    """A spec's raw data with the fields its preset supplies filled in where the spec gives none:
    ``gradient_bytes`` and ``compute.seconds`` (both times ``preset_scale``), ``workload.sample_bytes``
    and ``workload.minibatch`` (the batch the time was measured on). Returns a new dict; ``data``
    without ``preset`` comes back unchanged. ``workload_default`` is the spec's default workload,
    used when the spec has no workload section."""
    name = data.get("preset")
    if name is None:
        if data.get("preset_scale", 1.0) != 1.0:
            raise ValueError("preset_scale scales a preset: give preset too (e.g. preset: resnet50)")
        return data
    preset, timing = resolve_preset(name)
    scale = _scale(data.get("preset_scale", 1.0))
    out = copy.deepcopy(data)
    out["preset"] = preset.name if timing is preset.timings[0] else f"{preset.name}@{timing.key}"
    out["preset_scale"] = scale
    out.setdefault("gradient_bytes", scaled_gradient_bytes(preset.parameters, scale))
    compute = out.setdefault("compute", {})
    if isinstance(compute, dict) and "seconds" not in compute:
        if timing.seconds is not None:
            compute["seconds"] = round(timing.seconds * scale, 12)
        elif compute.get("mode", "sleep") != "matmul":
            raise ValueError(f"preset {out['preset']!r} has no per-step compute time ({timing.note}); "
                             f"give compute.seconds in the spec")
    # Without a workload section the spec's default workload applies, less the two fields given here.
    workload = out.setdefault("workload", {k: v for k, v in workload_default.items()
                                           if k not in ("sample_bytes", "minibatch")})
    if isinstance(workload, dict):
        if preset.sample_bytes is not None:
            workload.setdefault("sample_bytes", preset.sample_bytes)
        if timing.batch is not None:
            workload.setdefault("minibatch", timing.batch)
    return out


def preset_summary(spec: dict[str, Any]) -> Optional[str]:
    """One line naming a resolved spec's preset, the sources of its figures and its scale; None without one."""
    name = spec.get("preset")
    if not name:
        return None
    try:
        preset, timing = resolve_preset(name)
    except ValueError:
        return f"Preset: `{name}` (not a preset this version ships), scale {spec.get('preset_scale', 1.0):g}."
    step = (f"{timing.seconds:.3g} s a step of {timing.batch} on {timing.gpu} ({timing.source})"
            if timing.seconds is not None else "no published per-step time: compute.seconds from the spec")
    return (f"Preset: `{name}` ({preset.title}, {preset.parameters:,} parameters: {preset.parameters_source}; "
            f"{step}), scale {spec.get('preset_scale', 1.0):g}: gradient and compute multiplied by it.")
