"""The XLA model of a run: every HLO op's time, FLOPs and bytes, over all hosts and devices.

Built once from each host's XLA op executions (``model.xla_ops``) and their programs' HLO;
the op profile, HLO op stats and roofline tools are pure functions of it. Op identity is
(program, HLO op name). Times are summed over every device that ran the op, as XProf does;
a device's time is the span of its XLA work, and what its ops leave of it is idle.

FLOPs and bytes come from the profile where it records them (TPU: ``flops``, and
``model_flops``, the FLOPs the model asked for, rematerialisation left out), else are
estimated from the HLO (``hlo_cost``), and flagged so. An op whose program has no readable
HLO, or a custom call whose work cannot be counted (an FFI kernel), keeps its time with its
FLOPs unknown; the notes say so.

``XlaModel.to_dict``/``from_dict`` give the lossless JSON form the cache keeps.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.xla import device_peaks
from stepscope.analysis.xla.hlo_cost import (
    category_of,
    cost_of,
    expression,
    flops_known,
    flops_precision,
    fused_ops,
    tf32_allowed,
)
from stepscope.model.hlo import HloModule
from stepscope.model.xla_ops import COMMAND_BUFFER, XlaHostOps

I64 = NDArray[np.int64]
XLA_MODEL_VERSION = 5  # 5: command buffers' kernels by HLO op, steps of absolute-time
# files; 4: HBM bytes (TPU), TF32 per op; 3: model FLOPs, library GEMMs


@dataclass
class FusedOp:
    """One instruction a fusion runs (for expanding a fusion in the op profile)."""

    name: str
    opcode: str
    expression: str
    flops: float  # per execution of the fusion, estimated


@dataclass
class OpMetrics:
    """One HLO op over the whole run."""

    program_id: str
    module: str
    name: str
    category: str
    occurrences: int
    total_ps: int
    self_ps: int
    flops: float  # over all occurrences (0 where unknown)
    bytes_accessed: float
    flops_known: bool  # recorded by the profiler or estimated from the HLO
    flops_estimated: bool  # estimated from the HLO (the profile recorded none)
    expression: str = ""
    shape: str = ""  # output shape with layout
    precision: str = ""  # output element type
    tf_op: str = ""  # the framework op it came from
    source: str = ""  # file:line of the framework code, where recorded
    fused: list[FusedOp] = field(default_factory=list)
    steps: list[list[int]] = field(default_factory=list)  # [step_num, occurrences, self_ps]
    padding_percent: float | None = None  # memory the output's tiled layout adds, where tiled
    executions: int = 0  # times the op ran (occurrences count kernels: several per run)
    model_flops: float = 0.0  # over all occurrences: recorded ``model_flops``, else ``flops``
    transcendentals: float = 0.0  # over all occurrences, estimated from the HLO
    flops_precision: str = ""  # element type its FLOPs are done in (a dot's input's)
    # Over all occurrences: bytes read from and written to HBM, where the profile breaks
    # bytes down by memory space (TPU's ``memory_access_breakdown``; 0 for an empty one);
    # None where it does not, and every byte counts as HBM's.
    hbm_bytes: float | None = None
    # Whether XLA on an NVIDIA GPU may run its f32 matrix work as TF32 (``tf32_allowed``);
    # None: no f32 matrix work, or no HLO.
    tf32: bool | None = None

    @property
    def hbm_traffic(self) -> float:
        """HBM bytes as XProf's op profile counts them: the breakdown's (0 where it is
        empty), else every byte accessed."""
        return self.bytes_accessed if self.hbm_bytes is None else self.hbm_bytes

    @property
    def hbm_rate_bytes(self) -> float:
        """HBM bytes as XProf's HLO op stats and roofline count them for the HBM rate: the
        breakdown's, else (no breakdown, or an empty one) every byte accessed."""
        return self.hbm_bytes or self.bytes_accessed


