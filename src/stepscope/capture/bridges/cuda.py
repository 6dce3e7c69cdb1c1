"""CUDA bridge: kernels, copies and sets of programs that use CUDA without a framework.

For CuPy, Numba, PyCUDA or cuda-python programs, NVIDIA's ``cupti-python`` (the CUPTI
activity API) records every kernel (with its launch figures), memcpy and memset on the GPU
and the CUDA runtime and driver calls on the host. Those become ``/device:GPU:<n>`` planes
(a line per stream) and events on the calling thread's host line, joined by correlation id,
as the PyTorch bridge writes them.

Where a framework that traces CUDA itself is imported (PyTorch, TensorFlow, JAX), its bridge
records the GPU and this one stands aside: CUPTI serves one client at a time. Where
``cupti-python`` is missing or no GPU is present, the bridge is skipped with a one-line note.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
import threading
import time
from typing import Any

from stepscope.capture.bridges import BridgeData, HostLine
from stepscope.capture.bridges.pytorch import DeviceEvent, device_planes
from stepscope.capture.options import ProfilerOptions
from stepscope.model import schema

log = logging.getLogger(__name__)

FRAMEWORK = "CUDA"
# Frameworks whose own bridges trace CUDA (CUPTI has a single client per process).
SELF_TRACING = ("torch", "tensorflow", "jax")
_BUFFER_BYTES = 8 << 20
_API_VERSION = re.compile(r"_v\d+$")
_noted: set[str] = set()


def _note(message: str) -> None:
    """Log ``message`` once per process (a skipped bridge is not worth repeating)."""
    if message not in _noted:
        _noted.add(message)
        log.warning(message)


class CudaBridge:
    """CUPTI activity tracing started for one stepscope session."""

    framework = FRAMEWORK

    def __init__(self, cupti: Any) -> None:
        self._cupti = cupti
        self._records: list[Any] = []
        # CUPTI's timestamps count on its own clock: one reading of both gives the offset.
        before = time.time_ns()
        cupti_now = int(cupti.get_timestamp())
        self._offset = (before + time.time_ns()) // 2 - cupti_now
        kind = cupti.ActivityKind
        # Records name their thread by the OS thread id (the id of stepscope's own lines),
        # not CUPTI's default pthread id (cut to 32 bits in the record).
        cupti.set_thread_id_type(cupti.ActivityThreadIdType.SYSTEM)
        self._kinds = [kind.CONCURRENT_KERNEL, kind.MEMCPY, kind.MEMSET, kind.RUNTIME,
                       kind.DRIVER]
        cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        for each in self._kinds:
            cupti.activity_enable(each)

    @staticmethod
    def _buffer_requested() -> tuple[int, int]:
        return _BUFFER_BYTES, 0  # 0: as many records as fit

    def _buffer_completed(self, activities: list[Any]) -> None:
        self._records.extend(activities)

    def stop(self) -> BridgeData:
        """Flush CUPTI's buffers, stop tracing and convert the records."""
        cupti = self._cupti
        cupti.activity_flush_all(1)
        for each in self._kinds:
            cupti.activity_disable(each)
        return self._convert()

    def _convert(self) -> BridgeData:
        cupti, off = self._cupti, self._offset
        kind = cupti.ActivityKind
        data = BridgeData(FRAMEWORK)
        lines: dict[int, HostLine] = {}
        device: list[DeviceEvent] = []
        threads = {t.native_id: t for t in threading.enumerate()}
        for r in self._records:
            if r.kind in (kind.RUNTIME, kind.DRIVER):
                domain = (cupti.CallbackDomain.RUNTIME_API if r.kind == kind.RUNTIME
                          else cupti.CallbackDomain.DRIVER_API)
                line = lines.get(r.thread_id)
                if line is None:
                    thread = threads.get(r.thread_id)
                    line = lines[r.thread_id] = HostLine(
                        r.thread_id, thread.name if thread else f"thread {r.thread_id}")
                category = "cuda_runtime" if r.kind == kind.RUNTIME else "cuda_driver"
                name = api_name(cupti.get_callback_name(domain, r.cbid))
                line.events.append((name, r.start + off, r.end + off,
                                    {schema.CORRELATION_ID: r.correlation_id,
                                     schema.KINETO_CATEGORY: category}))
            elif r.kind == kind.CONCURRENT_KERNEL:
                args = {"registers per thread": r.registers_per_thread,
                        "shared memory": r.static_shared_memory + r.dynamic_shared_memory,
                        "grid": [r.grid_x, r.grid_y, r.grid_z],
                        "block": [r.block_x, r.block_y, r.block_z]}
                device.append(DeviceEvent(r.device_id, r.stream_id, r.name, r.start + off,
                                          r.end + off, r.correlation_id, args, "kernel"))
            elif r.kind == kind.MEMCPY:
                name = f"Memcpy {cupti.ActivityMemcpyKind(r.copy_kind).name}"
                device.append(DeviceEvent(r.device_id, r.stream_id, name, r.start + off,
                                          r.end + off, r.correlation_id, {"bytes": r.bytes},
                                          "gpu_memcpy"))
            elif r.kind == kind.MEMSET:
                device.append(DeviceEvent(r.device_id, r.stream_id, "Memset", r.start + off,
                                          r.end + off, r.correlation_id, {"bytes": r.bytes},
                                          "gpu_memset"))
        data.host_lines = list(lines.values())
        data.planes = device_planes(device, gpu_properties({e.device for e in device}))
        return data


