"""A profiling session: ``start``, ``stop`` and ``Profile``, as in ``tf.profiler.experimental``."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from time import time_ns
from types import TracebackType
from typing import Any

from stepscope.capture import bridges, input_pipeline, python_tracer, trace
from stepscope.capture.memory_tracer import MemoryTracer, MemoryTracerUnavailable
from stepscope.capture.options import ProfilerOptions
from stepscope.capture.python_sampler import PythonSampler
from stepscope.capture.python_tracer import PythonTracer
from stepscope.capture.recorder import Recorder
from stepscope.capture.system_counters import SystemCounters
from stepscope.errors import (
    InvalidOptionError,
    LogdirError,
    ProfilerAlreadyRunningError,
    ProfilerNotRunningError,
    StepscopeError,
    StepscopeWarning,
)
from stepscope.formats import xplane_builder as xb
from stepscope.model import locations, schema
from stepscope.model import logdir as layout
from stepscope.version import __version__

log = logging.getLogger(__name__)


class DroppedEventsWarning(StepscopeWarning):
    """The session reached its event cap and dropped events."""


class _Session:
    """State of the one running session.

    ``logdir`` is None for a capture taken by the profiler server, whose profile is handed
    back in memory (``stop_capture``) instead of written by ``stop``.
    """

    def __init__(self, logdir: Path | None, options: ProfilerOptions) -> None:
        # What stop needs (NumPy among it), imported now so that stop does not wait for it
        # (but not when the profiled program imports stepscope), and before the memory
        # tracer hooks NumPy's allocator.
        import stepscope.capture.recorder_to_xplane  # noqa: F401

        self.logdir = logdir
        self.options = options
        self.recorder = Recorder(options.max_events)
        self.started_at = datetime.now()
        self.start_ns = time_ns()
        self.python_tracer = (PythonTracer(self.recorder)
                              if options.python_tracer_level >= 1 else None)
        self.python_sampler = (PythonSampler(self.recorder, options.python_sampling_hz)
                               if options.python_sampling_hz > 0 else None)
        self.counters = (SystemCounters(self.recorder, options.counter_interval_ms)
                         if options.counter_interval_ms > 0 else None)
        self.memory_tracer = (MemoryTracer(self.recorder, options.memory_threshold_bytes)
                              if options.memory_tracer_level >= 1 else None)
        if self.memory_tracer is not None:
            # Installed here, on the thread that starts the session (NumPy's allocator is
            # per thread), even when recording begins later on a timer's thread (delay_ms).
            try:
                self.memory_tracer.install()
            except MemoryTracerUnavailable as err:
                warnings.warn(f"stepscope: no memory tracing: {err}", stacklevel=4)
                self.memory_tracer = None
        self.delay_timer: threading.Timer | None = None
        self.recording = False
        self.bridges: list[bridges.Bridge] = []
        self.bridge_data: list[bridges.BridgeData] = []
        self.keep_from_ns = 0  # what began earlier is left out of the profile (warm-up)

    def begin_recording(self) -> None:
        """Turn the tracers on."""
        self.start_ns = time_ns()
        self.recording = True
        level = self.options.host_tracer_level
        rec = self.recorder
        trace.set_recorders(rec if level >= 1 else None, rec if level >= 2 else None,
                            rec if level >= 3 else None)
        if level >= 2:
            input_pipeline.session_started(rec)  # PyTorch DataLoader, when torch is imported
        if self.counters is not None:
            self.counters.start()
        if self.python_tracer is not None:
            self.python_tracer.start()
        if self.python_sampler is not None:
            self.python_sampler.start()
        if self.memory_tracer is not None:
            self.memory_tracer.start()
        # Last, so that our tracers already run while a framework's profiler starts.
        self.bridges = bridges.start_all(self.options)

    def end_recording(self) -> None:
        """Turn the tracers off (idempotent)."""
        trace.set_recorders(None, None, None)
        if self.memory_tracer is not None:  # installed at creation: stop even if never begun
            self.memory_tracer.stop()
        if not self.recording:
            return
        self.recording = False
        input_pipeline.session_stopped()  # before the profile is built: workers' events
        self.bridge_data = bridges.stop_all(self.bridges)
        self.bridges = []
        if self.python_sampler is not None:
            self.python_sampler.stop()
        if self.python_tracer is not None:
            self.python_tracer.stop()
        if self.counters is not None:
            self.counters.stop()
        self._cap_bridge_events()

    def _cap_bridge_events(self) -> None:
        """Count the bridges' events against ``max_events``, dropping those beyond it."""
        for data in self.bridge_data:
            for line in data.host_lines:
                kept = self.recorder.admit_many(len(line.events))
                del line.events[kept:]
            for plane in data.planes:
                for xline in plane.lines:
                    kept = self.recorder.admit_many(len(xline.events))
                    if kept < len(xline.events):
                        del xline.events[kept:]