@dataclass
class DeviceSummary:
    """One device that ran XLA ops, with the peaks used for utilisation."""

    host: str
    name: str
    model: str  # "" when unknown
    busy_ps: int  # span of its XLA work
    peak_tflops: float | None
    peak_gbytes_per_s: float | None  # 10^9 bytes/s
    peak_source: str  # of the FLOP/s peak: "profile", a published source, or "unknown"
    # Of the bandwidth peak: "profile" (stated by the profile: the device reported it), a
    # published source, or "unknown".
    bandwidth_source: str = "unknown"


_SIXTEEN_BIT_TYPES = frozenset({"bf16", "f16"})


@dataclass
class XlaModel:
    """Every HLO op of a run, the devices that ran them and the programs they belong to."""

    ops: list[OpMetrics]
    devices: list[DeviceSummary]
    programs: list[dict[str, Any]]  # {program_id, name, hlo (bool), error}
    notes: list[str]
    steps: list[int]

    @property
    def has_data(self) -> bool:
        return bool(self.ops)

    def total_ps(self) -> int:
        """All devices' XLA time, idle included."""
        return int(sum(d.busy_ps for d in self.devices))

    def busy_ps(self) -> int:
        return int(sum(o.self_ps for o in self.ops))

    def idle_ps(self) -> int:
        return max(self.total_ps() - self.busy_ps(), 0)

    def peaks(self) -> tuple[str, float | None, float | None]:
        """(device model, peak TFLOP/s, peak GB/s) of the run's first device."""
        if not self.devices:
            return "", None, None
        d = self.devices[0]
        return d.model, d.peak_tflops, d.peak_gbytes_per_s

    def gpu_precision(self) -> dict[str, float] | None:
        """Device compute precision from the ops' own types, where they ran on a GPU (None
        elsewhere): the share of their time in ops whose work is done in a 16-bit type (a
        dot's or library GEMM's input type, else the output's). The kernel names the
        overview reads otherwise do not tell it: cuBLAS's ``nvjet`` GEMMs name no type, and
        a command buffer's kernels run under one op (XProf, reading the kernels, says 0%
        16-bit for a bf16 JAX program)."""
        ops = [o for o in self.ops if o.self_ps > 0 and (o.flops_precision or o.precision)]
        total = sum(o.self_ps for o in ops)
        if not total or not any(d.name.startswith("/device:GPU") for d in self.devices):
            return None
        sixteen = sum(o.self_ps for o in ops
                      if (o.flops_precision or o.precision) in _SIXTEEN_BIT_TYPES)
        return {"16bit_percent": 100.0 * sixteen / total,
                "32bit_percent": 100.0 - 100.0 * sixteen / total}

    def to_dict(self) -> dict[str, Any]:
        return {"version": XLA_MODEL_VERSION, "ops": [asdict(o) for o in self.ops],
                "devices": [asdict(d) for d in self.devices], "programs": self.programs,
                "notes": self.notes, "steps": self.steps}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> XlaModel:
        """The inverse of ``to_dict``; KeyError/TypeError/ValueError for a foreign form."""
        if d.get("version") != XLA_MODEL_VERSION:
            raise ValueError("not an XLA model of this version")
        ops = []
        for o in d["ops"]:
            o = dict(o)
            o["fused"] = [FusedOp(**f) for f in o["fused"]]
            ops.append(OpMetrics(**o))
        return cls(ops, [DeviceSummary(**x) for x in d["devices"]], list(d["programs"]),
                   [str(n) for n in d["notes"]], [int(s) for s in d["steps"]])


@dataclass
class HostSteps:
    """A host's steps (from the run model), to give each op execution its step."""

    step_num: I64
    start_ns: I64
    end_ns: I64


