"""Model FLOPs utilisation (MFU) per step: the figure large-model trainers log.

MFU = model FLOPs of the step ÷ step time ÷ (peak FLOP/s of one device × devices that ran
work). Model FLOPs come from the XLA programs (the profile's ``model_flops`` on TPU, else
our count from the HLO, ``hlo_cost``) or, for PyTorch, from the shapes of its matmul,
convolution and attention ops (``run_model.model_flops``). The peak is the one a user
gives, else the one the profile states (TPU), else the published figure of the device at
the precision most FLOPs ran in (``xla.device_peaks``). FP32 work runs TF32 where the
kernels say so (``tf32_share``): then the TF32 peak is used. Where the peak or the FLOPs are
unknown, MFU is ``None`` and ``unknown`` says why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from stepscope.analysis.run_model import HostModel, RunModel
from stepscope.analysis.xla import device_peaks
from stepscope.analysis.xla.xla_model import XlaModel

_PRECISION_OF = {**device_peaks.PRECISION_OF, "f64": "fp64"}
# Matrix kernels of FP32 data that run on TF32 tensor cores: a ``tf32`` in the name (cuBLAS's
# and cuDNN's ``sm80_xmma_…_tf32f32…``, ``ampere_tf32_…``, ``Ampere_hmma_tf32_traits``), or
# CUTLASS's ``tensorop_s1688gemm`` (FP32 in and out, the m16n8k8 TF32 MMA; a 16-bit GEMM names
# its type: ``tensorop_bf16_s16816gemm``).
_TF32_KERNEL = re.compile(r"tf32|tensorop_s1688gemm", re.IGNORECASE)
# Matrix kernels of FP32 data on the FP32 units (SIMT): cuBLAS's ``sgemm``, cuDNN's ``scudnn``.
_FP32_KERNEL = re.compile(r"sgemm|scudnn", re.IGNORECASE)


@dataclass(frozen=True)
class HostMfu:
    """One host's MFU: per step and over its steps."""

    host: str
    device: str  # the device model ("" when unknown)
    devices: int  # devices that ran work (1 for a run on the host's CPU)
    precision: str  # the precision most model FLOPs ran in ("" unknown)
    peak_tflops: float | None  # per device
    peak_precision: str  # the precision whose table peak is used ("" for a given or stated one)
    peak_source: str  # "given", "profile", a data sheet, or "unknown"
    flops_source: str  # where the model FLOPs come from ("" none)
    steps: list[dict[str, Any]]  # step, ms, model_tflop, mfu
    model_tflop: float  # over the steps
    step_ms: float  # the steps' time
    mfu: float | None
    unknown: str = ""  # why ``mfu`` is None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "device": self.device, "devices": self.devices,
                "precision": self.precision, "peak_tflops": self.peak_tflops,
                "peak_precision": self.peak_precision, "peak_source": self.peak_source,
                "flops_source": self.flops_source, "model_tflop": self.model_tflop,
                "step_ms": self.step_ms, "mfu": self.mfu, "unknown": self.unknown,
                "notes": list(self.notes), "steps": list(self.steps)}


@dataclass(frozen=True)
class Mfu:
    """The run's MFU: over all hosts' steps, and per host."""

    hosts: list[HostMfu]
    mfu: float | None
    unknown: str  # why ``mfu`` is None ("" when known)
    peak_given_tflops: float | None  # the peak a user gave, per device

    def to_dict(self) -> dict[str, Any]:
        return {"mfu": self.mfu, "unknown": self.unknown,
                "peak_given_tflops": self.peak_given_tflops,
                "hosts": {h.host: h.to_dict() for h in self.hosts}}