_session: _Session | None = None
_lock = threading.Lock()


def check_writable(logdir: Path) -> None:
    """Fail now, not at stop, if profiles cannot be written under ``logdir``.

    On object storage there is nothing to create ahead: the filesystem's package is there
    (``locations.as_path`` checked it) and the objects are written at stop.
    """
    root = layout.profile_root(logdir)
    if locations.is_remote(root):
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".stepscope-probe-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise LogdirError(
            f"Cannot write profiles under {logdir!s} ({err.strerror or err}); "
            "pass a logdir you can write to.") from err


def start(logdir: str | os.PathLike[str], options: ProfilerOptions | None = None) -> None:
    """Start profiling; the profile is written under ``logdir`` when ``stop`` is called."""
    if options is None:
        options = ProfilerOptions()
    elif not isinstance(options, ProfilerOptions):
        raise InvalidOptionError(
            f"options must be a stepscope.ProfilerOptions, got {type(options).__name__}.")
    if not str(logdir):
        raise LogdirError("logdir is empty; pass the directory to write profiles into.")
    path = locations.as_path(logdir)  # a URL whose package is missing fails here
    with _lock:
        _refuse_if_running()
        check_writable(path)
        _begin(_Session(path, options))


def _refuse_if_running() -> None:
    if _session is None:
        return
    if _session.logdir is None:
        raise ProfilerAlreadyRunningError(
            "A remote capture (stepscope.server) is recording in this process; start a session "
            "once it has ended.")
    raise ProfilerAlreadyRunningError(
        "A profiling session is already running; call stepscope.stop() before starting "
        "another.")


def _begin(session: _Session) -> None:
    """Make ``session`` the running one and start recording (or its delay); holds ``_lock``."""
    global _session
    _session = session
    options = session.options
    if options.delay_ms:
        session.delay_timer = threading.Timer(options.delay_ms / 1000.0,
                                              _begin_if_current, args=(session,))
        session.delay_timer.daemon = True
        session.delay_timer.name = "stepscope-delayed-start"
        python_tracer.leave_out(session.delay_timer)  # it starts the tracers, then ends
        session.delay_timer.start()
    else:
        session.begin_recording()


def _begin_if_current(session: _Session) -> None:
    with _lock:
        if _session is session:
            session.begin_recording()


def stop(save: bool = True) -> Path | None:
    """Stop profiling and write the profile; return its path (None when ``save`` is False)."""
    with _lock:
        session = _session
        if session is None:
            raise ProfilerNotRunningError(
                "No profiling session is running; call stepscope.start(logdir) first.")
        if session.logdir is None:
            raise ProfilerNotRunningError(
                "The running session is a remote capture (stepscope.server); it ends by itself "
                "when its duration is over.")
        _end(session)
    stop_ns = time_ns()
    rec = session.recorder
    _warn_if_dropped(rec)
    if not save:
        return None
    host = layout.local_hostname()
    data = build_space(session, stop_ns, host)
    path = layout.new_run_dir(session.logdir, session.started_at) / layout.host_file_name(host)
    try:
        xb.write_atomic(path, data)
    except OSError as err:
        if not locations.is_remote(path):
            raise LogdirError(f"Cannot write the profile to {path} "
                              f"({err.strerror or err}).") from err
        # A bucket that cannot be reached at the end of a long run must not cost the profile.
        kept = _keep_locally(data, path)
        raise LogdirError(f"Cannot write the profile to {path} ({err.strerror or err}); it "
                          f"was saved to {kept} instead: copy it there once the storage can "
                          "be reached.") from err
    log.info("stepscope profile written to %s", path)
    return path


def _keep_locally(data: bytes, path: Path) -> Path:
    """Where a profile that could not reach its bucket is kept: the temporary directory,
    under the run and file names it was meant to have."""
    local = Path(tempfile.gettempdir()) / "stepscope-unsent" / path.parent.name / path.name
    xb.write_atomic(local, data)
    return local


