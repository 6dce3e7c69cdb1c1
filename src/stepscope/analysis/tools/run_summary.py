"""A run's summary: the small, versioned JSON a repository can keep as its performance baseline.

``summarize(model)`` reads the facts of a run model (the overview, op and kernel stats, the
memory profile and the pod viewer) and keeps what comparing two runs needs:

* the time of every step, for the run (a step lasts as long as its slowest host) and for each
  host, so that a diff can tell a change from noise;
* the step breakdown by category, in ms per step, and the input verdict;
* the top ops (host and device) and kernels, by time *per step*, so that runs of different
  lengths compare;
* the peak memory of each allocator, and of each XLA program where the caller knows it;
* the device, the framework (inferred from op names) and the versions the caller gives.

``RunSummary.to_dict``/``from_dict`` give the JSON form, documented in docs/diff-and-ci.md.
``from_dict`` reads every earlier version (``SUMMARY_VERSION`` is bumped whenever the form
changes) and refuses anything else with one sentence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stepscope.analysis.run_model import RunModel
from stepscope.analysis.run_model.framework_op_stats import DEVICE, HOST, IDLE, OpRow
from stepscope.analysis.run_model.overview_page import CATEGORIES
from stepscope.errors import StepscopeError

SUMMARY_SCHEMA = "stepscope.run_summary"
# Version 1: step times of the run only, no per-host step times, no XLA program peaks.
# Version 2: per-host step times ("hosts"), the straggler, XLA program peaks ("programs").
SUMMARY_VERSION = 2
TOP_OPS = 100  # ops kept per side (host, device)
TOP_KERNELS = 100
MAX_STEPS = 100_000  # step times kept per host; a longer profile keeps its first ones


class SummaryError(StepscopeError):
    """A summary.json cannot be read: not JSON of this schema, or of a newer version."""


@dataclass(frozen=True)
class OpTime:
    """One op (or kernel) of a run, by its time per step."""

    name: str
    type: str  # op type; for a kernel, the op that launched it ("" where unknown)
    side: str  # "Host" or "Device"; "Kernel" for kernels
    occurrences_per_step: float
    ms_per_step: float  # self time for ops, time for kernels

    @property
    def key(self) -> str:
        """What identifies the op across runs: its side and name."""
        return f"{self.side}:{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "side": self.side,
                "occurrences_per_step": self.occurrences_per_step,
                "ms_per_step": self.ms_per_step}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OpTime:
        return cls(str(d["name"]), str(d["type"]), str(d["side"]),
                   _number(d["occurrences_per_step"]), _number(d["ms_per_step"]))


@dataclass(frozen=True)
class MemoryPeak:
    """The peak of one allocator of one host (or of one XLA program's heap)."""

    name: str  # allocator, or XLA program
    host: str
    peak_bytes: int

    @property
    def key(self) -> str:
        return f"{self.host}/{self.name}" if self.host else self.name

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "peak_bytes": self.peak_bytes}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryPeak:
        return cls(str(d["name"]), str(d.get("host", "")), int(d["peak_bytes"]))


