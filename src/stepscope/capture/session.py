"""A profiling session: ``start``, ``stop`` and ``Profile``, as in ``tf.profiler.experimental``."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
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
from stepscope.capture.recorder import Recorder, ThreadBuffer
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
        self.python_tracer = (PythonTracer(self.recorder,
                                           c_calls=options.python_tracer_level == 1)
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


def _no_flight_recorder() -> bool:
    return False


# Whether a flight recorder (capture.flight) owns the tracers; it sets this when it starts.
flight_running: Callable[[], bool] = _no_flight_recorder


def _refuse_if_running() -> None:
    if flight_running():
        raise ProfilerAlreadyRunningError(
            "A flight recorder is running in this process; stop it "
            "(stepscope.flight_recorder.stop()) before starting a session.")
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
    data = build_space_parts(session, stop_ns, host, release=True)
    path = save_profile(session.logdir, session.started_at, host, data, rec.recorded)
    log.info("stepscope profile written to %s", path)
    return path


def save_profile(logdir: Path, started_at: datetime, host: str,
                 data: bytes | list[bytes | memoryview], events: int) -> Path:
    """Write a profile (bytes, or parts to write one after the other) into a new run folder
    of ``logdir``; return its path.

    Whatever the filesystem does (a bucket that cannot be reached, a full disk, a folder
    removed), the recording is not lost: a complete copy is kept locally
    (:func:`keep_locally`) and the LogdirError says where. A URL gets
    ``STEPSCOPE_UPLOAD_TIMEOUT_S`` seconds (docs/reliability.md) before the copy is kept.
    """
    name = layout.host_file_name(host)

    def write() -> Path:
        path = layout.new_run_dir(logdir, started_at) / name
        xb.write_atomic(path, data)
        return path

    try:
        if not locations.is_remote(logdir):
            return write()
        limit = locations.timeout_s(locations.WRITE_TIMEOUT_ENV,
                                    locations.DEFAULT_WRITE_TIMEOUT_S)
        return locations.call_bounded(write, limit, str(logdir))
    except Exception as err:  # noqa: BLE001 - any failure of any filesystem keeps a copy
        run = layout.run_name(started_at)
        target = locations.redact(f"{layout.profile_root(logdir)}/{run}/{name}")
        reason = locations.failure_reason(err)
        kept, tried = keep_locally(data, run, name)
        if kept is not None:
            raise LogdirError(f"Cannot write the profile to {target} ({reason}); it was saved "
                              f"to {kept} instead: copy it there once the storage can be "
                              "reached.") from err
        raise LogdirError(f"Cannot write the profile to {target} ({reason}), nor a copy to "
                          f"{'; '.join(tried)}: the recording ({events:,} events, "
                          f"{_size(data):,} bytes) is lost.") from err


def _size(data: bytes | list[bytes | memoryview]) -> int:
    return sum(len(part) for part in data) if isinstance(data, list) else len(data)


def unsent_dirs() -> list[Path]:
    """Where profiles that could not be written are kept, in order of preference."""
    dirs = [Path(tempfile.gettempdir()) / "stepscope-unsent"]
    with contextlib.suppress(RuntimeError):  # no home directory
        dirs.append(Path.home() / "stepscope-unsent")
    return dirs


def keep_locally(data: bytes | list[bytes | memoryview], run: str,
                 name: str) -> tuple[Path | None, list[str]]:
    """Keep a profile that could not reach its logdir: the first of :func:`unsent_dirs`
    that takes it, under the run and file names it was meant to have. Returns that path
    (None if none took it) and, for each place that refused, where and why."""
    tried: list[str] = []
    for folder in unsent_dirs():
        local, n = folder / run / name, 1
        while local.exists():  # an earlier profile kept under the same name stays
            local, n = folder / f"{run}_{n}" / name, n + 1
        try:
            xb.write_atomic(local, data)
        except OSError as err:
            tried.append(f"{local} ({err.strerror or err})")
            continue
        return local, tried
    return None, tried


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
    return Captured(build_space(session, stop_ns, host, release=True), rec.recorded,
                    rec.dropped)


def discard_before(when_ns: int) -> None:
    """Leave out of the running session's profile what began before ``when_ns`` (a warm-up)."""
    with _lock:
        if _session is not None:
            _session.keep_from_ns = max(_session.keep_from_ns, when_ns)


def start_new_bridges() -> None:
    """Start the bridges of frameworks imported since the running session began recording
    (the launcher calls it when the profiled program imports one)."""
    with _lock:
        session = _session
        if session is None or not session.recording:
            return
        running = frozenset(bridge.framework for bridge in session.bridges)
        session.bridges += bridges.start_all(session.options, running)


def recording_since_ns() -> int:
    """When the running session began recording (0 when none records yet)."""
    current = _session
    return current.start_ns if current is not None and current.recording else 0