def run_mfu(model: RunModel, xla: dict[str, XlaModel] | None = None,
            peak_tflops: float | None = None) -> Mfu:
    """The MFU of every host of ``model``; ``xla``: each host's XLA model, where it has XLA
    programs; ``peak_tflops``: the peak of one device a user gives (over any other)."""
    hosts = [host_mfu(h, (xla or {}).get(name), peak_tflops)
             for name, h in model.hosts.items()]
    known = [h for h in hosts if h.mfu is not None]
    if not known:
        reasons = sorted({h.unknown for h in hosts if h.unknown})
        return Mfu(hosts, None, " ".join(reasons) or "No host has steps.", peak_tflops)
    flops = sum(h.model_tflop for h in known)
    capacity = sum(h.step_ms / 1e3 * (h.peak_tflops or 0.0) * h.devices for h in known)
    unknown = "" if len(known) == len(hosts) else (
        f"Over {len(known)} of {len(hosts)} hosts (the others': "
        + " ".join(sorted({h.unknown for h in hosts if h.mfu is None})) + ")")
    return Mfu(hosts, flops / capacity if capacity > 0 else None, unknown, peak_tflops)


def host_mfu(h: HostModel, xla: XlaModel | None, peak_given: float | None) -> HostMfu:
    """One host's MFU."""
    steps = h.steps
    nums = steps.step_num.tolist()
    ms = [float(x) / 1e6 for x in steps.duration_ns.tolist()]
    active = sum(1 for v in h.devices.values() if len(v) and int(v[:, 0].sum()) > 0)
    devices = max(active, 1)
    notes: list[str] = []
    per_step: list[float] | None = None
    precision, source, device = "", "", ""
    stated: float | None = None
    xla_tf32: float | None = None  # share of the f32 model FLOPs XLA may run as TF32
    if xla is not None and xla.ops:
        per_step, precision, source, xla_tf32 = _xla_step_flops(xla, nums)
        summary = next((d for d in xla.devices if d.model), None)
        device = summary.model if summary else ""
        stated = next((d.peak_tflops for d in xla.devices if d.peak_source == "profile"), None)
    elif h.model_flops is not None:
        per_step = list(h.model_flops.step_flops)
        precision, source = h.model_flops.precision, h.model_flops.source
        if h.model_flops.uncounted:
            notes.append(f"{h.model_flops.uncounted} matmul/convolution/attention op(s) "
                         "without recorded shapes or arguments are left out.")
    if not device:
        device = next((n for n in h.overview.device_names
                       if device_peaks.lookup(n) is not None), "")
        device = device or (h.overview.device_names[0] if h.overview.device_names else "")
    table = device_peaks.lookup(device) if device else None
    peak_precision = ""  # a given or stated peak is for whatever precision it was meant for
    peak: float | None
    if peak_given is not None:
        peak, peak_source = peak_given, "given"
    elif stated is not None:
        peak, peak_source = stated, "profile"
    elif table is not None:
        peak_precision, peak = table.peak_for(precision)
        peak_source = table.source
        if precision == "fp32":
            kernels = tf32_share((k[0], g.total_ns) for k, g in h.kernels.groups.items())
            use_tf32, note = fp32_or_tf32(table, kernels, xla_tf32)
            if use_tf32:
                peak_precision, peak = table.peak_for("tf32")
            if note:
                notes.append(note)
    else:
        peak, peak_source = None, "unknown"
    rows = []
    for k, (num, t) in enumerate(zip(nums, ms, strict=True)):
        flops = per_step[k] if per_step is not None and k < len(per_step) else None
        mfu = (flops / (t / 1e3) / (peak * 1e12 * devices)
               if flops is not None and peak and t > 0 else None)
        rows.append({"step": int(num), "ms": t,
                     "model_tflop": None if flops is None else flops / 1e12, "mfu": mfu})
    total_flops = sum(per_step[:len(nums)]) if per_step is not None else 0.0
    total_ms = sum(ms)
    unknown = ""
    if not nums:
        unknown = f"Host {h.name}: no steps were found."
    elif per_step is None or total_flops <= 0:
        unknown = (f"Host {h.name}: its model FLOPs are unknown (no XLA program costs, and "
                   "no matmul, convolution or attention op with recorded shapes: profile "
                   "PyTorch with record_shapes=True).")
    elif not peak:
        unknown = (f"Host {h.name}: the peak of device {device or 'unknown'!r} at "
                   f"{precision or 'its precision'} is unknown (give it: --peak-tflops).")
    mfu_all = (total_flops / (total_ms / 1e3) / (peak * 1e12 * devices)
               if not unknown and peak else None)
    return HostMfu(h.name, device, devices, precision, peak, peak_precision, peak_source,
                   source, rows, total_flops / 1e12, total_ms, mfu_all, unknown, notes)