@dataclass(frozen=True)
class RunSummary:
    """What a diff or a regression check needs of one run (see the module docs)."""

    run: str
    created_by: str  # the stepscope version that wrote it
    device_type: str
    device_count: int
    device_names: tuple[str, ...]
    framework: str  # PyTorch, TensorFlow, JAX, XLA, Python, or "unknown"
    versions: Mapping[str, str]  # software → version, as the caller knew them
    steps_found_by: str
    step_num: tuple[int, ...]
    step_ms: tuple[float, ...]  # per step of the run (its slowest host)
    hosts: Mapping[str, tuple[float, ...]]  # host → its own step times, ms
    straggler: str | None  # the host (or device) most often the straggler
    straggler_counts: Mapping[str, int]
    breakdown_ms: Mapping[str, float]  # category → ms per step
    input_verdict: str  # highly, moderately, potentially, not
    input_percent: float | None
    ops: tuple[OpTime, ...]
    ops_truncated: bool  # whether ops beyond TOP_OPS per side were left out
    kernels: tuple[OpTime, ...]
    kernels_truncated: bool
    memory: tuple[MemoryPeak, ...]  # per allocator
    programs: tuple[MemoryPeak, ...] = ()  # XLA programs' peak heap, where known
    failed_hosts: Mapping[str, str] = field(default_factory=dict)

    @property
    def step_count(self) -> int:
        return len(self.step_ms)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``summary.json``), of version ``SUMMARY_VERSION``."""
        return {
            "schema": SUMMARY_SCHEMA, "version": SUMMARY_VERSION, "run": self.run,
            "created_by": self.created_by,
            "environment": {"device_type": self.device_type, "device_count": self.device_count,
                            "device_names": list(self.device_names),
                            "framework": self.framework, "versions": dict(self.versions)},
            "steps": {"found_by": self.steps_found_by, "step_num": list(self.step_num),
                      "ms": list(self.step_ms)},
            "hosts": {h: {"ms": list(t)} for h, t in self.hosts.items()},
            "straggler": {"most_often": self.straggler,
                          "counts": dict(self.straggler_counts)},
            "breakdown_ms_per_step": dict(self.breakdown_ms),
            "input": {"verdict": self.input_verdict, "percent": self.input_percent},
            "ops": {"truncated": self.ops_truncated, "rows": [o.to_dict() for o in self.ops]},
            "kernels": {"truncated": self.kernels_truncated,
                        "rows": [k.to_dict() for k in self.kernels]},
            "memory": [m.to_dict() for m in self.memory],
            "programs": [p.to_dict() for p in self.programs],
            "failed_hosts": dict(self.failed_hosts),
        }

    def table(self) -> dict[str, list[Any]]:
        """The ops and kernels by time per step, as columns."""
        rows = [*self.ops, *self.kernels]
        return {"side": [r.side for r in rows], "name": [r.name for r in rows],
                "type": [r.type for r in rows],
                "occurrences_per_step": [r.occurrences_per_step for r in rows],
                "ms_per_step": [r.ms_per_step for r in rows]}

    @classmethod
    def from_dict(cls, data: Any) -> RunSummary:
        """A summary from its JSON form, of this version or an earlier one; a SummaryError
        (one sentence) for anything else."""
        if not isinstance(data, dict) or data.get("schema") != SUMMARY_SCHEMA:
            raise SummaryError("This is not a stepscope run summary (no \"schema\": "
                               f"\"{SUMMARY_SCHEMA}\"); write one with `stepscope summary RUN "
                               "-o summary.json`.")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise SummaryError("This run summary has no valid \"version\"; write it again "
                               "with `stepscope summary`.")
        if version > SUMMARY_VERSION:
            raise SummaryError(f"This run summary is of version {version}, newer than this "
                               f"stepscope reads ({SUMMARY_VERSION}); upgrade stepscope.")
        try:
            return _from_dict(_upgrade(data, version))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
            raise SummaryError(f"This run summary (version {version}) is damaged "
                               f"({type(err).__name__}: {err}); write it again with "
                               "`stepscope summary`.") from err


def _number(value: Any) -> float:
    """A finite float from JSON (a bool or NaN is not one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError("expected a finite number")
    return out


def _upgrade(data: dict[str, Any], version: int) -> dict[str, Any]:
    """The JSON form of an older version, brought to the current one."""
    if version == 1:
        # Version 1 had the run's step times only: they stand for its one host; it knew no
        # straggler and no XLA program peaks.
        env = data["environment"]
        hosts = env.get("host_names") or ["(all hosts)"]
        ms = data["steps"]["ms"]
        data = {**data, "hosts": {str(hosts[0]): {"ms": ms}} if len(hosts) == 1 else {},
                "straggler": {"most_often": None, "counts": {}}, "programs": []}
    return data


def _from_dict(d: dict[str, Any]) -> RunSummary:
    env, steps = d["environment"], d["steps"]
    step_ms = tuple(_number(x) for x in steps["ms"])
    step_num = tuple(int(x) for x in steps["step_num"])
    if len(step_ms) != len(step_num):
        raise ValueError("steps.ms and steps.step_num differ in length")
    strag = d["straggler"]
    return RunSummary(
        run=str(d["run"]), created_by=str(d.get("created_by", "")),
        device_type=str(env["device_type"]), device_count=int(env["device_count"]),
        device_names=tuple(str(n) for n in env["device_names"]),
        framework=str(env.get("framework", "unknown")),
        versions={str(k): str(v) for k, v in dict(env.get("versions", {})).items()},
        steps_found_by=str(steps.get("found_by", "")), step_num=step_num, step_ms=step_ms,
        hosts={str(h): tuple(_number(x) for x in v["ms"]) for h, v in d["hosts"].items()},
        straggler=None if strag["most_often"] is None else str(strag["most_often"]),
        straggler_counts={str(k): int(v) for k, v in strag["counts"].items()},
        breakdown_ms={str(k): _number(v) for k, v in d["breakdown_ms_per_step"].items()},
        input_verdict=str(d["input"]["verdict"]),
        input_percent=(None if d["input"]["percent"] is None
                       else _number(d["input"]["percent"])),
        ops=tuple(OpTime.from_dict(o) for o in d["ops"]["rows"]),
        ops_truncated=bool(d["ops"]["truncated"]),
        kernels=tuple(OpTime.from_dict(k) for k in d["kernels"]["rows"]),
        kernels_truncated=bool(d["kernels"]["truncated"]),
        memory=tuple(MemoryPeak.from_dict(m) for m in d["memory"]),
        programs=tuple(MemoryPeak.from_dict(p) for p in d.get("programs", [])),
        failed_hosts={str(k): str(v) for k, v in dict(d.get("failed_hosts", {})).items()})


def summarize(model: RunModel, *, stragglers: Mapping[str, int] | None = None,
              versions: Mapping[str, str] | None = None, created_by: str = "",
              programs: Mapping[str, int] | None = None) -> RunSummary:
    """The summary of a run model. ``stragglers`` (host or device → steps it was the
    straggler of: the pod viewer's), ``versions`` (software → version) and ``programs`` (XLA
    program → peak heap bytes) are facts the run model does not hold: the caller's, if any."""
    ov = model.overview_dict()
    per_step = ov["steps"]["per_step"][:MAX_STEPS]
    n_steps = len(ov["steps"]["per_step"])
    per = max(n_steps, 1)  # without steps, "per step" is per profile
    hosts = {name: tuple(float(s["ms"]) for s in h["steps"]["per_step"][:MAX_STEPS])
             for name, h in ov["hosts"].items()}
    ops = model.op_stats()
    op_rows: list[OpTime] = []
    truncated = False
    for side in (HOST, DEVICE):
        rows = [r for r in ops.side(side) if r.type != IDLE]
        rows.sort(key=lambda r: (-r.self_ns, r.name))
        truncated |= len(rows) > TOP_OPS
        op_rows.extend(_op_time(r, per) for r in rows[:TOP_OPS])
    kernels = _kernel_times(model, per)
    counts = {str(k): int(v) for k, v in (stragglers or {}).items()}
    straggler = (max(counts, key=lambda u: (counts[u], -list(counts).index(u)))
                 if len(counts) > 1 and any(counts.values()) else None)
    memory = tuple(
        MemoryPeak(str(a["name"]), str(a["host"]), int(a["peak_bytes_in_use"]))
        for a in model.memory_dict()["allocators"])
    env = ov["environment"]
    found_by = ov["steps"]["found_by"]
    return RunSummary(
        run=model.run, created_by=created_by, device_type=str(env["device_type"]),
        device_count=int(env["device_count"]),
        device_names=tuple(str(n) for n in env["device_names"]),
        framework=framework_of(ops.rows, found_by), versions=dict(versions or {}),
        steps_found_by=found_by if isinstance(found_by, str) else "/".join(found_by),
        step_num=tuple(int(s["step_num"]) for s in per_step),
        step_ms=tuple(float(s["ms"]) for s in per_step), hosts=hosts,
        straggler=straggler, straggler_counts=counts if len(counts) > 1 else {},
        breakdown_ms={c: float(ov["breakdown_ms"][c]) for c in CATEGORIES},
        input_verdict=str(ov["input"]["verdict"]),
        input_percent=(None if ov["input"]["percent"] is None
                       else float(ov["input"]["percent"])),
        ops=tuple(op_rows), ops_truncated=truncated,
        kernels=tuple(kernels[:TOP_KERNELS]), kernels_truncated=len(kernels) > TOP_KERNELS,
        memory=memory,
        programs=tuple(MemoryPeak(name, "", int(b)) for name, b in sorted(
            (programs or {}).items())),
        failed_hosts=dict(model.failed))


def _op_time(r: OpRow, per: int) -> OpTime:
    return OpTime(r.name, r.type, r.host_or_device, r.occurrences / per, r.self_ns / 1e6 / per)


def _kernel_times(model: RunModel, per: int) -> list[OpTime]:
    """Kernels by name (launch shapes and ops merged), by time per step, largest first."""
    totals: dict[str, list[Any]] = {}
    for r in model.kernel_stats().rows:
        entry = totals.setdefault(r.kernel, [0.0, 0, {}])
        entry[0] += r.total_us
        entry[1] += r.occurrences
        entry[2][r.op] = entry[2].get(r.op, 0.0) + r.total_us
    out = [OpTime(name, max(ops, key=lambda o: (ops[o], o)) if ops else "", "Kernel",
                  count / per, us / 1e3 / per)
           for name, (us, count, ops) in totals.items()]
    out.sort(key=lambda k: (-k.ms_per_step, k.name))
    return out


def framework_of(rows: list[OpRow], found_by: Any) -> str:
    """The framework that wrote the profile, as its op names and step markers tell."""
    names = [r.name for r in rows[:2000]]
    types = {r.type for r in rows[:2000]}
    if found_by == "profiler_step" or any(n.startswith(("aten::", "autograd::")) for n in names):
        return "PyTorch"
    if any(n.startswith(("jit_", "jit(", "pjit", "PjitFunction")) for n in names):
        return "JAX"
    if "Dataset" in types or any(":" not in n and r.type != r.name and r.type[:1].isupper()
                                 and "/" in r.name for n, r in zip(names, rows, strict=False)):
        return "TensorFlow"
    if any(r.host_or_device == DEVICE and r.type in _HLO_OPCODES for r in rows[:2000]):
        return "XLA"  # compiled by XLA, but by JAX or TensorFlow the op names do not say
    host = [r for r in rows if r.host_or_device == HOST]
    if host and all(r.type == r.name for r in host):
        return "Python"
    return "unknown"


# HLO opcodes that only XLA programs' device ops carry as their type.
_HLO_OPCODES = frozenset((
    "fusion", "custom-call", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
    "collective-permute", "copy-start", "copy-done", "convolution", "dot", "while",
    "dynamic-update-slice", "dynamic-slice", "get-tuple-element"))