def is_running() -> bool:
    """True while a session is started (recording, or waiting out ``delay_ms``)."""
    return _session is not None


@dataclass
class SpaceParts:
    """Everything a profile's ``XSpace`` is made of (``encode_space`` turns it into bytes).

    Lines are ``(line id, line name, events)``, the events as ``EventColumns`` or as one
    compiled ``Records`` per line, whose name ids index ``objects``; what began before
    ``keep_from_ns`` is left out. ``env`` holds extra Task Environment stats.
    """

    host: str
    start_ns: int
    stop_ns: int
    keep_from_ns: int
    host_lines: list[Any]
    python_lines: list[Any] | None
    objects: list[Any]
    samples: list[Any]
    bridge_data: list[bridges.BridgeData]
    recorded: int
    dropped: int
    max_events: int
    options: ProfilerOptions
    env: dict[str, Any] = field(default_factory=dict)
    keep_until_ns: int | None = None  # what began at or after it is left out (None: all)
    sampler: Any = None  # the Python sampler's plane (PlaneColumns), where it ran


def build_space(session: _Session, stop_ns: int, host: str, release: bool = False) -> bytes:
    """Turn what the session recorded into a serialised ``XSpace``; ``release`` frees the
    recorder's events line by line as they are written (the session is over)."""
    return b"".join(build_space_parts(session, stop_ns, host, release))


def build_space_parts(session: _Session, stop_ns: int, host: str,
                      release: bool = False) -> list[bytes | memoryview]:
    """``build_space``'s bytes in parts, to be written one after the other."""
    from stepscope.capture import recorder_columns as rc
    from stepscope.capture.python_sampler import sampler_plane

    rec = session.recorder
    rec.refresh_thread_names()
    sources = _host_sources(session)
    host_lines: list[Any]
    if rec.compiled:  # one Records per line: written straight from its chunks
        host_lines = [(line_id, name, rc.line_records(rec.names, parts))
                      for line_id, (name, parts) in sources.items()]
    else:
        host_lines = [(line_id, name, rc.EventColumns.concat(
            [rc.buffer_columns(part, rec.names) if isinstance(part, ThreadBuffer)
             else rc.tuples_to_columns(part, rec.names) for part in parts]))
            for line_id, (name, parts) in sources.items()]
    py_lines: list[Any] | None = None
    if session.python_tracer is not None:
        py_lines = [(buf.thread_id, buf.thread_name,
                     rc.line_records(rec.names, [buf]) if rec.compiled
                     else rc.buffer_columns(buf, rec.names))
                    for buf in rec.python_buffers if len(buf)]
    sampler = session.python_sampler
    env: dict[str, Any] = {}
    if sampler is not None:
        env = {schema.ENV_SAMPLER_TICKS: len(sampler.tick_ns),
               schema.ENV_SAMPLER_CPU_NS: sampler.cpu_ns}
    # Names of tuples just turned into columns are in `names.objects` by now.
    return encode_space_parts(SpaceParts(
        host=host, start_ns=max(session.start_ns, session.keep_from_ns), stop_ns=stop_ns,
        keep_from_ns=session.keep_from_ns, host_lines=host_lines, python_lines=py_lines,
        objects=rec.names.objects, samples=rec.samples, bridge_data=session.bridge_data,
        recorded=rec.recorded, dropped=rec.dropped, max_events=rec.max_events,
        options=session.options, env=env,
        sampler=None if sampler is None else sampler_plane(
            sampler, max(session.start_ns, session.keep_from_ns), session.keep_from_ns)),
        release=release)


def _last_end(lines: list[Any]) -> int:
    """The latest end of the events of ``lines`` (columns or records); 0 when none."""
    from stepscope.capture.recorder_columns import EventColumns

    last = 0
    for _, _, events in lines:
        if isinstance(events, EventColumns):
            if len(events):
                last = max(last, int(events.end.max()))
        else:
            span = events.span()
            if span is not None:
                last = max(last, span[1])
    return last


def encode_space(parts: SpaceParts, release: bool = False) -> bytes:
    """Serialise a profile's ``XSpace``."""
    return b"".join(encode_space_parts(parts, release))