def fp32_or_tf32(table: device_peaks.DevicePeaks, kernels: float | None,
                 xla: float | None) -> tuple[bool, str]:
    """(whether FP32 work uses the TF32 peak, a sentence saying which and why) on a device
    with a TF32 figure. ``kernels``: the share of FP32 matrix kernels' time in TF32 ones
    (``tf32_share``), the direct evidence; ``xla``: the share of the f32 model FLOPs that XLA
    may run as TF32 (its precision config), which counts on NVIDIA GPUs where the kernel
    names do not tell."""
    if "tf32" not in table.tflops:
        return False, ""
    if kernels is not None and kernels > 0.5:
        return True, (f"FP32 work ran TF32: {100 * kernels:.0f}% of the FP32 matrix kernels' "
                      "time is in TF32 kernels, so the TF32 peak is used.")
    if kernels is None and xla is not None and xla > 0.5 and table.name.startswith("NVIDIA"):
        return True, (f"FP32 work ran TF32: {100 * xla:.0f}% of the f32 model FLOPs are XLA "
                      "dots at DEFAULT precision (or a TF32 algorithm), which XLA runs as "
                      "TF32 on NVIDIA GPUs, so the TF32 peak is used.")
    why = "the kernels run FP32" if kernels is not None else "nothing shows TF32"
    return False, (f"FP32 peak used: {why} (if the run used TF32, give the TF32 peak: "
                   "--peak-tflops).")


def tf32_share(kernels: Iterable[tuple[str, int]]) -> float | None:
    """Of the time in FP32 matrix kernels (``kernels``: (name, total ns) pairs), the share in
    TF32 ones; None where no kernel is of either kind."""
    tf32 = fp32 = 0
    for name, total in kernels:
        if _TF32_KERNEL.search(name):
            tf32 += total
        elif _FP32_KERNEL.search(name):
            fp32 += total
    return tf32 / (tf32 + fp32) if tf32 + fp32 > 0 else None


def _xla_step_flops(xla: XlaModel, nums: list[int]
                    ) -> tuple[list[float], str, str, float | None]:
    """(model FLOPs per step, the precision most ran in, their source, the share of the f32
    model FLOPs XLA may run as TF32 (None: no f32 matrix work)) of an XLA model."""
    index = {n: k for k, n in enumerate(nums)}
    per_step = [0.0] * len(nums)
    by_precision: dict[str, float] = {}
    f32_matrix = tf32 = 0.0
    estimated = False
    for o in xla.ops:
        if not o.flops_known or o.occurrences <= 0 or o.model_flops <= 0:
            continue
        estimated |= o.flops_estimated
        kind = _PRECISION_OF.get(o.flops_precision or o.precision, "")
        by_precision[kind] = by_precision.get(kind, 0.0) + o.model_flops
        if o.tf32 is not None:
            f32_matrix += o.model_flops
            tf32 += o.model_flops if o.tf32 else 0.0
        for step, occurrences, _ in o.steps:
            if step in index:
                per_step[index[step]] += o.model_flops * occurrences / o.occurrences
    precision = max(by_precision, key=lambda p: by_precision[p]) if by_precision else ""
    source = "XLA programs (counted from the HLO)" if estimated else \
        "XLA programs (the profile's model FLOPs)"
    return per_step, precision, source, tf32 / f32_matrix if f32_matrix > 0 else None
