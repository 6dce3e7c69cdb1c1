"""TensorFlow ``StepStats`` → the Chrome trace that TensorFlow's ``timeline`` module draws.

The layout is TensorFlow's, so that a trace made here and one made by
``tensorflow.python.client.timeline`` from the same step stats hold the same events:

* process 0 is ``Allocators`` (memory counters); then, per device in file order, a process
  ``<device> Compute`` (ops) and a process ``<device> Tensors`` (tensor objects);
* ops are ``X`` events of category ``Op`` named by op type, with args ``name``, ``op`` and
  ``input0``, ``input1``..., on "threads" that are lanes: each op goes to the first lane of its
  device whose last op ended before it started, so that a lane's ops never overlap;
* with ``show_dataflow``, a flow (``s`` → ``t``, category ``DataFlow``, named after the
  tensor) runs from the end of a tensor's producer to the start of each consumer on another
  lane or device;
* with ``show_memory``, each output tensor is an object (``N`` at its producer's start, an
  ``O`` snapshot with its description one microsecond before the producer ends, ``D`` at its
  last use), and each allocator a counter (category ``Memory``) of the bytes its live tensors
  requested, stepped at every creation and last use.

Times are the step stats' microseconds, as TensorFlow shows them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from stepscope.formats.step_stats_reader import read_step_stats

OP_TIMES = ("schedule", "gpu", "all")
_OP_LABEL = re.compile(r"(.*) = (.*)\((.*)\)")


@dataclass
class Node:
    """One node's execution as the timeline draws it (times in microseconds)."""

    name: str
    label: str
    start: int
    duration: int
    outputs: list[Any]  # NodeOutput messages
    lane: int = 0


@dataclass
class _Tensor:
    name: str
    object_id: int
    created: int
    pid: int
    allocator: str
    num_bytes: int
    unrefs: list[int] = field(default_factory=list)


def parse_op_label(label: str) -> tuple[str, str, list[str]]:
    """(node name, op type, inputs) of a ``"name = Op(in0, in1)"`` timeline label."""
    match = _OP_LABEL.match(label)
    if match is None:
        return "unknown", "unknown", []
    name, op, inputs = match.groups()
    return name, op, inputs.split(", ") if inputs else []


def parse_kernel_label(label: str, node_name: str) -> tuple[str, str]:
    """(node name, op type) of a GPU tracer's ``"kernel@@node:Op#..."`` label."""
    at, hash_ = label.find("@@"), label.find("#")
    if at >= 0 and hash_ >= 0 and at + 2 < hash_:
        node_name = label[at + 2:hash_]
    parts = [*node_name.split(":"), "unknown"]
    return parts[0], parts[1]


def is_gpu_trace_device(device: str) -> bool:
    """Whether a device's stats come from the GPU tracer (kernels per stream, copies)."""
    return "/stream:" in device or "/memcpy" in device


def _micros(node: Any) -> tuple[int, int]:
    """A node's start and duration in microseconds (from nanoseconds when only those exist)."""
    start, duration = int(node.all_start_micros), int(node.all_end_rel_micros)
    if start == 0 and node.all_start_nanos:
        start = int(node.all_start_nanos) // 1000
        duration = duration or int(node.all_end_rel_nanos) // 1000
    return start, duration


def device_nodes(step_stats: Any, op_time: str = "schedule") -> list[tuple[str, list[Node]]]:
    """Each device with its nodes, lanes assigned, op times adjusted as ``op_time`` asks."""
    if op_time not in OP_TIMES:
        raise ValueError(f"op_time must be one of {', '.join(OP_TIMES)}, not {op_time!r}")
    devices = [(d.device, [Node(n.node_name, n.timeline_label, *_micros(n), list(n.output))
                           for n in d.node_stats]) for d in step_stats.dev_stats]
    if op_time != "schedule":
        _kernel_op_times(devices, op_time)
    for _, nodes in devices:
        lane_ends = [0]
        for node in nodes:
            free = next((i for i, end in enumerate(lane_ends) if node.start > end), None)
            if free is None:
                free = len(lane_ends)
                lane_ends.append(0)
            lane_ends[free] = node.start + node.duration
            node.lane = free
    return devices


def _kernel_op_times(devices: list[tuple[str, list[Node]]], op_time: str) -> None:
    """Stretch (``all``) or move (``gpu``) host ops over the span of their GPU kernels."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for device, nodes in devices:
        if "/stream:all" not in device:
            continue
        for kernel in nodes:
            name, _ = parse_kernel_label(kernel.label, kernel.name)
            end = kernel.start + kernel.duration
            first[name] = min(first.get(name, kernel.start), kernel.start)
            last[name] = max(last.get(name, end), end)
    for device, nodes in devices:
        if "/stream:all" in device or "/job" not in device:
            continue
        for op in nodes:
            if op.name in first:
                end = max(last[op.name], op.start + op.duration)
                if op_time == "gpu":
                    op.start = first[op.name]
                op.duration = end - op.start


class _Trace:
    """The events of one trace, in TensorFlow's order: metadata first."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def process(self, pid: int, name: str) -> None:
        self.metadata.append({"name": "process_name", "ph": "M", "pid": pid,
                              "args": {"name": name}})

    def event(self, ph: str, cat: str, name: str, pid: int, tid: int, ts: int,
              **extra: Any) -> None:
        self.events.append({"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": tid,
                            "ts": ts, **extra})

    def to_dict(self) -> dict[str, Any]:
        return {"traceEvents": self.metadata + self.events}


