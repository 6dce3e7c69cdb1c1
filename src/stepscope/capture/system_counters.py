"""System counters sampled on a background thread: process CPU %, RSS, system memory, and GPU
utilisation and memory through NVML when a GPU and ``nvidia-ml-py`` are present."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from time import time_ns
from typing import Any

import psutil

from stepscope.capture import python_tracer
from stepscope.capture.recorder import Recorder
from stepscope.model import schema

log = logging.getLogger(__name__)


def _nvml_readers() -> list[Callable[[], list[tuple[str, float]]]]:
    """One reader per visible GPU, or none when NVML is not installed or finds no GPU."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception as err:  # NVML raises its own error types; any of them means "no GPU".
        log.debug("NVML unavailable: %s", err)
        return []
    readers: list[Callable[[], list[tuple[str, float]]]] = []
    for index in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)

        def read(handle: Any = handle, index: int = index) -> list[tuple[str, float]]:
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            return [(schema.COUNTER_GPU_UTILIZATION.format(index=index), float(util.gpu)),
                    (schema.COUNTER_GPU_MEMORY_USED.format(index=index), float(mem.used))]

        readers.append(read)
    return readers


class SystemCounters:
    """Samples counters every ``interval_ms`` into the recorder until stopped."""

    def __init__(self, recorder: Recorder, interval_ms: int) -> None:
        self._recorder = recorder
        self._interval_s = interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stepscope-counters", daemon=True)
        python_tracer.leave_out(self._thread)
        self._process = psutil.Process()
        self._gpus = _nvml_readers()
        self._cpu_mark = (time.monotonic_ns(), time.process_time_ns())
        self._cpu_limit = 100.0 * len(os.sched_getaffinity(0)) if hasattr(
            os, "sched_getaffinity") else 100.0 * (os.cpu_count() or 1)

    def _cpu_percent(self) -> float:
        """The process's CPU use since the last sample, in % of one core. Read from the
        nanosecond process clock: psutil's clock-tick times (10 ms) over a 5 ms interval read
        200 % or more, and at most every core the process may run on."""
        wall, cpu = time.monotonic_ns(), time.process_time_ns()
        last_wall, last_cpu = self._cpu_mark
        self._cpu_mark = (wall, cpu)
        if wall <= last_wall:
            return 0.0
        return min(100.0 * (cpu - last_cpu) / (wall - last_wall), self._cpu_limit)

    def start(self) -> None:
        """Take a first sample now and keep sampling in the background."""
        self._cpu_mark = (time.monotonic_ns(), time.process_time_ns())  # the CPU% delta's start
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        """Take a last sample and end the sampling thread."""
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> None:
        """Record one sample of every counter."""
        now = time_ns()
        add = self._recorder.add_sample
        with self._process.oneshot():
            add(schema.COUNTER_PROCESS_CPU, now, self._cpu_percent())
            add(schema.COUNTER_PROCESS_RSS, now, float(self._process.memory_info().rss))
        vm = psutil.virtual_memory()
        add(schema.COUNTER_SYSTEM_MEMORY_USED, now, float(vm.total - vm.available))
        add(schema.COUNTER_SYSTEM_MEMORY_AVAILABLE, now, float(vm.available))
        for read in self._gpus:
            try:
                for name, value in read():
                    add(name, now, value)
            except Exception as err:  # a GPU that stops answering must not end the session
                log.debug("NVML read failed: %s", err)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()
