"""TensorFlow ``StepStats`` (one ``session.run``) → a host's EventTable, like any profile.

What the table holds, for the analyses that read it:

* **One step.** A root event ``session.run`` (``step_num=0``, ``_r=1``) on the host plane's
  ``session.run`` line spans every node of the run.
* **Ops.** Each node of a device that is not the GPU tracer's is an event named
  ``<node>:<OpType>`` (TensorFlow's name for a host op) on ``/host:CPU``, one line per device
  and lane (lanes as TensorFlow's timeline assigns them, so a line's ops never overlap), with
  stats ``long_name`` (the timeline label), ``device``, and ``scheduled_ns`` where known.
* **Flows.** A node whose output another node reads has a ``_p`` stat (its flow id); each
  reader has a ``_c`` stat per tensor it reads (the producer's id), as XSpace links producers
  and consumers; inputs are matched by name as TensorFlow's timeline matches them.
* **GPU tracer devices** (``.../device:GPU:<n>/stream:<s>``, ``.../memcpy``) become the plane
  ``/device:GPU:<n>`` with a line per stream; each kernel is named by its kernel (or node) name
  with a ``tf_op`` stat ``<node>:<OpType>``. The ``stream:all`` summary is left out where
  per-stream devices are present, so that no kernel counts twice.
* **Memory.** Every allocation record of a node is a ``MemoryAllocation`` (bytes > 0) or
  ``MemoryDeallocation`` event on the host plane's ``Memory <allocator>`` line, with XProf's
  stats: ``allocator_name``, ``bytes_allocated`` (bytes the step has allocated and not freed on
  that allocator, after this record, raised where needed so that it never goes below zero:
  memory allocated before the step is not in the records), ``peak_bytes_in_use`` (the largest
  ``bytes_allocated`` so far), ``bytes_reserved`` (0: not recorded), ``requested_bytes`` and
  ``allocation_bytes`` (the record's size), ``tf_op`` (``<node>:<OpType>``), and where an output
  of the node has that size on that allocator, ``region_type`` ``output``, ``data_type`` and
  ``tensor_shape``.
* **Times** are nanoseconds since the epoch: the ``*_nanos`` fields where the stats have them,
  else microseconds × 1000.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.formats import xspace_columns as xc
from stepscope.formats.step_stats_proto import TensorDescription
from stepscope.formats.step_stats_reader import check_step_stats, read_step_stats
from stepscope.formats.step_stats_to_chrome_trace import (
    device_nodes,
    is_gpu_trace_device,
    parse_kernel_label,
    parse_op_label,
)
from stepscope.formats.tf_timeline_to_step_stats import (
    SOURCE_TF_TIMELINE,
    tf_timeline_to_step_stats,
)
from stepscope.formats.xplane_builder import PlaneBuilder, add_plane, new_space
from stepscope.formats.xspace_to_tables import from_columns
from stepscope.model import schema
from stepscope.model.events import EventTable

STEP_EVENT = "session.run"
STEP_LINE = "session.run"
MEMORY_ALLOCATION = "MemoryAllocation"
MEMORY_DEALLOCATION = "MemoryDeallocation"
SOURCE_STEP_STATS = "step_stats"
_GPU_OF_DEVICE = re.compile(r"/device:GPU:(\d+)", re.IGNORECASE)
_STREAM = re.compile(r"/stream:(\w+)")
_STEP_LINE_ID = -1


@dataclass
class _Placed:
    """A node as it goes into the table: where, when (ns) and under which name."""

    device: str
    node: Any  # NodeExecStats
    lane: int
    start_ns: int
    duration_ns: int
    name: str  # node name
    op: str
    inputs: list[str]


def _times_ns(node: Any) -> tuple[int, int]:
    if node.all_start_nanos > 0:
        return int(node.all_start_nanos), int(node.all_end_rel_nanos or
                                              node.all_end_rel_micros * 1000)
    start = int(node.all_start_micros)
    if start == 0 and node.all_start_nanos:
        start = int(node.all_start_nanos) // 1000
    return start * 1000, int(node.all_end_rel_micros) * 1000


def _place(step_stats: Any) -> list[_Placed]:
    lanes = device_nodes(step_stats)
    out = []
    for (device, nodes), dev in zip(lanes, step_stats.dev_stats, strict=True):
        gpu = is_gpu_trace_device(device)
        for drawn, node in zip(nodes, dev.node_stats, strict=True):
            start, duration = _times_ns(node)
            inputs: list[str] = []
            if gpu:
                name, op = parse_kernel_label(node.timeline_label, node.node_name)
            elif node.node_name == "RecvTensor":
                name, op = node.node_name, "RecvTensor"
            else:
                name = node.node_name
                _, op, inputs = parse_op_label(node.timeline_label)
            out.append(_Placed(device, node, drawn.lane, start, duration, name, op, inputs))
    return out


def _flow_ids(placed: list[_Placed]) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Producer flow ids (``_p``) and the ids each consumer reads (``_c``), by node index."""
    producer_of: dict[str, int] = {}
    for i, p in enumerate(placed):
        for index in range(len(p.node.output)):
            producer_of[f"{p.node.node_name}:{index}" if index else p.node.node_name] = i
    produces: dict[int, int] = {}
    reads: dict[int, list[int]] = {}
    for i, p in enumerate(placed):
        if is_gpu_trace_device(p.device) or p.name == "RecvTensor":
            continue
        for name in p.inputs:
            if name not in producer_of:
                cut = name.rfind("/_")
                if cut > 0:
                    name = name[:cut]
            j = producer_of.get(name)
            if j is None or j == i:
                continue
            produces.setdefault(j, j + 1)
            reads.setdefault(i, []).append(j + 1)
    return produces, reads


