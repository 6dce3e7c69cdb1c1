"""The pod viewer: each step's time on every host (or every device of one host), side by side,
and the stragglers that hold the others back.

Columns ("units") are the run's hosts; a run of one host with several active devices gets
one column per device instead. Each unit's step time is split into compute, input,
collectives, host↔device copies and other (on a device column: idle), from the run model's
per-host and per-device partitions, so a column adds up to the step time.

Stragglers: in a synchronous job every worker waits in a collective for the last one to
arrive, so a straggler spends the least time waiting. Per step, each unit's *work* is its
step time less its collective time (a device's idle time is not work either); the straggler
is the unit with the most work, its lead is how much more than the next unit's, and every
other unit's wait is what it spent in collectives up to that difference. This needs no clock
alignment: it compares durations, not times.

Clock alignment (reported, and used where times are lined up): hosts are shifted so that the
end of each step's last collective, which all ranks leave together, coincides with the first
host's (the median over common steps); without collectives, by the capture start when the
hosts' clocks are seconds apart (a capture asked of all workers at once starts within
milliseconds on each); else the clocks are taken as recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.run_model import POD_CATEGORIES, HostModel, RunModel, combined_steps

I64 = NDArray[np.int64]

# Capture starts further apart than this mean the hosts' clocks differ (a capture requested
# of several workers at once starts within milliseconds on each).
CLOCKS_APART_NS = 1_000_000_000
_FIELDS = tuple(f"{c}_ms" for c in POD_CATEGORIES)


@dataclass
class Alignment:
    """How one host's clock is shifted onto the reference host's."""

    shift_ns: int
    method: str  # reference, collective_end, capture_start, recorded, same_host
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"shift_ns": self.shift_ns, "method": self.method, "reason": self.reason}


@dataclass
class PodViewer:
    """Per step and unit (host or device): the step time by category, and the stragglers."""

    run: str
    path: str
    kind: str  # "hosts" or "devices"
    units: list[str]
    step_num: I64
    category_ns: I64  # step × unit × POD_CATEGORIES
    present: NDArray[np.bool_]  # step × unit
    straggler: I64  # per step: unit index (-1: none, fewer than two units have the step)
    lead_ns: I64  # per step
    wait_ns: I64  # step × unit: time in collectives spent waiting for the straggler
    alignment: dict[str, Alignment]
    failed: dict[str, str] = field(default_factory=dict)

    def straggler_counts(self) -> dict[str, int]:
        """Unit → number of steps in which it was the straggler."""
        counts = np.bincount(self.straggler[self.straggler >= 0], minlength=len(self.units))
        return {u: int(c) for u, c in zip(self.units, counts, strict=True)}

    def summary(self) -> str:
        """One sentence naming the straggler, if there is one."""
        if len(self.units) < 2:
            return (f"This run has one {'device' if self.kind == 'devices' else 'host'}: the "
                    "pod viewer compares several hosts or devices.")
        judged = int((self.straggler >= 0).sum())
        if judged == 0:
            return "No step was recorded on two or more hosts, so there is no straggler."
        counts = self.straggler_counts()
        worst = max(self.units, key=lambda u: (counts[u], -self.units.index(u)))
        mine = self.straggler == self.units.index(worst)
        lead = float(self.lead_ns[mine].mean()) / 1e6
        return (f"{worst} was the straggler in {counts[worst]} of {judged} steps "
                f"(by {lead:.3g} ms on average over the next {self._noun()}).")

    def _noun(self) -> str:
        return "device" if self.kind == "devices" else "host"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``stepscope pod --json``; keys documented in the README)."""
        steps = []
        for i, num in enumerate(self.step_num.tolist()):
            per: dict[str, Any] = {}
            for j, unit in enumerate(self.units):
                if self.present[i, j]:
                    figures = self.category_ns[i, j] / 1e6
                    per[unit] = {"total_ms": float(self.category_ns[i, j].sum()) / 1e6,
                                 **dict(zip(_FIELDS, figures.tolist(), strict=True)),
                                 "wait_ms": float(self.wait_ns[i, j]) / 1e6}
            s = int(self.straggler[i])
            steps.append({"step_num": int(num), "per_host": per,
                          "straggler": self.units[s] if s >= 0 else None,
                          "straggler_lead_ms": float(self.lead_ns[i]) / 1e6})
        totals = {}
        for j, unit in enumerate(self.units):
            mine = self.present[:, j]
            figures = self.category_ns[mine, j].sum(axis=0) / 1e6
            totals[unit] = {"total_ms": float(self.category_ns[mine, j].sum()) / 1e6,
                            **dict(zip(_FIELDS, figures.tolist(), strict=True)),
                            "wait_ms": float(self.wait_ns[mine, j].sum()) / 1e6,
                            "steps": int(mine.sum())}
        return {"run": self.run, "path": self.path, "kind": self.kind,
                "hosts": list(self.units), "categories": list(_FIELDS), "steps": steps,
                "totals": totals, "stragglers": self.straggler_counts(),
                "summary": self.summary(),
                "alignment": {h: a.to_dict() for h, a in self.alignment.items()},
                "failed_hosts": dict(self.failed)}