def step_stats_to_trace(step_stats: Any, *, show_dataflow: bool = True,
                        show_memory: bool = False, op_time: str = "schedule") -> dict[str, Any]:
    """The Chrome trace (``{"traceEvents": [...]}``) of a StepStats message."""
    devices = device_nodes(step_stats, op_time)
    trace = _Trace()
    allocators_pid = 0
    trace.process(allocators_pid, "Allocators")
    compute_pid: dict[str, int] = {}
    tensors_pid: dict[str, int] = {}
    for device, _ in devices:
        # A device named twice keeps its later pids, as a dict keyed by name would.
        compute_pid[device] = len(trace.metadata)
        tensors_pid[device] = len(trace.metadata) + 1
        trace.process(compute_pid[device], f"{device} Compute")
        trace.process(tensors_pid[device], f"{device} Tensors")

    tensors: dict[str, _Tensor] = {}
    produced: dict[str, tuple[int, int, int]] = {}  # tensor → (time, pid, lane) it was made
    for device, nodes in devices:
        for node in nodes:
            end = node.start + node.duration
            for index, output in enumerate(node.outputs):
                name = f"{node.name}:{index}" if index else node.name
                alloc = output.tensor_description.allocation_description
                # Ids count the names seen so far; a name produced again (a loop) replaces
                # the earlier tensor under the next id, as TensorFlow's timeline does.
                tensor = _Tensor(name, len(tensors), node.start, tensors_pid[device],
                                 alloc.allocator_name, int(alloc.requested_bytes), [end])
                tensors[name] = tensor
                produced[name] = (end, compute_pid[device], node.lane)
                if show_memory:
                    trace.event("N", "Tensor", name, tensors_pid[device], node.lane, node.start,
                                id=tensor.object_id)
                    desc = str(output.tensor_description).replace('"', "")
                    trace.event("O", "Tensor", name, tensors_pid[device], node.lane, end - 1,
                                id=tensor.object_id,
                                args={"snapshot": {"tensor_description": desc}})

    next_flow = 0
    for device, nodes in devices:
        pid = compute_pid[device]
        gpu = is_gpu_trace_device(device)
        for node in nodes:
            args: dict[str, Any]
            inputs: list[str] = []
            if gpu:
                name, op = parse_kernel_label(node.label, node.name)
            elif node.name == "RecvTensor":
                name, op = node.name, "RecvTensor"
            else:
                name = node.name
                _, op, inputs = parse_op_label(node.label)
            args = {"name": name, "op": op}
            args.update({f"input{i}": x for i, x in enumerate(inputs)})
            trace.event("X", "Op", op, pid, node.lane, node.start, dur=node.duration, args=args)
            for input_name in inputs:
                if input_name not in tensors:
                    cut = input_name.rfind("/_")
                    if cut > 0:
                        input_name = input_name[:cut]
                consumed = tensors.get(input_name)
                if consumed is None:
                    continue  # a control input, or a tensor the step stats do not show
                consumed.unrefs.append(node.start + node.duration - 1)
                made_at, made_pid, made_lane = produced[input_name]
                if show_dataflow and (made_pid, made_lane) != (pid, node.lane):
                    trace.event("s", "DataFlow", input_name, made_pid, made_lane, made_at,
                                id=next_flow)
                    trace.event("t", "DataFlow", input_name, pid, node.lane, node.start,
                                id=next_flow)
                    next_flow += 1

    if show_memory:
        _memory_events(trace, tensors, allocators_pid)
    return trace.to_dict()


def _memory_events(trace: _Trace, tensors: dict[str, _Tensor], allocators_pid: int) -> None:
    """Tensor deletions, and a counter per allocator of the bytes live over time."""
    changes: dict[str, list[tuple[int, int, str]]] = {}
    for name, tensor in tensors.items():
        last_use = max(tensor.unrefs)
        trace.event("D", "Tensor", name, tensor.pid, 0, last_use, id=tensor.object_id)
        changes.setdefault(tensor.allocator, []).extend(
            [(tensor.created, tensor.num_bytes, name), (last_use, -tensor.num_bytes, name)])
    for allocator, steps in changes.items():
        live = 0
        for when, delta, _ in sorted(steps):
            live += delta
            trace.event("C", "Memory", allocator, allocators_pid, 0, when,
                        args={allocator: live})


class Timeline:
    """TensorFlow's ``timeline.Timeline``, without TensorFlow: a step's Chrome trace.

    ``step_stats`` is a StepStats or RunMetadata (TensorFlow's message or ours), their
    serialized bytes, or a ``.pb``/``.pbtxt`` file of either. ``graph`` is accepted for
    compatibility and, as in TensorFlow, not used.
    """

    def __init__(self, step_stats: Any, graph: Any = None) -> None:
        self._step_stats = read_step_stats(step_stats)
        self._graph = graph

    @property
    def step_stats(self) -> Any:
        """The StepStats message drawn (our own message class)."""
        return self._step_stats

    def to_trace(self, show_dataflow: bool = True, show_memory: bool = False,
                 op_time: str = "schedule") -> dict[str, Any]:
        """The trace as a JSON-ready dict."""
        return step_stats_to_trace(self._step_stats, show_dataflow=show_dataflow,
                                   show_memory=show_memory, op_time=op_time)

    def generate_chrome_trace_format(self, show_dataflow: bool = True,
                                     show_memory: bool = False,
                                     op_time: str = "schedule") -> str:
        """The trace as Chrome-trace JSON text, as TensorFlow's timeline writes it."""
        return json.dumps(self.to_trace(show_dataflow, show_memory, op_time), indent=4,
                          separators=(",", ": "))