def encode_space_parts(parts: SpaceParts, release: bool = False) -> list[bytes | memoryview]:
    """A profile's serialised ``XSpace``, in parts (joined, or written one after the other).

    The host and Python-tracer planes, where nearly all events are, are encoded from the
    compiled records or from columns (``recorder_to_xplane``); the small ones (counters,
    task environment) and the bridges' planes go through protobuf messages. ``release``
    frees the records of each line once written.
    """
    from stepscope.capture.recorder_to_xplane import plane_parts
    from stepscope.capture.safe_text import TextRepairs
    from stepscope.formats import xplane_encoder as enc

    start_ns, keep_from, until = parts.start_ns, parts.keep_from_ns, parts.keep_until_ns
    repairs = TextRepairs()
    # Events are counted as they end: once the cap was reached, what ended later was
    # dropped, so the last kept end is when the profile became incomplete.
    kept_until = 0
    if parts.dropped:
        kept_until = _last_end(parts.host_lines + (parts.python_lines or []))
    out: list[bytes | memoryview] = enc.space_plane_parts(plane_parts(
        schema.HOST_PLANE_ID, schema.HOST_PLANE, parts.host_lines, parts.objects, start_ns,
        keep_from, _host_event_name, until, repairs, release))

    if parts.python_lines is not None:
        cache: dict[Any, str] = {}
        out += enc.space_plane_parts(plane_parts(
            schema.PYTHON_TRACER_PLANE_ID, schema.PYTHON_TRACER_PLANE, parts.python_lines,
            parts.objects, start_ns, keep_from,
            lambda what: PythonTracer.event_name(what, cache), until, repairs, release))

    if parts.sampler is not None:
        out += enc.space_plane_parts([enc.encode_plane(parts.sampler)])

    small = xb.new_space(parts.host)
    if parts.samples:
        counters = xb.add_plane(small, schema.COUNTERS_PLANE_ID, schema.COUNTERS_PLANE)
        lines: dict[str, Any] = {}
        for counter, when, value in parts.samples:
            if when < keep_from or (until is not None and when >= until):
                continue
            line = lines.get(counter)
            if line is None:
                line = lines[counter] = counters.add_line(len(lines) + 1, counter, start_ns)
            counters.add_event(line, counter, when, 0, {schema.VALUE: value})

    used = {schema.HOST_PLANE_ID}
    if parts.python_lines is not None:
        used.add(schema.PYTHON_TRACER_PLANE_ID)
    if parts.sampler is not None:
        used.add(schema.PYTHON_SAMPLER_PLANE_ID)
    _add_bridge_planes(small, parts.bridge_data, keep_from, used)

    env = xb.add_plane(small, schema.TASK_ENV_PLANE_ID, schema.TASK_ENV_PLANE)
    env.add_plane_stat(schema.ENV_PROFILE_START_TIME, start_ns)
    env.add_plane_stat(schema.ENV_PROFILE_STOP_TIME, parts.stop_ns)
    env.add_plane_stat(schema.ENV_RECORDED_EVENTS, parts.recorded)
    env.add_plane_stat(schema.ENV_DROPPED_EVENTS, parts.dropped)
    if parts.dropped:
        env.add_plane_stat(schema.ENV_DROPPED_AFTER, kept_until or parts.stop_ns)
    env.add_plane_stat(schema.ENV_MAX_EVENTS, parts.max_events)
    env.add_plane_stat(schema.ENV_REPLACED_VALUES, repairs.count)
    env.add_plane_stat(schema.ENV_PRODUCER, __version__)
    env.add_plane_stat(schema.ENV_CPU_COUNT, os.cpu_count() or 0)
    for key, value in parts.options.to_dict().items():
        env.add_plane_stat(schema.ENV_OPTION_PREFIX + key, -1 if value is None else value)
    for key, value in parts.env.items():
        env.add_plane_stat(key, value)
    if parts.dropped:
        small.warnings.append(f"stepscope dropped {parts.dropped} events after reaching "
                              f"max_events={parts.max_events}.")
    if repairs.count:
        msg = (f"stepscope replaced {repairs.count} recorded names or values that could not be "
               "written as UTF-8 text (a lone surrogate, or a str() that raised).")
        small.warnings.append(msg)
        log.warning(msg)
    # Planes first (field 1), in the order above; then the space's other fields.
    for plane in small.planes:
        out += enc.space_plane_parts([plane.SerializeToString()])
    del small.planes[:]
    out.append(small.SerializeToString())
    return out


def _host_event_name(what: Any) -> str:
    return what if isinstance(what, str) else str(what)


def _host_sources(session: _Session) -> dict[int, tuple[str, list[ThreadBuffer | list[Any]]]]:
    """Where the host events of each line are, by line id: our buffers by thread (a thread
    id the system reused shares its line), then the framework bridges' event lists."""
    rec = session.recorder
    lines: dict[int, tuple[str, list[ThreadBuffer | list[Any]]]] = {}
    for buf in rec.host_buffers:
        if buf.thread_id in lines:
            lines[buf.thread_id][1].append(buf)
        else:
            lines[buf.thread_id] = (buf.thread_name, [buf])
    for data in session.bridge_data:
        for bridged in data.host_lines:
            if bridged.line_id in lines:
                lines[bridged.line_id][1].append(bridged.events)
            else:
                lines[bridged.line_id] = (bridged.name, [bridged.events])
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
