"""``ProfilerOptions``: what a session records (as ``tf.profiler.experimental.ProfilerOptions``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from stepscope.errors import InvalidOptionError

DEFAULT_MAX_EVENTS = 2_000_000
DEFAULT_COUNTER_INTERVAL_MS = 50
DEFAULT_MEMORY_THRESHOLD = 1024


def _check_int(name: str, value: Any, low: int, high: int | None, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionError(
            f"ProfilerOptions.{name} must be an integer ({what}), got {value!r}.")
    if value < low or (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidOptionError(
            f"ProfilerOptions.{name}={value} is out of range: use {span} ({what}).")


@dataclass(frozen=True)
class ProfilerOptions:
    """Options of one profiling session.

    host_tracer_level: 0 off, 1 user annotations (``Trace``) only, 2 also stepscope's own
    instrumentation (default), 3 verbose. python_tracer_level: 1 records every Python and C
    function call, 2 Python functions only, through a hook several times cheaper (see
    ``capture.python_tracer``).
    device_tracer_level: 0 no framework or device tracing; 1 or 2 run the profilers of the
    imported frameworks alongside (``capture.bridges``; TensorFlow gets the level as given
    and treats 2 as 1). delay_ms: start
    recording this long after ``start``. max_events: cap on recorded events; past it events
    are dropped and counted. counter_interval_ms: system counter sampling period (0 disables).
    memory_tracer_level: 1 records NumPy array allocations of at least memory_threshold_bytes
    and their frees (see ``capture.memory_tracer``). python_sampling_hz: sample every
    thread's Python stack this many times a second (0 off; see ``capture.python_sampler``).
    """

    host_tracer_level: int = 2
    python_tracer_level: int = 0
    device_tracer_level: int = 1
    delay_ms: int | None = None
    max_events: int = DEFAULT_MAX_EVENTS
    counter_interval_ms: int = DEFAULT_COUNTER_INTERVAL_MS
    memory_tracer_level: int = 0
    memory_threshold_bytes: int = DEFAULT_MEMORY_THRESHOLD
    python_sampling_hz: int = 0

    def __post_init__(self) -> None:
        _check_int("host_tracer_level", self.host_tracer_level, 0, 3,
                   "0 off, 1 user annotations, 2 default, 3 verbose")
        _check_int("python_tracer_level", self.python_tracer_level, 0, 2,
                   "0 off, 1 Python and C functions, 2 Python functions only")
        _check_int("device_tracer_level", self.device_tracer_level, 0, 2,
                   "0 off, 1 or 2 framework and device tracers on")
        if self.delay_ms is not None:
            _check_int("delay_ms", self.delay_ms, 0, 24 * 3600 * 1000, "milliseconds or None")
        _check_int("max_events", self.max_events, 1, None, "events kept per session")
        _check_int("counter_interval_ms", self.counter_interval_ms, 0, 60_000,
                   "milliseconds between samples, 0 disables counters")
        _check_int("memory_tracer_level", self.memory_tracer_level, 0, 1, "0 off, 1 on")
        _check_int("memory_threshold_bytes", self.memory_threshold_bytes, 0, 1 << 50,
                   "smallest NumPy allocation recorded, in bytes")
        _check_int("python_sampling_hz", self.python_sampling_hz, 0, 10_000,
                   "Python stack samples a second, 0 off")

    def to_dict(self) -> dict[str, Any]:
        """The options as a plain dict."""
        return asdict(self)