def _end(session: _Session) -> None:
    """Stop recording and clear the running session; holds ``_lock``."""
    global _session
    _session = None
    if session.delay_timer is not None:
        session.delay_timer.cancel()
    session.end_recording()


def _warn_if_dropped(rec: Recorder) -> None:
    if rec.dropped:
        msg = (f"stepscope dropped {rec.dropped:,} events after reaching max_events="
               f"{rec.max_events:,}; raise ProfilerOptions.max_events or profile a shorter "
               "window.")
        warnings.warn(msg, DroppedEventsWarning, stacklevel=3)
        log.warning(msg)


@dataclass(frozen=True)
class Captured:
    """What a server-side capture recorded: the serialised ``XSpace`` and its event counts."""

    data: bytes
    recorded: int
    dropped: int


def start_capture(options: ProfilerOptions) -> None:
    """Start a session whose profile ``stop_capture`` hands back in memory (for the server)."""
    with _lock:
        _refuse_if_running()
        _begin(_Session(None, options))


def stop_capture(host: str) -> Captured:
    """End the capture started by ``start_capture`` and return what it recorded."""
    with _lock:
        session = _session
        if session is None or session.logdir is not None:
            raise ProfilerNotRunningError("No remote capture is running in this process.")
        _end(session)
    stop_ns = time_ns()
    rec = session.recorder
    if rec.dropped:
        log.warning("stepscope dropped %s events after reaching max_events=%s in a remote "
                    "capture.", f"{rec.dropped:,}", f"{rec.max_events:,}")
    return Captured(build_space(session, stop_ns, host), rec.recorded, rec.dropped)


def discard_before(when_ns: int) -> None:
    """Leave out of the running session's profile what began before ``when_ns`` (a warm-up)."""
    with _lock:
        if _session is not None:
            _session.keep_from_ns = max(_session.keep_from_ns, when_ns)


def is_running() -> bool:
    """True while a session is started (recording, or waiting out ``delay_ms``)."""
    return _session is not None


def build_space(session: _Session, stop_ns: int, host: str) -> bytes:
    """Turn what the session recorded into a serialised ``XSpace``.

    The host and Python-tracer planes, where nearly all events are, are encoded from
    columns (``recorder_to_xplane``, ``xplane_encoder``); the small ones (counters, task
    environment) and the bridges' planes go through protobuf messages.
    """
    from stepscope.capture import recorder_columns as rc
    from stepscope.capture.python_sampler import sampler_plane
    from stepscope.capture.recorder_to_xplane import plane_columns
    from stepscope.formats import xplane_encoder as enc

    rec = session.recorder
    rec.refresh_thread_names()
    start_ns = max(session.start_ns, session.keep_from_ns)
    keep_from = session.keep_from_ns
    planes: list[bytes] = []

    host_lines = [(line_id, name, rc.EventColumns.concat(parts))
                  for line_id, (name, parts) in _host_lines(session, rc.buffer_columns).items()]
    # Names of tuples just turned into columns are in `names.objects` by now.
    planes.append(enc.encode_plane(plane_columns(
        schema.HOST_PLANE_ID, schema.HOST_PLANE, host_lines, rec.names.objects, start_ns,
        keep_from, _host_event_name)))

    if session.python_tracer is not None:
        cache: dict[Any, str] = {}
        py_lines = [(buf.thread_id, buf.thread_name, rc.buffer_columns(buf, rec.names))
                    for buf in rec.python_buffers if len(buf)]
        planes.append(enc.encode_plane(plane_columns(
            schema.PYTHON_TRACER_PLANE_ID, schema.PYTHON_TRACER_PLANE, py_lines,
            rec.names.objects, start_ns, keep_from,
            lambda what: PythonTracer.event_name(what, cache))))

    sampled = (sampler_plane(session.python_sampler, start_ns, keep_from)
               if session.python_sampler is not None else None)
    if sampled is not None:
        planes.append(enc.encode_plane(sampled))

    small = xb.new_space(host)
    if rec.samples:
        counters = xb.add_plane(small, schema.COUNTERS_PLANE_ID, schema.COUNTERS_PLANE)
        lines: dict[str, Any] = {}
        for counter, when, value in rec.samples:
            if when < session.keep_from_ns:
                continue
            line = lines.get(counter)
            if line is None:
                line = lines[counter] = counters.add_line(len(lines) + 1, counter, start_ns)
            counters.add_event(line, counter, when, 0, {schema.VALUE: value})

    used = {schema.HOST_PLANE_ID}
    if session.python_tracer is not None:
        used.add(schema.PYTHON_TRACER_PLANE_ID)
    if sampled is not None:
        used.add(schema.PYTHON_SAMPLER_PLANE_ID)
    _add_bridge_planes(small, session.bridge_data, session.keep_from_ns, used)

    env = xb.add_plane(small, schema.TASK_ENV_PLANE_ID, schema.TASK_ENV_PLANE)
    env.add_plane_stat(schema.ENV_PROFILE_START_TIME, start_ns)
    env.add_plane_stat(schema.ENV_PROFILE_STOP_TIME, stop_ns)
    env.add_plane_stat(schema.ENV_RECORDED_EVENTS, rec.recorded)
    env.add_plane_stat(schema.ENV_DROPPED_EVENTS, rec.dropped)
    env.add_plane_stat(schema.ENV_MAX_EVENTS, rec.max_events)
    env.add_plane_stat(schema.ENV_PRODUCER, __version__)
    env.add_plane_stat(schema.ENV_CPU_COUNT, os.cpu_count() or 0)
    if session.python_sampler is not None:
        env.add_plane_stat(schema.ENV_SAMPLER_TICKS, len(session.python_sampler.tick_ns))
        env.add_plane_stat(schema.ENV_SAMPLER_CPU_NS, session.python_sampler.cpu_ns)
    for key, value in session.options.to_dict().items():
        env.add_plane_stat(schema.ENV_OPTION_PREFIX + key, -1 if value is None else value)
    if rec.dropped:
        small.warnings.append(
            f"stepscope dropped {rec.dropped} events after reaching max_events={rec.max_events}.")
    # Planes first (field 1), in the order above; then the space's other fields.
    planes += [plane.SerializeToString() for plane in small.planes]
    del small.planes[:]
    tail: bytes = small.SerializeToString()
    return enc.encode_space_planes(planes) + tail


