"""Roofline: each HLO op's operational intensity against its achieved FLOP/s, under the
device's roofs (peak FLOP/s, and peak bandwidth × intensity), for the whole run and per step.

Ops without FLOPs or bytes (unknown, or none: copies) cannot be placed on log–log axes and
are counted apart. Bandwidths are in GiB/s, as XProf shows them (the ridge point, FLOPs per
byte, does not depend on the unit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepscope.analysis.xla.hlo_op_stats import GIB, bound_by, device_dict, gib_per_s
from stepscope.analysis.xla.xla_model import OpMetrics, XlaModel


@dataclass
class Roofline:
    """Roofs and points, whole run (``step`` None) and per step."""

    device: dict[str, Any]
    peak_gflops_per_s: float | None
    peak_gbytes_per_s: float | None  # GiB/s
    ridge_point: float | None  # FLOPs per byte where the two roofs meet
    points: list[dict[str, Any]]
    steps: list[int]
    unplaced: int  # ops with unknown FLOPs or bytes
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "peak_gflops_per_s": self.peak_gflops_per_s,
                "peak_gbytes_per_s": self.peak_gbytes_per_s, "ridge_point": self.ridge_point,
                "points": self.points, "steps": self.steps, "unplaced": self.unplaced,
                "notes": self.notes}


def _point(o: OpMetrics, occurrences: int, self_ps: int, step: int | None,
           tflops: float | None, gbps: float | None) -> dict[str, Any] | None:
    # Log–log axes: an op without FLOPs (a copy) or bytes has no place on them.
    if not o.flops_known or o.flops <= 0 or o.hbm_rate_bytes <= 0 or self_ps <= 0 \
            or not o.occurrences:
        return None
    share = occurrences / o.occurrences
    flops, nbytes = o.flops * share, o.hbm_rate_bytes * share  # HBM's bytes, as XProf's
    seconds = self_ps / 1e12
    intensity = flops / nbytes
    return {"name": o.name, "module": o.module, "category": o.category, "step": step,
            "occurrences": occurrences, "self_ms": self_ps / 1e9,
            "operational_intensity": intensity, "gflops_per_s": flops / seconds / 1e9,
            "gbytes_per_s": nbytes / seconds / GIB,
            "bound_by": bound_by(intensity, flops, nbytes, tflops, gbps),
            "flops_estimated": o.flops_estimated}


def roofline(model: XlaModel) -> Roofline:
    """The roofline of a run's XLA model."""
    _, tflops, gbps = model.peaks()
    points: list[dict[str, Any]] = []
    unplaced = 0
    for o in model.ops:
        p = _point(o, o.occurrences, o.self_ps, None, tflops, gbps)
        if p is None:
            unplaced += 1
            continue
        points.append(p)
        for step, occ, ps in o.steps:
            sp = _point(o, occ, ps, step, tflops, gbps)
            if sp is not None:
                points.append(sp)
    peak = tflops * 1e3 if tflops else None
    ridge = peak / gbps if peak and gbps else None  # both per 10^9: FLOPs per byte
    return Roofline(device_dict(model), peak, gib_per_s(gbps), ridge, points,
                    list(model.steps), unplaced, list(model.notes))