def build_xla_model(hosts: dict[str, XlaHostOps],
                    steps: dict[str, HostSteps] | None = None) -> XlaModel:
    """The XLA model of the given hosts' op executions."""
    merged: dict[tuple[str, str], OpMetrics] = {}
    devices: list[DeviceSummary] = []
    programs: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    step_nums: set[int] = set()
    per_op_step: dict[tuple[str, str], dict[int, list[int]]] = {}
    for host, x in hosts.items():
        for pid, name in x.module_names.items():
            programs.setdefault(pid, {"program_id": pid, "name": name,
                                      "hlo": pid in x.modules, "error": x.bad_modules.get(pid)})
        for dev in x.devices:
            model = device_peaks.identify(dev.kind, dev.props)
            devices.append(_device_summary(host, dev.name, model, dev.busy_end_ps -
                                           dev.busy_start_ps, dev.peak_tflops,
                                           dev.peak_hbm_gbytes_per_s, dev.props))
        if not len(x):
            continue
        self_ps = _self_times(x)
        n = len(x.ops)
        occ = np.bincount(x.op, minlength=n)
        total = np.bincount(x.op, weights=x.duration_ps, minlength=n)
        selft = np.bincount(x.op, weights=self_ps, minlength=n)
        per_step = _per_step(x, self_ps, (steps or {}).get(host))
        for i, op in enumerate(x.ops):
            if not occ[i]:
                continue
            key = (op.program_id or op.module, op.name)
            row = merged.get(key)
            if row is None:
                row = merged[key] = _describe(op, x)
            row.occurrences += int(occ[i])
            row.executions += x.executions.get(i, int(occ[i]))
            row.total_ps += int(round(total[i]))
            row.self_ps += int(round(selft[i]))
            acc = per_op_step.setdefault(key, {})
            for s, (o, t) in per_step.get(i, {}).items():
                step_nums.add(s)
                entry = acc.setdefault(s, [s, 0, 0])
                entry[1] += o
                entry[2] += t
    for key, row in merged.items():
        unit_flops, unit_bytes = row.flops, row.bytes_accessed  # per execution so far
        # FLOPs are done once per execution, however many kernels it runs (XProf multiplies
        # them by kernels); bytes are counted per kernel, as XProf counts them (each kernel
        # of a multi-kernel op, an im2col and its GEMM, reads and writes memory).
        row.flops = unit_flops * row.executions
        row.bytes_accessed = unit_bytes * row.occurrences
        if row.hbm_bytes is not None:
            row.hbm_bytes *= row.occurrences
        row.model_flops *= row.executions
        row.transcendentals *= row.executions
        row.steps = [per_op_step[key][s] for s in sorted(per_op_step.get(key, {}))]
    bad = [p for p in programs.values() if p["error"]]
    for p in bad:
        notes.append(f"Program {p['name']} ({p['program_id']}): its HLO could not be read "
                     f"({p['error']}); its ops have times only.")
    absent = sorted({o.module or o.program_id for o in merged.values()
                     if (o.program_id and o.program_id not in programs)
                     or (not o.program_id and o.module not in
                         {p["name"] for p in programs.values()})})
    if absent:
        notes.append("No HLO in the profile for program(s) " + ", ".join(absent)
                     + ": their ops have times only, no FLOPs or bytes.")
    named = {p["program_id"] for p in programs.values() if p["hlo"]} | {
        p["name"] for p in programs.values() if p["hlo"]}
    lost = [o for o in merged.values() if o.category == "unknown"
            and (o.program_id or o.module) in named]
    if lost:
        notes.append(f"{len(lost)} op(s) are not in their program's HLO (e.g. "
                     f"{lost[0].name}): times only.")
    if any(o.flops_estimated for o in merged.values()):
        notes.append("FLOPs and bytes are estimated from the HLO (the profile records none).")
    if devices and all(d.peak_tflops is None for d in devices):
        notes.append(f"Unknown peak for device {devices[0].model or devices[0].name}: "
                     "utilisation is left blank.")
    ops = sorted(merged.values(), key=lambda o: (-o.self_ps, o.module, o.name))
    return XlaModel(ops, devices, sorted(programs.values(), key=lambda p: p["name"]), notes,
                    sorted(step_nums))


