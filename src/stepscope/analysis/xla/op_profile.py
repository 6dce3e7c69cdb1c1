"""Op profile: how the run's XLA programs spent device time, by program, category and op.

Shares are of all devices' XLA time, idle included (so categories, programs and idle add up
to 100 %). A group's utilisations are over its own time: achieved FLOP/s ÷ the device's
peak, bytes/s ÷ its peak bandwidth (capped at 100 %); blank where the peak or the FLOPs are
unknown. The whole profile's FLOPS utilisation is over busy time and its bandwidth
utilisation over all time, idle included, as XProf computes them. Where ops whose FLOPs are
unknown (custom calls we cannot count) hold most of the busy time, the headline says so:
``flops_coverage`` is the share of busy time whose FLOPs are known, and ``flops_note`` the
sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepscope.analysis.xla.hlo_op_stats import (
    PS_PER_MS,
    bandwidth_utilization,
    device_dict,
    op_row,
)
from stepscope.analysis.xla.xla_model import OpMetrics, XlaModel


@dataclass
class OpProfile:
    """The op profile's views of one run."""

    device: dict[str, Any]
    modules: list[str]
    total_ms: float
    idle_ms: float
    flops_utilization: float | None
    bandwidth_utilization: float | None
    categories: list[dict[str, Any]]
    programs: list[dict[str, Any]]
    ops: list[dict[str, Any]]
    notes: list[str]
    flops_coverage: float | None = None  # share of busy time in ops whose FLOPs are known
    flops_note: str = ""  # why the FLOPS utilisation speaks for part of the work only

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "modules": self.modules, "total_ms": self.total_ms,
                "idle_ms": self.idle_ms,
                "idle_percent": 100.0 * self.idle_ms / self.total_ms if self.total_ms else 0.0,
                "flops_utilization": self.flops_utilization,
                "bandwidth_utilization": self.bandwidth_utilization,
                "flops_coverage": self.flops_coverage, "flops_note": self.flops_note,
                "categories": self.categories, "programs": self.programs, "ops": self.ops,
                "notes": self.notes}


def _group(name: str, ops: list[OpMetrics], total_ps: int, tflops: float | None,
           gbps: float | None) -> dict[str, Any]:
    """A node of the profile (a category or a program) summing its ops."""
    self_ps = sum(o.self_ps for o in ops)
    seconds = self_ps / 1e12
    known = [o for o in ops if o.flops_known]
    flops = sum(o.flops for o in known)
    nbytes = sum(o.hbm_traffic for o in ops)
    fu = (flops / seconds / (tflops * 1e12)
          if known and tflops and seconds > 0 else None)
    bu = bandwidth_utilization(nbytes, seconds, gbps)
    return {"name": name, "time_ms": self_ps / PS_PER_MS,
            "time_percent": 100.0 * self_ps / total_ps if total_ps else 0.0,
            "flops_utilization": fu, "bandwidth_utilization": bu,
            "occurrences": sum(o.occurrences for o in ops),
            "flops_estimated": any(o.flops_estimated for o in ops),
            "ops": [o.name for o in sorted(ops, key=lambda o: -o.self_ps)]}


def op_profile(model: XlaModel, top: int | None = None) -> OpProfile:
    """The op profile of a run's XLA model; ``top`` keeps that many ops per group."""
    _, tflops, gbps = model.peaks()
    total = model.total_ps()
    by_category: dict[str, list[OpMetrics]] = {}
    # Programs apart by id, as XProf: a module compiled twice (other shapes, other options)
    # is two programs of one name.
    by_program: dict[tuple[str, str], list[OpMetrics]] = {}
    for o in model.ops:
        by_category.setdefault(o.category, []).append(o)
        by_program.setdefault((o.program_id, o.module or o.program_id), []).append(o)

    def cut(group: dict[str, Any]) -> dict[str, Any]:
        if top is not None:
            group["ops"] = group["ops"][:top]
        return group

    categories = sorted((cut(_group(c, ops, total, tflops, gbps))
                         for c, ops in by_category.items()), key=lambda g: -g["time_ms"])
    programs = []
    for (program_id, name), ops in by_program.items():
        group = _group(name, ops, total, tflops, gbps)
        group["program_id"] = program_id
        cats: dict[str, list[OpMetrics]] = {}
        for o in ops:
            cats.setdefault(o.category, []).append(o)
        group["categories"] = sorted((cut(_group(c, v, total, tflops, gbps))
                                      for c, v in cats.items()), key=lambda g: -g["time_ms"])
        del group["ops"]
        programs.append(group)
    programs.sort(key=lambda g: (-g["time_ms"], g["name"], g["program_id"]))
    rows = []
    for o in model.ops if top is None else _top_ops(model.ops, top, by_category):
        row = op_row(o, total, tflops, gbps)
        row["fused"] = [{"name": f.name, "opcode": f.opcode, "expression": f.expression,
                         "flops": f.flops} for f in o.fused]
        rows.append(row)
    overall = _group("", model.ops, total, tflops, gbps)
    # XProf's whole-profile bandwidth figure is over all devices' time, idle included.
    overall_bu = bandwidth_utilization(sum(o.hbm_traffic for o in model.ops),
                                       total / 1e12, gbps)
    coverage, note = flops_coverage(model.ops)
    return OpProfile(device_dict(model), sorted({p["name"] for p in programs}),
                     total / PS_PER_MS, model.idle_ps() / PS_PER_MS,
                     overall["flops_utilization"], overall_bu,
                     categories, programs, rows, list(model.notes), coverage, note)


# Below this share of busy time in ops with known FLOPs, a FLOPS figure speaks for a minority
# of the device's work, and says so.
MIN_FLOPS_COVERAGE = 0.5


def flops_coverage(ops: list[OpMetrics]) -> tuple[float | None, str]:
    """(share of the ops' time whose FLOPs are known, a sentence when that is a minority)."""
    busy = sum(o.self_ps for o in ops)
    if busy <= 0:
        return None, ""
    unknown = sorted((o for o in ops if not o.flops_known), key=lambda o: -o.self_ps)
    coverage = 1.0 - sum(o.self_ps for o in unknown) / busy
    if coverage >= MIN_FLOPS_COVERAGE:
        return coverage, ""
    names = ", ".join(o.name for o in unknown[:3])
    return coverage, (f"FLOPS utilisation counts {100 * coverage:.0f} % of the device's busy "
                      f"time: ops holding {100 * (1 - coverage):.0f} % have unknown FLOPs "
                      f"(e.g. {names}).")


def _top_ops(ops: list[OpMetrics], top: int,
             by_category: dict[str, list[OpMetrics]]) -> list[OpMetrics]:
    """The ``top`` ops overall and of each category, in self-time order."""
    keep = {id(o) for o in ops[:top]}
    for group in by_category.values():
        keep |= {id(o) for o in sorted(group, key=lambda o: -o.self_ps)[:top]}
    return [o for o in ops if id(o) in keep]