def _shape_text(desc: Any) -> str:
    if desc.shape.unknown_rank:
        return "<unknown>"
    return "(" + ",".join(str(d.size) for d in desc.shape.dim) + ")"


def _dtype_text(desc: Any) -> str:
    try:
        name = str(TensorDescription.DataType.Name(desc.dtype))
    except ValueError:
        return str(desc.dtype)
    return name[3:].lower() if name.startswith("DT_") else name


# An allocation recorded further than this from its op's start is not believed.
_ALLOC_TIME_SLACK_NS = 86_400 * 10**9


def _memory(space_plane: PlaneBuilder, placed: list[_Placed]) -> None:
    """Allocation records as MemoryAllocation/MemoryDeallocation events, a line per
    allocator (line ids -2, -3, ...: below the step's line, apart from the device lanes)."""
    records: dict[str, list[tuple[int, int, int, str, Any]]] = {}
    replaced = 0
    for order, p in enumerate(placed):
        outputs: dict[tuple[str, int], Any] = {}
        for out in p.node.output:
            alloc = out.tensor_description.allocation_description
            outputs.setdefault((alloc.allocator_name, int(alloc.requested_bytes)),
                               out.tensor_description)
        for used in p.node.memory:
            for rec in used.allocation_records:
                if rec.alloc_bytes == 0:
                    continue
                desc = outputs.get((used.allocator_name, abs(int(rec.alloc_bytes))))
                when = int(rec.alloc_micros) * 1000
                if abs(when - p.start_ns) > _ALLOC_TIME_SLACK_NS:
                    # 0 or 1 (unset) or absurd: the op's own start is the best we know, and
                    # a time years from the step's would overflow the line's offsets.
                    when = p.start_ns
                    replaced += 1
                records.setdefault(used.allocator_name, []).append(
                    (when, order, int(rec.alloc_bytes), f"{p.name}:{p.op}", desc))
    if replaced:
        space_plane.add_plane_stat(schema.REPLACED_ALLOCATION_TIMES, replaced)
    for number, (allocator, recs) in enumerate(sorted(records.items())):
        recs.sort(key=lambda r: (r[0], r[1]))
        live, lowest, running = 0, 0, []
        for _, _, size, _, _ in recs:
            live += size
            running.append(live)
            lowest = min(lowest, live)
        line = space_plane.add_line(_STEP_LINE_ID - 1 - number, f"Memory {allocator}",
                                    recs[0][0])
        peak = 0
        for (when, _, size, tf_op, desc), in_use in zip(recs, running, strict=True):
            in_use -= lowest
            peak = max(peak, in_use)
            stats: dict[str, Any] = {
                "allocator_name": allocator, "bytes_allocated": in_use, "bytes_reserved": 0,
                "peak_bytes_in_use": peak, "requested_bytes": abs(size),
                "allocation_bytes": abs(size), "tf_op": tf_op,
                "region_type": "output" if desc is not None else "",
                "data_type": _dtype_text(desc) if desc is not None else "",
                "tensor_shape": _shape_text(desc) if desc is not None else "",
            }
            name = MEMORY_ALLOCATION if size > 0 else MEMORY_DEALLOCATION
            space_plane.add_event(line, name, when, 0, stats)


