"""A Chrome trace written by TensorFlow's ``timeline`` module (``ctf.json``) → the StepStats it
was drawn from, as far as the trace tells them, so that it loads like step stats.

What comes back: a device per ``<device> Compute`` process, a node per ``Op`` event (its
``name`` and ``op`` args, a timeline label ``name = op(input0, input1, ...)``, start and
duration in microseconds, the lane as thread id). Where the trace has tensor objects
(``show_memory``), each tensor becomes an output of the node that made it (dtype, shape,
requested bytes and allocator from its snapshot), and its life (created, last used) two
allocation records of that node. Flows and counters are not needed: flows follow from the
inputs, counters from the tensors.
"""

from __future__ import annotations

import re
from itertools import takewhile
from typing import Any

from stepscope.errors import ProfileFormatError
from stepscope.formats.step_stats_proto import StepStats, TensorDescription
from stepscope.formats.step_stats_to_chrome_trace import is_gpu_trace_device

SOURCE_TF_TIMELINE = "tf_timeline"
_COMPUTE = " Compute"
_TENSORS = " Tensors"
_ALLOCATORS = "Allocators"
_DEVICE = re.compile(r"^/(job|device)[:/]")
_DTYPE = re.compile(r"\bdtype: (\w+)")
_DIM = re.compile(r"\bsize: (-?\d+)")
_REQUESTED = re.compile(r"\brequested_bytes: (\d+)")
_ALLOCATED = re.compile(r"\ballocated_bytes: (\d+)")
_ALLOCATOR = re.compile(r"\ballocator_name: (\S+)")


def _process_names(events: list[dict[str, Any]]) -> dict[Any, str]:
    return {e.get("pid"): str(e["args"]["name"]) for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"
            and isinstance(e.get("args"), dict) and isinstance(e["args"].get("name"), str)}


def is_tf_timeline(doc: dict[str, Any]) -> bool:
    """Whether a parsed Chrome trace is one that TensorFlow's timeline module wrote."""
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return False
    # TensorFlow writes every process name first: a trace that starts otherwise (Kineto's)
    # is told apart without a pass over its events.
    names = _process_names(list(takewhile(lambda e: isinstance(e, dict) and e.get("ph") == "M",
                                          events)))
    computes = [n for n in names.values() if n.endswith(_COMPUTE)
                and _DEVICE.match(n[:-len(_COMPUTE)])]
    if not computes or _ALLOCATORS not in names.values():
        return False
    return all(e.get("cat") == "Op" for e in events if e.get("ph") == "X")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ProfileFormatError(f"{what} is not a number ({value!r}).")
    if abs(value) >= 2**62:
        raise ProfileFormatError(f"{what} is out of range ({value!r}).")
    return int(value)


def _description(text: str) -> Any:
    """A TensorDescription from a snapshot's text (TensorFlow removed its quotes)."""
    desc = TensorDescription()
    dtype = _DTYPE.search(text)
    if dtype and dtype.group(1) in TensorDescription.DataType.keys():  # noqa: SIM118
        # (an enum wrapper, not a dict; a type newer than our list is left out)
        desc.dtype = TensorDescription.DataType.Value(dtype.group(1))
    for size in _DIM.findall(text):
        desc.shape.dim.add(size=int(size))
    alloc = desc.allocation_description
    for pattern, attr in ((_REQUESTED, "requested_bytes"), (_ALLOCATED, "allocated_bytes")):
        found = pattern.search(text)
        if found:
            setattr(alloc, attr, int(found.group(1)))
    allocator = _ALLOCATOR.search(text)
    if allocator:
        alloc.allocator_name = allocator.group(1)
    return desc


def tf_timeline_to_step_stats(doc: dict[str, Any], what: str = "the trace") -> Any:
    """The StepStats message that a TensorFlow timeline trace shows (see the module doc)."""
    events = doc["traceEvents"]
    names = _process_names(events)
    device_of = {pid: n[:-len(_COMPUTE)] for pid, n in names.items() if n.endswith(_COMPUTE)}
    tensors_of = {pid: n[:-len(_TENSORS)] for pid, n in names.items() if n.endswith(_TENSORS)}
    stats = StepStats()
    devices: dict[str, Any] = {}
    nodes: dict[tuple[str, str], list[Any]] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        device = device_of.get(e.get("pid"))
        if device is None:
            raise ProfileFormatError(
                f"{what}: an op on pid {e.get('pid')!r}, which is no device's Compute process.")
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        name, op = str(args.get("name", e.get("name", ""))), str(args.get("op", e.get("name")))
        if device not in devices:
            devices[device] = stats.dev_stats.add(device=device)
        node = devices[device].node_stats.add()
        inputs: list[str] = []
        while f"input{len(inputs)}" in args:
            inputs.append(str(args[f"input{len(inputs)}"]))
        if is_gpu_trace_device(device):
            node.node_name = f"{name}:{op}"
        else:
            node.node_name = name
            node.timeline_label = f"{name} = {op}({', '.join(inputs)})"
        node.all_start_micros = _int(e.get("ts"), f"{what}: the ts of op {name!r}")
        node.all_end_rel_micros = _int(e.get("dur", 0), f"{what}: the dur of op {name!r}")
        tid = e.get("tid", 0)
        node.thread_id = tid if isinstance(tid, int) and 0 <= tid < 2**32 else 0
        nodes.setdefault((device, name), []).append(node)
    _tensors(events, tensors_of, nodes, what)
    return stats


def _tensors(events: list[dict[str, Any]], tensors_of: dict[Any, str],
             nodes: dict[tuple[str, str], list[Any]], what: str) -> None:
    """Tensor objects → outputs and allocation records of the nodes that made them."""
    created: dict[Any, tuple[str, str, int]] = {}
    deleted: dict[Any, int] = {}
    snapshots: dict[Any, str] = {}
    for e in events:
        ph, device = e.get("ph"), tensors_of.get(e.get("pid"))
        if device is None or ph not in ("N", "O", "D") or e.get("cat") != "Tensor":
            continue
        key = (e.get("pid"), e.get("id"))
        when = _int(e.get("ts"), f"{what}: the ts of tensor {e.get('name')!r}")
        if ph == "N":
            created[key] = (device, str(e.get("name", "")), when)
        elif ph == "D":
            deleted[key] = when
        else:
            snap = e.get("args", {}).get("snapshot") if isinstance(e.get("args"), dict) else None
            if isinstance(snap, dict) and isinstance(snap.get("tensor_description"), str):
                snapshots[key] = snap["tensor_description"]
    for key, (device, tensor, when) in created.items():
        node_name = tensor.rsplit(":", 1)[0] if re.search(r":\d+$", tensor) else tensor
        candidates = nodes.get((device, node_name), [])
        node = next((n for n in candidates if n.all_start_micros == when),
                    candidates[0] if candidates else None)
        if node is None:
            continue
        desc = _description(snapshots.get(key, ""))
        node.output.add(slot=len(node.output)).tensor_description.CopyFrom(desc)
        alloc = desc.allocation_description
        used = next((m for m in node.memory if m.allocator_name == alloc.allocator_name), None)
        if used is None:
            used = node.memory.add(allocator_name=alloc.allocator_name)
        used.allocation_records.add(alloc_micros=when, alloc_bytes=alloc.requested_bytes)
        if key in deleted:
            used.allocation_records.add(alloc_micros=deleted[key],
                                        alloc_bytes=-alloc.requested_bytes)