def api_name(callback_name: str) -> str:
    """A CUDA API call's name as Kineto writes it: CUPTI's callback names carry the version of
    the API (``cudaLaunchKernel_v7000``), which the analyses' launch names do not."""
    return _API_VERSION.sub("", callback_name)


def gpu_properties(devices: set[int]) -> dict[int, dict[str, Any]]:
    """The plane stats (name, multiprocessors, memory, compute capability) of ``devices``,
    from NVIDIA's cuda-bindings, which cupti-python requires; {} where they cannot be read."""
    out: dict[int, dict[str, Any]] = {}
    try:
        runtime: Any = importlib.import_module("cuda.bindings.runtime")
        for index in sorted(devices):
            err, p = runtime.cudaGetDeviceProperties(index)
            if int(err) != 0:
                continue
            name = p.name.split(b"\0", 1)[0].decode(errors="replace") \
                if isinstance(p.name, bytes) else str(p.name)
            out[index] = {"device_vendor": "Nvidia", "device_name": name,
                          "core_count": int(p.multiProcessorCount),
                          "memory_size": int(p.totalGlobalMem),
                          "compute_cap_major": int(p.major), "compute_cap_minor": int(p.minor)}
    except Exception:  # properties are a nicety: never lose the events to them
        return out
    return out


def cupti_advice(err: BaseException) -> str:
    """What to do when CUPTI cannot start, as the TensorFlow Profiler guides' troubleshooting
    sections say it: the library is not found, or profiling needs privileges."""
    text = f"{type(err).__name__}: {err}"
    if "INSUFFICIENT_PRIVILEGES" in text or "ERR_NVGPUCTRPERM" in text:
        return (f"the GPU refuses profiling to this user ({text}). Run as root, or in Docker "
                "with --privileged (or --cap-add=SYS_ADMIN), or let every user profile: add "
                "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' to a file in "
                "/etc/modprobe.d/ and reboot")
    if "cupti" in text.lower() and ("cannot open" in text or "not found" in text.lower()
                                    or "No such file" in text):
        return (f"the CUPTI library was not found ({text}). Put its folder on the library "
                "path, e.g. export LD_LIBRARY_PATH=/usr/local/cuda/extras/CUPTI/lib64:"
                "$LD_LIBRARY_PATH, or pip install nvidia-cuda-cupti-cu12")
    return f"CUPTI could not start ({text})"


def start(options: ProfilerOptions) -> CudaBridge | None:
    """Start CUPTI activity tracing, or None where a framework traces CUDA or none can."""
    if any(name in sys.modules for name in SELF_TRACING):
        return None
    try:
        cupti = importlib.import_module("cupti.cupti")
    except ImportError:
        _note("stepscope: CUDA kernel tracing needs NVIDIA's cupti-python "
              "(pip install cupti-python); the profile has no GPU activity.")
        return None
    except OSError as err:  # the wheel is there but no CUDA driver or CUPTI library is
        _note(f"stepscope: GPU tracing is off: {cupti_advice(err)}; the profile has no GPU "
              "activity.")
        return None
    try:
        return CudaBridge(cupti)
    except Exception as err:  # CUPTI refuses without a device (or with another client)
        _note(f"stepscope: GPU tracing is off: {cupti_advice(err)}; the profile has no GPU "
              "activity.")
        return None