def _device_summary(host: str, name: str, model: str, busy: int, stated_tflops: float | None,
                    stated_gbps: float | None, props: dict[str, Any]) -> DeviceSummary:
    table = device_peaks.lookup(model) if model else None
    tflops = stated_tflops if stated_tflops else (table.peak_tflops() if table else None)
    gbps = stated_gbps
    bw_source = "profile" if gbps is not None else "unknown"
    bandwidth = props.get("memory_bandwidth")  # bytes/s, as GPU planes state it
    if gbps is None and isinstance(bandwidth, int) and bandwidth > 0:
        gbps, bw_source = bandwidth / 1e9, "profile (device-reported memory_bandwidth)"
    if gbps is None and table is not None:
        gbps, bw_source = table.gbytes_per_s, table.source
    source = "profile" if stated_tflops else (table.source if table else "unknown")
    return DeviceSummary(host, name, model, int(busy), tflops, gbps, source, bw_source)


def _describe(op: Any, x: XlaHostOps) -> OpMetrics:
    """A fresh row for ``op``: category, cost per execution, text, from profile and HLO."""
    stats = op.stats
    module = x.modules.get(op.program_id) if op.program_id else None
    if module is None or (op.module and module.name != op.module):
        # Some profilers' program ids do not key the metadata plane: match by name instead.
        module = next((m for pid, m in x.modules.items()
                       if op.module and x.module_names.get(pid) == op.module), module)
    inst = module.instruction(op.name) if module is not None else None
    if inst is None and module is not None and COMMAND_BUFFER.match(op.name):
        return _buffer_metrics(op, module, x)
    recorded = "flops" in stats
    flops = _number(stats.get("flops"))
    nbytes = _number(stats.get("bytes_accessed"))
    estimated = countable = False
    transcendentals = 0.0
    if inst is not None and module is not None:
        cost = cost_of(module, inst)
        transcendentals = cost.transcendentals
        if not recorded:
            flops, estimated, countable = cost.flops, True, flops_known(inst)
        if "bytes_accessed" not in stats:
            nbytes = cost.bytes_accessed
    model_flops = _number(stats["model_flops"]) if "model_flops" in stats else flops
    category = str(stats.get("hlo_category") or (category_of(inst) if inst else "unknown"))
    shape = str(stats.get("shape_with_layout") or (inst.shape.text() if inst else ""))
    text = str(stats.get("expression") or (expression(module, inst) if inst and module
                                           else ""))
    tf_op = str(stats.get("tf_op") or (inst.op_name if inst else ""))
    source = str(stats.get("source") or "")
    if not source and inst is not None and inst.source_file:
        source = f"{inst.source_file}:{inst.source_line}"
    fused = [] if inst is None or module is None else [
        FusedOp(f.name, f.opcode, expression(module, f), cost_of(module, f).flops)
        for f in fused_ops(module, inst)]
    precision = ""
    compute_type = flops_precision(module, inst) if inst is not None and module is not None \
        else ""
    if inst is not None:  # a custom call's result is the first of its (result, scratch)
        first = inst.shape.tuple_shapes[0] if inst.shape.is_tuple and inst.shape.tuple_shapes \
            else inst.shape
        precision = "" if first.is_tuple else first.element_type
    padding = None
    if inst is not None and inst.shape.tiles and inst.shape.elements():
        padding = 100.0 * (inst.shape.padded_elements() / inst.shape.elements() - 1.0)
    hbm = stats.get("hbm_bytes_accessed")
    tf32 = tf32_allowed(module, inst) if inst is not None and module is not None else None
    return OpMetrics(op.program_id, op.module, op.name, category, 0, 0, 0, flops, nbytes,
                     recorded or countable, estimated, text, shape, precision, tf_op, source,
                     fused, padding_percent=padding, model_flops=model_flops,
                     transcendentals=transcendentals, flops_precision=compute_type,
                     hbm_bytes=float(hbm) if isinstance(hbm, int) else None, tf32=tf32)