def pod_viewer(model: RunModel) -> PodViewer:
    """The pod viewer of a run model."""
    hosts = list(model.hosts.values())
    if len(hosts) == 1 and len(hosts[0].devices) >= 2:
        return _devices_view(model, hosts[0])
    combined = combined_steps(hosts)
    n_steps, n_units = len(combined.step_num), len(hosts)
    cats = np.zeros((n_steps, n_units, len(POD_CATEGORIES)), dtype=np.int64)
    for j, h in enumerate(hosts):
        rows = combined.index[:, j]
        have = rows >= 0
        part = h.pod_ns[rows[have]]
        # The host partition's columns: device compute, collectives, copy, input, host work,
        # rest; compute is the device's and the host's own work together.
        cats[have, j] = np.column_stack([part[:, 0] + part[:, 4], part[:, 3], part[:, 1],
                                         part[:, 2], part[:, 5]])
    work = cats.sum(axis=2) - cats[:, :, 2]
    straggler, lead, wait = _stragglers(work, cats[:, :, 2], combined.present)
    return PodViewer(model.run, model.path, "hosts", [h.name for h in hosts],
                     combined.step_num, cats, combined.present, straggler, lead, wait,
                     align(hosts), dict(model.failed))


def _devices_view(model: RunModel, host: HostModel) -> PodViewer:
    """One column per active device of a single host."""
    names = sorted(host.devices, key=_device_order)
    n_steps = len(host.steps)
    cats = np.zeros((n_steps, len(names), len(POD_CATEGORIES)), dtype=np.int64)
    for j, name in enumerate(names):
        part = host.devices[name]  # compute, collectives, copy, input, rest (idle)
        cats[:, j] = np.column_stack([part[:, 0], part[:, 3], part[:, 1], part[:, 2],
                                      part[:, 4]])
    present = np.ones((n_steps, len(names)), dtype=bool)
    # A device's idle time is not work: it waited, for the host or for the others.
    work = cats[:, :, 0] + cats[:, :, 1] + cats[:, :, 3]
    straggler, lead, wait = _stragglers(work, cats[:, :, 2], present)
    units = [f"{host.name}/{n}" for n in names]
    alignment = {host.name: Alignment(0, "same_host", "All devices of one host share its "
                                                      "clock.")}
    return PodViewer(model.run, model.path, "devices", units, host.steps.step_num.copy(),
                     cats, present, straggler, lead, wait, alignment, dict(model.failed))


def _device_order(name: str) -> tuple[str, int, str]:
    kind, _, number = name.partition(":")
    return (kind, int(number) if number.isdigit() else -1, name)


def _stragglers(work: I64, collectives: I64, present: NDArray[np.bool_]
                ) -> tuple[I64, I64, I64]:
    """Per step: the straggler (most work), its lead over the next, and the others' waits."""
    n_steps, n_units = work.shape
    straggler = np.full(n_steps, -1, dtype=np.int64)
    lead = np.zeros(n_steps, dtype=np.int64)
    wait = np.zeros((n_steps, n_units), dtype=np.int64)
    if n_units < 2 or n_steps == 0:
        return straggler, lead, wait
    masked = np.where(present, work, np.iinfo(np.int64).min)
    order = np.argsort(-masked, axis=1, kind="stable")
    judged = present.sum(axis=1) >= 2
    rows = np.flatnonzero(judged)
    first, second = order[rows, 0], order[rows, 1]
    straggler[rows] = first
    lead[rows] = work[rows, first] - work[rows, second]
    behind = np.maximum(work[rows, first][:, None] - work[rows], 0)
    wait[rows] = np.where(present[rows], np.minimum(collectives[rows], behind), 0)
    return straggler, lead, wait


def align(hosts: list[HostModel]) -> dict[str, Alignment]:
    """Each host's clock shift onto the first host's (see the module docstring)."""
    if not hosts:
        return {}
    ref = hosts[0]
    out = {ref.name: Alignment(0, "reference", "The other hosts are lined up on this one.")}
    for h in hosts[1:]:
        out[h.name] = _align_one(ref, h)
    return out


def _align_one(ref: HostModel, h: HostModel) -> Alignment:
    common, ref_at, h_at = np.intersect1d(ref.steps.step_num, h.steps.step_num,
                                          return_indices=True)
    if len(common) and len(ref.collective_end_ns) and len(h.collective_end_ns):
        ends_ref, ends_h = ref.collective_end_ns[ref_at], h.collective_end_ns[h_at]
        both = (ends_ref >= 0) & (ends_h >= 0)
        if both.any():
            shift = int(np.median(ends_ref[both] - ends_h[both]))
            return Alignment(shift, "collective_end",
                             f"The end of the last collective of {int(both.sum())} common "
                             "steps, which all ranks leave together.")
    if ref.profile_start_ns is not None and h.profile_start_ns is not None:
        apart = ref.profile_start_ns - h.profile_start_ns
        if abs(apart) > CLOCKS_APART_NS:
            return Alignment(apart, "capture_start",
                             f"No collectives; the captures started {abs(apart) / 1e9:.3g} s "
                             "apart by the hosts' clocks, so the clocks differ: lined up on "
                             "the shared capture start.")
        return Alignment(0, "recorded",
                         f"No collectives; the captures started {abs(apart) / 1e6:.3g} ms "
                         "apart, so the clocks are taken as recorded.")
    return Alignment(0, "recorded", "No collectives and no capture start recorded: the clocks "
                                    "are taken as recorded.")


CSV_COLUMNS = ("step_num", "host", "total_ms", *_FIELDS, "wait_ms", "straggler")


def pod_viewer_csv(data: dict[str, Any]) -> str:
    """One row per step and host of ``PodViewer.to_dict()``: its figures, and whether it was
    the step's straggler."""
    return csv_text(CSV_COLUMNS, (
        [step["step_num"], unit, f"{figures['total_ms']:.6f}",
         *(f"{figures[f]:.6f}" for f in _FIELDS), f"{figures['wait_ms']:.6f}",
         unit == step["straggler"]]
        for step in data["steps"] for unit, figures in step["per_host"].items()))
