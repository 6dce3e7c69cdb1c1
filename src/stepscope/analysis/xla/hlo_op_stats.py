"""HLO op stats: one row per HLO op with its time, FLOP rate, bandwidth and what bounds it.

Rates are over the op's self time; operational intensity is FLOPs per byte accessed. An op
is compute-bound when its intensity reaches the device's ridge point (peak FLOP/s ÷ peak
bandwidth), memory-bound below it, and "other" when neither FLOPs nor bytes are known
(or the device's peaks are not).

Bandwidths (``gbytes_per_s``, ``peak_gbytes_per_s``) are in GiB/s (2^30 bytes per second),
the unit XProf's "GB/s" columns use, so the figures equal XProf's. Bandwidth utilisation is
bytes/s ÷ the peak in bytes/s, capped at 1 where an op's counted bytes exceed what the peak
allows in its time (its bytes were partly served from caches), as XProf caps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.xla import device_peaks
from stepscope.analysis.xla.xla_model import OpMetrics, XlaModel

PS_PER_MS = 1e9
GIB = float(2**30)  # bytes in a GiB: the unit of every bandwidth shown


def gib_per_s(gbps: float | None) -> float | None:
    """A peak in 10^9 bytes/s (as devices and data sheets state it) in GiB/s."""
    return gbps * 1e9 / GIB if gbps else None


def bandwidth_utilization(nbytes: float, seconds: float, gbps: float | None) -> float | None:
    """Bytes per second over the peak (10^9 bytes/s), never above 1; None when unknown."""
    if not nbytes or not gbps or seconds <= 0:
        return None
    return min(nbytes / seconds / (gbps * 1e9), 1.0)


@dataclass
class HloOpStats:
    """Every HLO op's row, by self time, with the device the rates are judged against."""

    rows: list[dict[str, Any]]
    device: dict[str, Any]
    total_ms: float
    idle_ms: float
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "total_ms": self.total_ms, "idle_ms": self.idle_ms,
                "ops": self.rows, "notes": self.notes}


def device_dict(model: XlaModel) -> dict[str, Any]:
    """The device the figures are judged against: name and peaks (None: unknown)."""
    name, tflops, gbps = model.peaks()
    source = model.devices[0].peak_source if model.devices else "unknown"
    bw_source = model.devices[0].bandwidth_source if model.devices else "unknown"
    table = device_peaks.lookup(name) if name else None
    return {"name": name or (model.devices[0].name if model.devices else ""),
            # Bandwidth in GiB/s (see the module docstring); each peak names its source.
            "peak_tflops": tflops, "peak_gbytes_per_s": gib_per_s(gbps), "peak_source": source,
            "peak_bandwidth_source": bw_source,
            # The published peak per precision (utilisation uses ``peak_tflops``).
            "peak_tflops_by_precision": dict(table.tflops) if table else {},
            "count": len(model.devices)}


def bound_by(intensity: float | None, flops: float, nbytes: float,
             tflops: float | None, gbps: float | None) -> str:
    """"compute", "memory" or "other" (see the module docstring)."""
    if flops <= 0 and nbytes <= 0:
        return "other"
    if nbytes <= 0:
        return "compute"
    if flops <= 0:
        return "memory"
    if not tflops or not gbps or intensity is None:
        return "other"
    return "compute" if intensity >= tflops * 1e3 / gbps else "memory"


def op_row(o: OpMetrics, total_ps: int, tflops: float | None, gbps: float | None
           ) -> dict[str, Any]:
    """One op's figures as the tools show them."""
    seconds = o.self_ps / 1e12
    gflops = o.flops / seconds / 1e9 if seconds > 0 and o.flops_known else None
    # XProf's HBM rate and HBM utilisation count HBM bytes by two rules (an op whose
    # breakdown is empty: every byte for the rate, none for the utilisation).
    hbm = o.hbm_rate_bytes
    gbytes = hbm / seconds / GIB if seconds > 0 and hbm else None
    intensity = o.flops / o.bytes_accessed if o.bytes_accessed > 0 and o.flops_known else None
    return {
        "name": o.name, "module": o.module, "program_id": o.program_id,
        "category": o.category, "occurrences": o.occurrences,
        # Times the op ran: fewer than occurrences where each run is several kernels (GPU).
        "executions": o.executions,
        "total_ms": o.total_ps / PS_PER_MS, "avg_ms": o.total_ps / PS_PER_MS / o.occurrences
        if o.occurrences else 0.0,
        "self_ms": o.self_ps / PS_PER_MS,
        "time_percent": 100.0 * o.self_ps / total_ps if total_ps else 0.0,
        "flops": o.flops if o.flops_known else None,
        "model_flops": o.model_flops if o.flops_known else None,
        "transcendentals": o.transcendentals,
        "bytes_accessed": o.bytes_accessed or None,
        "gflops_per_s": gflops, "gbytes_per_s": gbytes,
        "operational_intensity": intensity,
        "flops_utilization": gflops / (tflops * 1e3) if gflops is not None and tflops
        else None,
        # 0 where the profile's breakdown puts none of the op's bytes in HBM, as XProf.
        "bandwidth_utilization": 0.0 if o.hbm_bytes == 0.0 and gbps and seconds > 0
        else bandwidth_utilization(o.hbm_traffic, seconds, gbps),
        "bound_by": bound_by(intensity, o.flops if o.flops_known else 0.0, o.bytes_accessed,
                             tflops, gbps),
        "flops_estimated": o.flops_estimated,
        "expression": o.expression, "shape": o.shape, "tf_op": o.tf_op, "source": o.source,
        "padding_percent": o.padding_percent,
    }


def hlo_op_stats(model: XlaModel) -> HloOpStats:
    """The HLO op stats of a run's XLA model."""
    _, tflops, gbps = model.peaks()
    total = model.total_ps()
    rows = [op_row(o, total, tflops, gbps) for o in model.ops]
    return HloOpStats(rows, device_dict(model), total / PS_PER_MS,
                      model.idle_ps() / PS_PER_MS, list(model.notes))


CSV_COLUMNS = ("name", "module", "program_id", "category", "occurrences", "executions",
               "total_ms", "avg_ms", "self_ms", "time_percent", "flops", "model_flops",
               "transcendentals", "bytes_accessed", "gflops_per_s",
               "gbytes_per_s", "operational_intensity", "flops_utilization",
               "bandwidth_utilization", "bound_by", "flops_estimated", "padding_percent",
               "tf_op", "source", "expression")


def hlo_op_stats_csv(stats: dict[str, Any]) -> str:
    """The rows of an HLO op stats JSON form as CSV (blank where a figure is unknown)."""
    return csv_text(CSV_COLUMNS, (["" if row.get(c) is None else row[c] for c in CSV_COLUMNS]
                                   for row in stats["ops"]))