def step_stats_to_space(step_stats: Any, *, hostname: str = "",
                        source_format: str = SOURCE_STEP_STATS) -> Any:
    """An XSpace message holding one session.run's step stats (see the module docstring)."""
    placed = _place(step_stats)
    space = new_space(hostname)
    if not hostname:  # the file's name will tell the host
        del space.hostnames[:]
    host = add_plane(space, schema.HOST_PLANE_ID, schema.HOST_PLANE)
    begin = min((p.start_ns for p in placed), default=0)
    end = max((p.start_ns + p.duration_ns for p in placed), default=0)

    step_line = host.add_line(_STEP_LINE_ID, STEP_LINE, begin)
    host.add_event(step_line, STEP_EVENT, begin, end - begin,
                   {schema.STEP_NUM: 0, schema.ROOT_LEVEL: 1})
    produces, reads = _flow_ids(placed)

    lines: dict[tuple[str, int], Any] = {}
    gpu_planes: dict[int, PlaneBuilder] = {}
    per_stream = {m.group(1) for d in step_stats.dev_stats
                  if "/stream:" in d.device and "/stream:all" not in d.device
                  and (m := _GPU_OF_DEVICE.search(d.device))}
    devices = list(dict.fromkeys(d.device for d in step_stats.dev_stats))
    for i, p in enumerate(placed):
        if is_gpu_trace_device(p.device):
            match = _GPU_OF_DEVICE.search(p.device)
            gpu = int(match.group(1)) if match else 0
            if "/stream:all" in p.device and str(gpu) in per_stream:
                continue
            plane = gpu_planes.get(gpu)
            if plane is None:
                plane = gpu_planes[gpu] = add_plane(space, gpu + 1,
                                                    f"{schema.GPU_PLANE_PREFIX}{gpu}")
            key = (p.device, 0)
            if key not in lines:
                stream = _STREAM.search(p.device)
                name = f"Stream #{stream.group(1)}" if stream else \
                    p.device.rsplit("/", 1)[-1]
                lines[key] = plane.add_line(devices.index(p.device) + 1, name, begin)
            label = p.node.timeline_label
            kernel = label.split("@@", 1)[0] if "@@" in label else p.node.node_name
            plane.add_event(lines[key], kernel or p.name, p.start_ns, p.duration_ns,
                            {"tf_op": f"{p.name}:{p.op}", "device": p.device})
            continue
        key = (p.device, p.lane)
        if key not in lines:
            short = p.device.rsplit("/", 1)[-1] if "/device:" in p.device else p.device
            lines[key] = host.add_line((devices.index(p.device) + 1) * 10_000 + p.lane,
                                       f"{short} lane {p.lane}", begin)
        stats: dict[str, Any] = {"long_name": p.node.timeline_label or p.name,
                                 "device": p.device}
        if p.node.scheduled_nanos > 0:
            stats["scheduled_ns"] = int(p.node.scheduled_nanos)
        elif p.node.scheduled_micros > 0:
            stats["scheduled_ns"] = int(p.node.scheduled_micros) * 1000
        event = host.add_event(lines[key], f"{p.name}:{p.op}", p.start_ns, p.duration_ns,
                               stats)
        if i in produces:
            host.set_stat(event.stats.add(), "_p", produces[i])
        for producer in reads.get(i, []):
            host.set_stat(event.stats.add(), "_c", producer)

    _memory(host, placed)
    env = add_plane(space, schema.TASK_ENV_PLANE_ID, schema.TASK_ENV_PLANE)
    env.add_plane_stat(schema.ENV_SOURCE_FORMAT, source_format)
    env.add_plane_stat(schema.ENV_PROFILE_START_TIME, begin)
    env.add_plane_stat(schema.ENV_PROFILE_STOP_TIME, end)
    env.add_plane_stat("devices", ", ".join(devices))
    return space


def step_stats_to_table(step_stats: Any, *, hostname: str = "", source: str = "<step stats>",
                        source_format: str = SOURCE_STEP_STATS) -> EventTable:
    """A host's event table of one session.run's step stats."""
    space = step_stats_to_space(step_stats, hostname=hostname, source_format=source_format)
    return from_columns(xc.decode_columns(space.SerializeToString(), source))


def load_step_stats(path: str | Path) -> EventTable:
    """Load a RunMetadata or StepStats file (binary or text) into an event table."""
    return step_stats_to_table(read_step_stats(path), source=str(path))


def tf_timeline_to_table(doc: dict[str, Any], path: str | Path) -> EventTable:
    """The event table of a parsed TensorFlow timeline trace (``ctf.json``)."""
    stats = check_step_stats(tf_timeline_to_step_stats(doc, str(path)), str(path))
    return step_stats_to_table(stats, source=str(path), source_format=SOURCE_TF_TIMELINE)