def _host_event_name(what: Any) -> str:
    return what if isinstance(what, str) else str(what)


def _host_lines(session: _Session,
                columns: Callable[[Any, Any], Any]) -> dict[int, tuple[str, list[Any]]]:
    """Host events by line id, as columns: ours by thread (a thread id the system reused
    shares its line), with the framework bridges' lines merged in."""
    from stepscope.capture.recorder_columns import tuples_to_columns

    rec = session.recorder
    lines: dict[int, tuple[str, list[Any]]] = {}
    for buf in rec.host_buffers:
        if buf.thread_id in lines:
            lines[buf.thread_id][1].append(columns(buf, rec.names))
        else:
            lines[buf.thread_id] = (buf.thread_name, [columns(buf, rec.names)])
    for data in session.bridge_data:
        for bridged in data.host_lines:
            cols = tuples_to_columns(bridged.events, rec.names)
            if bridged.line_id in lines:
                lines[bridged.line_id][1].append(cols)
            else:
                lines[bridged.line_id] = (bridged.name, [cols])
    return lines


def _add_bridge_planes(space: Any, bridge_data: list[bridges.BridgeData],
                       keep_from_ns: int, used: set[int]) -> None:
    """Append the bridges' whole planes (devices), renumbering ids that ours (``used``,
    and those of ``space``) already use.

    Their events that began before ``keep_from_ns`` (a warm-up left out), if set, are dropped.
    """
    used = used | {plane.id for plane in space.planes}
    used.update((schema.TASK_ENV_PLANE_ID, schema.PYTHON_TRACER_PLANE_ID,
                 schema.COUNTERS_PLANE_ID, schema.PYTHON_SAMPLER_PLANE_ID))
    for data in bridge_data:
        for plane in data.planes:
            added = space.planes.add()
            added.CopyFrom(plane)
            if added.id in used:
                added.id = max(used) + 1
            used.add(added.id)
            for line in added.lines if keep_from_ns else ():
                kept = [e.SerializeToString() for e in line.events
                        if line.timestamp_ns + e.offset_ps // 1000 >= keep_from_ns]
                if len(kept) < len(line.events):
                    del line.events[:]
                    for blob in kept:
                        line.events.add().ParseFromString(blob)


class Profile:
    """Context manager: profile the enclosed block into ``logdir``."""

    def __init__(self, logdir: str | os.PathLike[str],
                 options: ProfilerOptions | None = None) -> None:
        self.logdir = logdir
        self.options = options
        self.path: Path | None = None

    def __enter__(self) -> Profile:
        start(self.logdir, self.options)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.path = stop()
        except StepscopeError:
            if exc_type is None:
                raise
