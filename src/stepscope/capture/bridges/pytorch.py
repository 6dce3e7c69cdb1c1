"""PyTorch bridge: ``torch.profiler`` (Kineto) runs alongside the session; its events merge.

Kineto records aten ops (with input shapes), ``record_function`` annotations, memory
allocations and, where CUDA is present, the CUDA runtime calls on the host and the kernels,
copies and sets on the GPU. Its timestamps are wall-clock nanoseconds, the session's clock,
and its host events name their OS thread, the id stepscope gives its own thread lines, so
PyTorch's ops land on the same line as the user's ``Trace`` steps and nest inside them.

Host events keep their Kineto category in the ``kineto_category`` stat, so that the op
analyses count ``cpu_op`` and ``user_annotation`` events as ops and not the CUDA runtime
calls or memory records. GPU activity becomes one ``/device:GPU:<n>`` plane per device with a
line per stream, its kernels carrying XSpace's ``kernel_details`` and the ``correlation_id``
that joins each kernel to its launch.

Kineto's activity type (``cpu_op``, ``kernel``, ...) comes from ``_KinetoEvent.activity_type``
where PyTorch has it (2.12 on); before that it is told from what every version gives: the
event's device, its name (``[memory]``, Kineto's ``Activity Buffer …``, CUDA's
``cuda…``/``cu…`` API names, ``Memcpy``, ``Memset``) and ``is_user_annotation``. The device
planes carry the same stats as the planes that ``kineto_to_tables`` makes of Kineto's own
trace file (category, launch figures under Kineto's names, the device's properties), so one
analysis reads both. Where a PyTorch's events give no launch figures for kernels (2.11 on
CUDA), they are read from Kineto's own trace file of the recording (``launch_figures``).

The ``torch.profiler.profile`` object of the last session stays available from
``last_profiler()``, for ``key_averages()`` or ``export_chrome_trace`` on the same recording.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.capture.bridges import BridgeData, HostLine, version_tuple
from stepscope.capture.options import ProfilerOptions
from stepscope.errors import StepscopeError
from stepscope.formats import xplane_builder as xb
from stepscope.model import schema

FRAMEWORK = "torch"
MINIMUM_VERSION = (2, 1)  # _KinetoEvent.start_ns/duration_ns and device_resource_id

# Kineto's activity types for events on the host that are not ops.
RUNTIME_TYPES = ("cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver")
MEMORY_EVENT = "[memory]"
# Stat names, as Kineto's Chrome trace names the same fields.
INPUT_DIMS = "Input Dims"
INPUT_TYPES = "Input type"
BYTES = "Bytes"
DEVICE_INDEX = "Device Id"
DEVICE_TYPE = "Device Type"
KERNEL_DETAILS = "kernel_details"
# CUDA's runtime (cudaLaunchKernel) and driver (cuLaunchKernelEx) API calls, by name: how a
# PyTorch without ``activity_type`` tells them from ops.
_RUNTIME_NAME = re.compile(r"cuda[A-Z]")
_DRIVER_NAME = re.compile(r"cu[A-Z]")
# Kineto's own work on the host ("Activity Buffer Request"), category ``overhead``.
_OVERHEAD_PREFIX = "Activity Buffer"
# Kineto's launch figures of a kernel, by the names its trace file gives them: ints, and
# [x, y, z] lists kept as JSON text (as kineto_to_tables keeps them).
LAUNCH_INTS = ("registers per thread", "shared memory")
LAUNCH_DIMS = ("grid", "block")

_last: Any = None


def last_profiler() -> Any:
    """The ``torch.profiler.profile`` of the last session that ran the PyTorch bridge."""
    return _last


@dataclass
class DeviceEvent:
    """One GPU activity: what the conversion to a device plane needs (times in ns)."""

    device: int
    stream: int
    name: str
    start_ns: int
    end_ns: int
    correlation_id: int
    args: dict[str, Any] = field(default_factory=dict)
    category: str = ""  # Kineto's: kernel, gpu_memcpy, gpu_memset, ...; "" to tell by name


class TorchBridge:
    """``torch.profiler`` started for one stepscope session."""

    framework = FRAMEWORK

    def __init__(self, options: ProfilerOptions) -> None:
        global _last
        torch: Any = sys.modules[FRAMEWORK]
        if version_tuple(getattr(torch, "__version__", "0")) < MINIMUM_VERSION:
            raise StepscopeError(
                f"PyTorch {torch.__version__} is too old for stepscope's PyTorch bridge; it "
                f"needs torch >= {'.'.join(map(str, MINIMUM_VERSION))}.")
        profiler = torch.profiler
        activities = [profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(profiler.ProfilerActivity.CUDA)
        self._profile = profiler.profile(activities=activities, record_shapes=True,
                                         profile_memory=True, with_modules=True)
        self._profile.start()
        _last = self._profile

    def stop(self) -> BridgeData:
        """Stop Kineto and convert what it recorded."""
        self._profile.stop()
        results = self._profile.profiler.kineto_results
        properties = gpu_properties()
        if results is None:
            return convert([], properties=properties)
        try:
            memory = allocations(results.experimental_event_tree())
        except Exception:  # a PyTorch without the event tree: sizes only, as before
            memory = {}
        events = results.events()
        # Where the first kernel's event gives no launch figures, none does (PyTorch 2.11).
        kernel = next((e for e in events if not str(e.device_type()).endswith("CPU")
                       and activity_type(e) == "kernel"), None)
        launches = launch_figures(self._profile) if kernel is not None and \
            not _metadata(kernel) else None
        return convert(events, memory, properties, launches)


def launch_figures(profile: Any) -> dict[int, dict[str, Any]]:
    """Each kernel's launch figures (grid, block, registers, ...) by correlation id, from
    Kineto's own trace file of the recording: PyTorch 2.11's events give no metadata for
    CUDA kernels (seen on an H200), but its trace file writes them. {} where it cannot."""
    out: dict[int, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="stepscope-kineto-") as folder:
            path = Path(folder) / "trace.json"
            profile.export_chrome_trace(str(path))
            doc = json.loads(path.read_text())
        for e in doc.get("traceEvents", []):
            args = e.get("args") if isinstance(e, dict) and e.get("cat") == "kernel" else None
            if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                out[args["correlation"]] = args
    except Exception:  # the figures are a nicety: never lose the events to them
        return {}
    return out


def gpu_properties() -> dict[int, dict[str, Any]]:
    """Each visible CUDA device's plane stats (name, multiprocessors, memory, compute
    capability), named as ``kineto_to_tables`` names them; {} without CUDA."""
    torch: Any = sys.modules[FRAMEWORK]
    out: dict[int, dict[str, Any]] = {}
    try:
        if not torch.cuda.is_available():
            return out
        for index in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(index)
            out[index] = {"device_vendor": "Nvidia" if torch.version.hip is None else "AMD",
                          "device_name": str(p.name), "core_count": int(p.multi_processor_count),
                          "memory_size": int(p.total_memory), "compute_cap_major": int(p.major),
                          "compute_cap_minor": int(p.minor)}
    except Exception:  # properties are a nicety: never lose the events to them
        return out
    return out


def activity_type(event: Any) -> str:
    """Kineto's activity type of ``event`` (a ``_KinetoEvent``), as its trace file's ``cat``."""
    method = getattr(event, "activity_type", None)
    if method is not None:
        return str(method())
    name = event.name()
    on_host = str(event.device_type()).endswith("CPU")
    if name == MEMORY_EVENT:
        return "cpu_instant_event"
    user = getattr(event, "is_user_annotation", None)
    if user is not None and user():
        return "user_annotation" if on_host else "gpu_user_annotation"
    if on_host:
        if name.startswith(_OVERHEAD_PREFIX):
            return "overhead"
        if _RUNTIME_NAME.match(name):
            return "cuda_runtime"
        return "cuda_driver" if _DRIVER_NAME.match(name) else "cpu_op"
    return device_category(name)


def device_category(name: str) -> str:
    """Kineto's category of a device activity told by its name, as Kineto names copies and
    sets (``Memcpy HtoD (Pinned -> Device)``, ``Memset (Device)``)."""
    if name.startswith("Memcpy"):
        return "gpu_memcpy"
    return "gpu_memset" if name.startswith("Memset") else "kernel"


def allocations(tree: Iterable[Any]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """What PyTorch's event tree knows of each memory record and Kineto's flat events do not:
    the address, the allocator's totals after it (as PyTorch's own trace file writes them),
    and the data type and shape of the tensor it holds (from the first op that took the
    allocation as an input). Keyed by (time in ns, signed size), in record order."""
    records: list[tuple[int, int, Any]] = []
    tensors: dict[int, tuple[str, str]] = {}
    todo = list(tree)
    while todo:
        node = todo.pop()
        todo.extend(node.children)
        fields = node.extra_fields
        if hasattr(fields, "alloc_size") and hasattr(fields, "ptr"):
            records.append((int(node.start_time_ns), int(fields.alloc_size), fields))
            continue
        for value in getattr(fields, "inputs", None) or ():
            allocation = getattr(value, "allocation_id", None)
            dtype = getattr(value, "dtype", None)
            if allocation is None or dtype is None or allocation in tensors:
                continue
            sizes = getattr(value, "sizes", None) or []
            tensors[int(allocation)] = (str(dtype).removeprefix("torch."),
                                        "[" + ",".join(str(int(d)) for d in sizes) + "]")
    out: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for when, size, fields in sorted(records, key=lambda r: r[0]):
        info: dict[str, Any] = {
            schema.KINETO_ADDRESS: int(fields.ptr),
            schema.KINETO_TOTAL_ALLOCATED: int(fields.total_allocated),
            schema.KINETO_TOTAL_RESERVED: int(fields.total_reserved)}
        tensor = tensors.get(int(getattr(fields, "allocation_id", -1)))
        if tensor is not None:
            info[schema.KINETO_DATA_TYPE], info[schema.TENSOR_SHAPES] = tensor
        out.setdefault((when, size), []).append(info)
    return out


def convert(events: Iterable[Any],
            memory: dict[tuple[int, int], list[dict[str, Any]]] | None = None,
            properties: dict[int, dict[str, Any]] | None = None,
            launches: dict[int, dict[str, Any]] | None = None) -> BridgeData:
    """Kineto's events (``_KinetoEvent``) as host lines and GPU planes; ``memory``
    (``allocations``) adds what the event tree knows of the memory records, ``properties``
    (``gpu_properties``) each device's plane stats, ``launches`` (``launch_figures``) the
    launch figures of kernels whose events give none."""
    data = BridgeData(FRAMEWORK)
    lines: dict[int, HostLine] = {}
    device: list[DeviceEvent] = []
    memory = memory or {}
    for event in events:
        begin = int(event.start_ns())
        end = begin + max(int(event.duration_ns()), 0)
        kind = activity_type(event)
        # Memory records of every device are host events: the thread that allocated.
        if str(event.device_type()).endswith("CPU") or event.name() == MEMORY_EVENT:
            tid = int(event.device_resource_id())
            line = lines.get(tid)
            if line is None:
                line = lines[tid] = HostLine(tid, _thread_name(tid))
            stats = _host_stats(event, kind)
            if event.name() == MEMORY_EVENT:
                same = memory.get((begin, int(event.nbytes())))
                if same:
                    stats.update(same.pop(0))
            line.events.append((event.name(), begin, end, stats))
        else:
            correlation = int(event.correlation_id())
            args = _metadata(event) or (launches or {}).get(correlation, {})
            device.append(DeviceEvent(int(event.device_index()), int(event.device_resource_id()),
                                      event.name(), begin, end, correlation, args, kind))
    data.host_lines = list(lines.values())
    data.planes = device_planes(device, properties)
    return data


def _host_stats(event: Any, kind: str) -> dict[str, Any]:
    stats: dict[str, Any] = {schema.KINETO_CATEGORY: kind}
    if event.name() == MEMORY_EVENT:
        stats[BYTES] = int(event.nbytes())
        stats[DEVICE_INDEX] = int(event.device_index())
        stats[DEVICE_TYPE] = int(event.device_type())
    elif kind in RUNTIME_TYPES:
        # The CUPTI correlation id joins the launch to its kernel (for ops it is Kineto's
        # op id, which joins nothing in the profile).
        stats[schema.CORRELATION_ID] = int(event.correlation_id())
    else:
        shapes = event.shapes()
        if shapes and any(shapes):
            stats[INPUT_DIMS] = json.dumps(shapes)
            stats[INPUT_TYPES] = json.dumps(event.dtypes())
    return stats


def _metadata(event: Any) -> dict[str, Any]:
    """A GPU event's Kineto metadata (grid, block, registers, ...) as a dict."""
    text = event.metadata_json() if hasattr(event, "metadata_json") else ""
    if not text:
        return {}
    try:
        value = json.loads("{" + text + "}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _thread_name(tid: int) -> str:
    """The OS thread's name (Linux), else a name made from its id."""
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().strip() or f"thread {tid}"
    except OSError:
        return f"thread {tid}"


def kernel_details(args: dict[str, Any]) -> str | None:
    """XSpace's ``kernel_details`` text from Kineto's kernel args (None if they give none)."""
    tokens = []
    regs = args.get("registers per thread")
    if isinstance(regs, int):
        tokens.append(f"regs:{regs}")
    shared = args.get("shared memory")
    if isinstance(shared, int):
        tokens.append(f"shm:{shared}")  # Kineto gives static + dynamic as one figure
    for key in ("grid", "block"):
        dims = args.get(key)
        if isinstance(dims, list) and dims and all(isinstance(d, int) for d in dims):
            tokens.append(f"{key}:{','.join(str(d) for d in dims)}")
    return " ".join(tokens) or None


def device_stats(event: DeviceEvent) -> dict[str, Any]:
    """A device event's stats: its Kineto category, correlation id and launch figures, under
    Kineto's names and as XSpace's ``kernel_details`` (which XProf reads)."""
    stats: dict[str, Any] = {schema.KINETO_CATEGORY: event.category or device_category(event.name),
                             schema.CORRELATION_ID: event.correlation_id}
    for key in LAUNCH_INTS:
        value = event.args.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            stats[key] = value
    for key in LAUNCH_DIMS:
        dims = event.args.get(key)
        if isinstance(dims, list) and dims and all(isinstance(d, int) for d in dims):
            stats[key] = json.dumps(dims)
    details = kernel_details(event.args)
    if details:
        stats[KERNEL_DETAILS] = details
    nbytes = event.args.get("bytes")
    if isinstance(nbytes, int) and not isinstance(nbytes, bool):
        stats["bytes"] = nbytes
    return stats


def device_planes(events: list[DeviceEvent],
                  properties: dict[int, dict[str, Any]] | None = None) -> list[Any]:
    """One ``/device:GPU:<n>`` XPlane per device, a line per stream, times absolute;
    ``properties`` gives each device's plane stats."""
    if not events:
        return []
    space = xb.new_space("")
    by_device: dict[int, list[DeviceEvent]] = {}
    for event in events:
        by_device.setdefault(event.device, []).append(event)
    for index in sorted(by_device):
        plane = xb.add_plane(space, index + 1, f"{schema.GPU_PLANE_PREFIX}{index}")
        for key, value in (properties or {}).get(index, {}).items():
            plane.add_plane_stat(key, value)
        streams: dict[int, Any] = {}
        for event in sorted(by_device[index], key=lambda e: (e.start_ns, -e.end_ns)):
            line = streams.get(event.stream)
            if line is None:
                # Offsets count from the line's first event: absolute ones overflow in ps.
                line = streams[event.stream] = plane.add_line(
                    event.stream, f"Stream #{event.stream}", event.start_ns)
            plane.add_event(line, event.name, event.start_ns, event.end_ns - event.start_ns,
                            device_stats(event))
    return list(space.planes)


def start(options: ProfilerOptions) -> TorchBridge:
    """Start ``torch.profiler`` for a session with ``options``."""
    return TorchBridge(options)