def _buffer_metrics(op: Any, module: HloModule, x: XlaHostOps) -> OpMetrics:
    """A command buffer's row: what its program computes outside the ops the profile names
    on their own (the program's entry computation less those), shared among the program's
    buffers, per run. Its kernels are the program's fusions and library calls, which the
    buffer hides (the HLO the profile keeps predates it); bytes are not told."""
    entry = module.computation(module.entry_computation_id) or next(
        (c for c in module.computations if c.name == module.entry_computation_name), None)
    mine = [o for o in x.ops if (o.program_id, o.module) == (op.program_id, op.module)]
    outside = {o.name for o in mine if module.instruction(o.name) is not None}
    buffers = max(sum(1 for o in mine if COMMAND_BUFFER.match(o.name)), 1)
    inside = [i for i in (entry.instructions if entry is not None else [])
              if i.name not in outside]
    costs = [cost_of(module, i) for i in inside]
    flops = sum(c.flops for c in costs) / buffers
    heaviest = max(zip(costs, inside, strict=True), key=lambda ci: ci[0].flops,
                   default=None)
    precision = flops_precision(module, heaviest[1]) if heaviest and heaviest[0].flops else ""
    return OpMetrics(op.program_id, op.module, op.name, "command buffer", 0, 0, 0, flops, 0.0,
                     bool(inside), True, "", "", "", "", "", [], model_flops=flops,
                     transcendentals=sum(c.transcendentals for c in costs) / buffers,
                     flops_precision=precision)


def _number(value: Any) -> float:
    """A recorded count as a finite, non-negative float (0 for anything else)."""
    try:
        number = float(value) if value is not None else 0.0
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0


def _self_times(x: XlaHostOps) -> I64:
    """Each execution's time less that of executions nested in it on the same row.

    Only host threads (XLA:CPU) nest ops; on a device an op's self time is its time (kernels
    of one stream may overlap a little, and that is not nesting), as XProf counts it."""
    self_ps = x.duration_ps.copy()
    host = np.array([not d.name.startswith("/device:") for d in x.devices] + [False], bool)
    if not host[x.device].any():
        return self_ps
    order = np.lexsort((-x.duration_ps, x.start_ps, x.line, x.device))
    order = order[host[x.device[order]]]
    row = (x.device.astype(np.int64) << 32) | x.line.astype(np.int64)
    srow, start = row[order], x.start_ps[order]
    end = start + x.duration_ps[order]
    same = srow[1:] == srow[:-1]
    if not np.any(same & (start[1:] < np.maximum.accumulate(end)[:-1])):
        return self_ps  # nothing nests (the usual case): no per-event work
    stack: list[int] = []
    for k in range(len(order)):
        while stack and (srow[stack[-1]] != srow[k] or end[stack[-1]] <= start[k]):
            stack.pop()
        if stack:
            parent = order[stack[-1]]
            self_ps[parent] -= min(end[k], end[stack[-1]]) - start[k]
        stack.append(k)
    return np.maximum(self_ps, 0)


def _per_step(x: XlaHostOps, self_ps: I64, steps: HostSteps | None
              ) -> dict[int, dict[int, tuple[int, int]]]:
    """op index → step number → (occurrences, self ps), for executions inside a step."""
    if steps is None or not len(steps.step_num):
        return {}
    start_ns = x.origin_ns + x.start_ps // 1000
    pos = np.searchsorted(steps.start_ns, start_ns, side="right") - 1
    inside = (pos >= 0) & (start_ns < steps.end_ns[np.clip(pos, 0, None)])
    out: dict[int, dict[int, tuple[int, int]]] = {}
    keys = np.stack([x.op[inside].astype(np.int64), steps.step_num[pos[inside]]], axis=1)
    if not len(keys):
        return out
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    occ = np.bincount(inverse, minlength=len(uniq))
    ps = np.bincount(inverse, weights=self_ps[inside], minlength=len(uniq))
    for (op, step), o, t in zip(uniq.tolist(), occ.tolist(), ps.tolist(), strict=True):
        out.setdefault(op, {})[step] = (int(o), int(round(t)))
    return out
