"""The flight recorder: always on, in bounded memory, and it keeps the slow step.

While it runs, host annotations (and, when asked, the Python tracer and counters) go into a
ring of *segments*: each segment is a whole ``Recorder`` (binary records per thread, its own
interned names) covering one slice of the window, an eighth of it. When the newest segment
has covered its slice (steps or seconds), or has reached its share of the memory bound, a
new one takes over and the oldest beyond the window is dropped whole: its chunks, its names
and its Python objects go at once, so nothing grows with the length of the run.

Triggers save the window as a normal run in the logdir (``<time>-flight-<trigger>``), with
what triggered it on the Task Environment plane: a slow step (``k`` × the rolling median
after a warm-up, or a fixed time), an exception escaping a step, SIGTERM (the process is
about to exit), SIGUSR1, a call (``flight_recorder.dump()``) and a snapshot request over the
profiler server (``stepscope capture --snapshot``). A dump is built and written on a thread
of its own, so the loop goes on; only SIGTERM's is written before the process exits.
"""

from __future__ import annotations

import atexit
import bisect
import itertools
import logging
import math
import os
import queue
import signal
import threading
import warnings
from array import array
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import perf_counter_ns, time_ns
from types import FrameType, TracebackType
from typing import Any

from stepscope.capture import python_tracer, session, trace
from stepscope.capture.options import ProfilerOptions
from stepscope.capture.python_tracer import PythonTracer
from stepscope.capture.recorder import LISTED_EVENT_BYTES, SAMPLE_BYTES, Recorder
from stepscope.capture.system_counters import SystemCounters
from stepscope.errors import (
    InvalidOptionError,
    LogdirError,
    ProfilerAlreadyRunningError,
    ProfilerNotRunningError,
    StepscopeWarning,
)
from stepscope.model import locations, schema
from stepscope.model import logdir as layout

log = logging.getLogger(__name__)

# The window is cut into this many slices, one segment each: a dump holds the whole window
# and at most one slice more, and dropping a segment frees an eighth of the memory.
SLICES = 8
# Segments kept: the one recording and SLICES + 1 full ones (the window, whatever the phase).
KEPT_SEGMENTS = SLICES + 2
DEFAULT_MAX_BYTES = 64 << 20
# The smallest bound: a segment's share must hold a few chunks of binary records (256 KiB).
MIN_MAX_BYTES = 16 << 20
# Bytes of one binary event record (records.h): a segment's event cap keeps its events
# within its share of the bound even inside one step (stats are checked at each step).
EVENT_RECORD_BYTES = 16
# What a segment may still allocate at once: one chunk of events, one of stats and one of long
# events' ends (records_impl.h); a segment with less room than this left in its share hands
# over to a new one. (_fastpath.EVENT_RECORD_BYTES and CHUNK_BYTES say the same.)
CHUNK_BYTES = 8192 * 16 + 4096 * 24 + 1024 * 16
# By default the ring holds host annotations and stepscope's instrumentation, no counters.
DEFAULT_OPTIONS = ProfilerOptions(host_tracer_level=2, counter_interval_ms=0)
# Triggers that cool-down and max_dumps limit (the others are explicit requests).
AUTOMATIC = ("slow_step", "exception")
TRIGGERS = ("slow_step", "exception", "sigterm", "signal", "call", "snapshot")


class FlightRecorderWarning(StepscopeWarning):
    """The flight recorder could not do something it was asked (a signal handler, a dump)."""


@dataclass(frozen=True)
class FlightTriggers:
    """What makes the flight recorder save its window, and how often it may.

    slow_factor: a step longer than this × the rolling median of the last ``median_steps``
    steps is slow (None: off). slow_ms: a step longer than this is slow (None: off).
    warmup_steps: the first steps are never judged (nor counted in the median). exception:
    an exception escaping ``step()``. sigterm: SIGTERM, before the process exits. signal:
    the signal that asks for a dump (SIGUSR1; None: none). after_steps: steps recorded after
    the trigger before the run is saved. cooldown_s and max_dumps limit the automatic
    triggers (slow step, exception); a signal, a call or a snapshot is always answered.
    """

    slow_factor: float | None = 3.0
    slow_ms: float | None = None
    warmup_steps: int = 20
    median_steps: int = 200
    exception: bool = True
    sigterm: bool = True
    signal: int | None = int(signal.SIGUSR1)
    after_steps: int = 2
    cooldown_s: float = 60.0
    max_dumps: int = 5

    def __post_init__(self) -> None:
        for name in ("slow_factor", "slow_ms"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or
                                      not isinstance(value, int | float) or
                                      not math.isfinite(value) or value <= 0):
                raise InvalidOptionError(f"FlightTriggers.{name} must be a positive number "
                                         f"or None, got {value!r}.")
        if self.slow_factor is not None and self.slow_factor <= 1:
            raise InvalidOptionError(f"FlightTriggers.slow_factor must be above 1 (a step "
                                     f"that many times the median), got {self.slow_factor}.")
        for name, low, high in (("warmup_steps", 0, 10**9), ("median_steps", 1, 100_000),
                                ("after_steps", 0, 100_000), ("max_dumps", 0, 10**6)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidOptionError(f"FlightTriggers.{name} must be an integer in "
                                         f"{low}..{high}, got {value!r}.")
        if isinstance(self.cooldown_s, bool) or not isinstance(self.cooldown_s, int | float) \
                or not 0 <= self.cooldown_s < math.inf:
            raise InvalidOptionError(f"FlightTriggers.cooldown_s must be a number of seconds "
                                     f">= 0, got {self.cooldown_s!r}.")
        if self.signal is not None and self.signal not in set(signal.Signals):
            raise InvalidOptionError(f"FlightTriggers.signal must be a signal number or None, "
                                     f"got {self.signal!r}.")


@dataclass(frozen=True)
class Dump:
    """One saved window: the run's profile file, what triggered it and the step's figures."""

    path: Path
    trigger: str
    step: int | None
    step_ms: float | None
    detail: str


class StepMark:
    """One step of a flight recording: ``with fr.step(i):`` (a class, not a generator: it
    is on the loop's path every step)."""

    __slots__ = ("_annotation", "_fr", "_num", "_start_ns", "_t0")

    def __init__(self, fr: FlightRecorder, num: int, name: str) -> None:
        self._fr = fr
        self._num = num
        self._annotation = trace.Trace(name, step_num=num, _r=1)
        self._start_ns = 0
        self._t0 = 0

    def __enter__(self) -> StepMark:
        self._start_ns = time_ns()
        self._t0 = self._fr.clock()
        self._annotation.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._annotation.__exit__(exc_type, exc, tb)
        fr = self._fr
        error = exc if isinstance(exc, Exception) else None
        fr.step_done(self._num, self._start_ns, fr.clock() - self._t0, error=error)


class _Segment:
    """One slice of the window: a recorder, and the Python tracer that writes into it."""

    def __init__(self, max_events: int, options: ProfilerOptions, first_step: int) -> None:
        self.recorder = Recorder(max_events)
        self.start_ns = time_ns()
        self.first_step = first_step
        self.tracer = (PythonTracer(self.recorder, c_calls=options.python_tracer_level == 1)
                       if options.python_tracer_level >= 1 else None)
        self.closed_bytes = 0  # its bytes once another segment took over (they stay so)
        self.step_starts = array("q")  # when each step marked in it began (ns)

    @property
    def nbytes(self) -> int:
        """Bytes its events and step marks hold (``Recorder.nbytes``, without its lock: it is
        asked after every step, and a list read under the GIL is whole)."""
        rec = self.recorder
        total = self.step_starts.itemsize * len(self.step_starts)
        if rec.samples:
            total += len(rec.samples) * SAMPLE_BYTES
        for buffers in (rec.host_buffers, rec.python_buffers):
            for buf in buffers:
                if buf.records is not None:
                    total += buf.records.nbytes
                if buf.listed:
                    total += len(buf.listed) * LISTED_EVENT_BYTES
        return total


@dataclass
class _Pending:
    """A trigger waiting for its ``after`` steps; it holds the segments its window needs."""

    trigger: str
    detail: str
    step: int | None
    step_ms: float | None
    median_ms: float | None
    threshold_ms: float | None
    keep_from_ns: int
    after: int
    segments: list[_Segment]
    stop_ns: int = 0  # set when it is due: the window ends there
    future: Future[Dump | None] = field(default_factory=Future)


class FlightRecorder:
    """The ring of segments, the step judge and the triggers of one flight recording.

    ``seconds`` or ``steps`` is the window; ``max_bytes`` bounds the memory the ring's
    events hold (measured: the binary records' chunks, estimated for tuples); ``clock``
    times steps (nanoseconds; a fake one makes tests deterministic).
    """

    def __init__(self, logdir: str | os.PathLike[str], *, seconds: float | None = None,
                 steps: int | None = None, options: ProfilerOptions | None = None,
                 triggers: FlightTriggers | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], int] = perf_counter_ns) -> None:
        if (seconds is None) == (steps is None):
            raise InvalidOptionError("Pass seconds= or steps= (one of them): how much of the "
                                     "recent past the flight recorder keeps.")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                                  or not 1 <= steps <= 10**7):
            raise InvalidOptionError(f"steps must be an integer in 1..10000000, got {steps!r}.")
        if seconds is not None and (isinstance(seconds, bool) or
                                    not isinstance(seconds, int | float) or
                                    not 0.01 <= seconds <= 7 * 24 * 3600):
            raise InvalidOptionError(f"seconds must be a number in 0.01..604800, got "
                                     f"{seconds!r}.")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or \
                max_bytes < MIN_MAX_BYTES:
            raise InvalidOptionError(f"max_bytes must be an integer of at least "
                                     f"{MIN_MAX_BYTES} (16 MiB), got {max_bytes!r}.")
        options = DEFAULT_OPTIONS if options is None else options
        if not isinstance(options, ProfilerOptions):
            raise InvalidOptionError(f"options must be a stepscope.ProfilerOptions, got "
                                     f"{type(options).__name__}.")
        if options.memory_tracer_level or options.delay_ms:
            raise InvalidOptionError("The flight recorder does not take memory_tracer_level or "
                                     "delay_ms; leave them unset.")
        if triggers is None:
            triggers = FlightTriggers()
        elif not isinstance(triggers, FlightTriggers):
            raise InvalidOptionError(f"triggers must be a stepscope.FlightTriggers, got "
                                     f"{type(triggers).__name__}.")
        if not str(logdir):
            raise LogdirError("logdir is empty; pass the directory to write dumps into.")
        self.logdir = locations.as_path(logdir)
        self.seconds = seconds
        self.steps = steps
        self.options = options
        self.triggers = triggers
        self.max_bytes = max_bytes
        self.clock = clock
        # A segment's share of the bound, and the event cap that keeps a step within it.
        self.segment_bytes = max_bytes // KEPT_SEGMENTS
        self.segment_events = max(1, min(options.max_events,
                                         self.segment_bytes // EVENT_RECORD_BYTES))
        self.slice_steps = math.ceil(steps / SLICES) if steps is not None else 0
        self.slice_ns = int(seconds * 1e9 / SLICES) if seconds is not None else 0
        self.dumps: list[Dump] = []
        self.peak_current = 0  # the most bytes the recording segment held at a step's end
        self._segments: list[_Segment] = []
        self._closed_bytes = 0  # bytes of every segment but the recording one
        self._lock = threading.Lock()  # rotation, the pending list; never in a signal handler
        self._pending: list[_Pending] = []
        self._recent: deque[int] = deque()  # step times in the median, oldest first
        self._sorted: list[int] = []
        self._judged = 0  # steps seen (the warm-up counts them)
        self._step_counter = itertools.count()
        self._last_auto_ns: int | None = None
        self._auto_dumps = 0
        self._counters: SystemCounters | None = None
        self._writer: threading.Thread | None = None
        self._jobs: queue.Queue[_Pending | None] = queue.Queue()
        self._ticker: threading.Thread | None = None
        self._stop_ticker = threading.Event()
        self._old_handlers: dict[int, Any] = {}
        self._terminating = False
        self._running = False
        self._host = layout.local_hostname()

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the ring is recording."""
        return self._running

    def start(self) -> FlightRecorder:
        """Begin recording into the ring (and install the signal handlers it was asked for)."""
        if self._running:
            raise ProfilerAlreadyRunningError("This flight recorder is already running.")
        # What a dump needs (NumPy among it), imported now rather than at the first dump,
        # but not when the program imports stepscope.
        from stepscope.capture.flight_window import remove_stale_staging

        session.check_writable(self.logdir)
        if not locations.is_remote(self.logdir):
            remove_stale_staging(self.logdir)
        global _active
        with _active_lock:
            if _active is not None:
                raise ProfilerAlreadyRunningError(
                    "A flight recorder is already running; call "
                    "stepscope.flight_recorder.stop() before starting another.")
            with session._lock:
                session._refuse_if_running()
                _active = self
                self._running = True
                session.flight_running = _flight_running
                self._rotate_locked(0)
        try:
            self._start_helpers()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_helpers(self) -> None:
        """The counters, the writer, the ticker, the signal handlers, the exit hook."""
        if self.options.counter_interval_ms > 0:
            self._counters = SystemCounters(self._segments[-1].recorder,
                                            self.options.counter_interval_ms)
            self._counters.start()
        self._writer = threading.Thread(target=self._write_jobs, daemon=True,
                                        name="stepscope-flight-writer")
        python_tracer.leave_out(self._writer)
        self._writer.start()
        if self.seconds is not None:
            self._stop_ticker.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True,
                                            name="stepscope-flight-ticker")
            python_tracer.leave_out(self._ticker)
            self._ticker.start()
        self._install_signals()
        atexit.register(self._at_exit)

    def stop(self) -> list[Dump]:
        """Stop recording; triggers still waiting for their ``after`` steps are saved now.
        Returns every dump this recorder saved."""
        if not self._running:
            return list(self.dumps)
        self._restore_signals()
        atexit.unregister(self._at_exit)
        if self._ticker is not None:
            self._stop_ticker.set()
            self._ticker.join()
            self._ticker = None
        with self._lock:
            pending, self._pending = self._pending, []
            for job in pending:
                self._due_locked(job)
                self._jobs.put(job)
        self._jobs.put(None)
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        with session._lock:
            self._running = False
            trace.set_recorders(None, None, None)
            for seg in self._segments:
                if seg.tracer is not None:
                    seg.tracer.stop()
        if self._counters is not None:
            self._counters.stop()
            self._counters = None
        for seg in self._segments:
            seg.recorder.release()
        self._segments = []
        global _active
        with _active_lock:
            if _active is self:
                _active = None
        return list(self.dumps)

    def __enter__(self) -> FlightRecorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _at_exit(self) -> None:
        try:
            self.stop()
        except Exception as err:  # the interpreter is going: say so, do not raise
            log.warning("stepscope flight recorder could not finish at exit: %s", err)

    # ---- the ring ----------------------------------------------------------------------

    def _rotate_locked(self, first_step: int) -> None:
        """Start a new segment and route every tracer to it; drop the oldest beyond the
        window. Holds ``session._lock`` or ``self._lock``."""
        seg = _Segment(self.segment_events, self.options, first_step)
        old = self._segments[-1] if self._segments else None
        for gone in self._segments[:-(KEPT_SEGMENTS - 1)]:
            gone.recorder.release()
        self._segments = [*self._segments[-(KEPT_SEGMENTS - 1):], seg]
        self._closed_bytes = sum(s.closed_bytes for s in self._segments[:-1])
        level = self.options.host_tracer_level
        rec = seg.recorder
        trace.set_recorders(rec if level >= 1 else None, rec if level >= 2 else None,
                            rec if level >= 3 else None)
        if old is not None and old.tracer is not None:
            old.tracer.stop()
        if seg.tracer is not None:
            seg.tracer.start()
        if self._counters is not None:
            self._counters._recorder = rec  # samples from now on go to the new segment
        if old is not None:
            # Trace events that began before finish into the new segment: the old one is
            # done growing once the Python tracer has handed it its last calls.
            old.closed_bytes = old.nbytes
            self._closed_bytes += old.closed_bytes

    def _enforce_bound_locked(self, current_bytes: int) -> None:
        """Drop the oldest segments while the ring holds more than ``max_bytes``."""
        while len(self._segments) > 1 and self._closed_bytes + current_bytes > self.max_bytes:
            gone = self._segments.pop(0)
            self._closed_bytes -= gone.closed_bytes
            gone.recorder.release()

    @property
    def nbytes(self) -> int:
        """Bytes the ring's events hold now (all segments, measured)."""
        return sum(seg.nbytes for seg in list(self._segments))

    def _tick(self) -> None:
        """Rotate by time (the ``seconds`` window), whether or not steps are marked."""
        period = self.slice_ns / 1e9
        while not self._stop_ticker.wait(min(period, 1.0)):
            with self._lock:
                seg = self._segments[-1]
                full = time_ns() - seg.start_ns >= self.slice_ns
                current = seg.nbytes
                if full or current + CHUNK_BYTES > self.segment_bytes:
                    self._rotate_locked(seg.first_step)
                    current = 0
                self._enforce_bound_locked(current)

    # ---- steps ---------------------------------------------------------------------------

    def step(self, step_num: int | None = None, name: str = "train") -> StepMark:
        """Mark one step (as ``Trace(name, step_num=n, _r=1)``): it is timed and judged, and
        an exception escaping it triggers a dump. A context manager."""
        return StepMark(self, next(self._step_counter) if step_num is None else step_num,
                        name)

    def step_done(self, step_num: int, start_ns: int, duration_ns: int,
                  error: BaseException | None = None) -> None:
        """Account one finished step: judge it, count down waiting triggers, rotate."""
        segments = self._segments
        if not self._running or not segments:
            return
        segments[-1].step_starts.append(start_ns)
        if self._pending:  # before judging: a trigger of this step waits for the next ones
            self._count_down()
        trig = self.triggers
        self._judged += 1
        judged = self._judged > trig.warmup_steps
        if error is not None and trig.exception:
            self._trigger("exception", f"{type(error).__name__}: {error}"[:500], step_num,
                          duration_ns, start_ns)
        elif judged:
            median = self._median()
            threshold = self._threshold(median)
            if threshold is not None and duration_ns > threshold:
                self._trigger("slow_step", "", step_num, duration_ns, start_ns, median,
                              threshold)
        if judged:
            self._add_to_median(duration_ns)
        seg = self._segments[-1] if self._segments else None
        if seg is None:
            return
        current = seg.nbytes
        if current > self.peak_current:
            self.peak_current = current
        full = self.slice_steps and self._judged - seg.first_step >= self.slice_steps
        if full or current + CHUNK_BYTES > self.segment_bytes or \
                self._closed_bytes + current > self.max_bytes:
            with self._lock:
                if self._running:
                    if full or current + CHUNK_BYTES > self.segment_bytes:
                        self._rotate_locked(self._judged)
                        current = 0
                    self._enforce_bound_locked(current)

    def _median(self) -> int | None:
        s = self._sorted
        return s[len(s) // 2] if s else None

    def _threshold(self, median: int | None) -> int | None:
        trig = self.triggers
        limits = []
        if trig.slow_ms is not None:
            limits.append(int(trig.slow_ms * 1e6))
        if trig.slow_factor is not None and median is not None:
            limits.append(int(trig.slow_factor * median))
        return min(limits) if limits else None

    def _add_to_median(self, duration_ns: int) -> None:
        self._recent.append(duration_ns)
        bisect.insort(self._sorted, duration_ns)
        if len(self._recent) > self.triggers.median_steps:
            old = self._recent.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    # ---- triggers ---------------------------------------------------------------------

    def _window_start(self, step_num: int | None, step_start_ns: int | None,
                      now_ns: int) -> int:
        """Where a window ending at the trigger starts (ns since the epoch)."""
        if self.seconds is not None:
            return (step_start_ns if step_start_ns is not None else now_ns) - \
                int(self.seconds * 1e9)
        assert self.steps is not None
        # The window: the `steps` steps before the trigger step (this one included at the end).
        # Step starts are held by the segments (so they go with them): count back from the
        # newest, past the trigger step itself where it is the one just marked.
        need = self.steps + (1 if step_num is not None else 0)
        segments = list(self._segments)
        for seg in reversed(segments):
            held = len(seg.step_starts)
            if need <= held:
                return seg.step_starts[held - need]
            need -= held
        for seg in segments:  # fewer steps than the window so far: all of them
            if seg.step_starts:
                return seg.step_starts[0]
        return step_start_ns if step_start_ns is not None else now_ns

    def _trigger(self, trigger: str, detail: str, step: int | None = None,
                 duration_ns: int | None = None, step_start_ns: int | None = None,
                 median_ns: int | None = None, threshold_ns: int | None = None,
                 after: int | None = None, limited: bool | None = None) -> _Pending | None:
        """Record a trigger; its run is saved once ``after`` more steps are done. Automatic
        triggers (unless ``limited`` says otherwise) obey the cool-down and ``max_dumps``."""
        if trigger in AUTOMATIC if limited is None else limited:
            now = self.clock()
            trig = self.triggers
            if self._auto_dumps >= trig.max_dumps:
                return None
            if self._last_auto_ns is not None and \
                    now - self._last_auto_ns < trig.cooldown_s * 1e9:
                return None
            self._last_auto_ns = now
            self._auto_dumps += 1
        if self._judged == 0:
            after = 0  # no steps are marked: none will come to wait for
        with self._lock:
            pending = _Pending(
                trigger=trigger, detail=detail, step=step,
                step_ms=None if duration_ns is None else duration_ns / 1e6,
                median_ms=None if median_ns is None else median_ns / 1e6,
                threshold_ms=None if threshold_ns is None else threshold_ns / 1e6,
                keep_from_ns=self._window_start(step, step_start_ns, time_ns()),
                after=self.triggers.after_steps if after is None else after,
                segments=list(self._segments))
            if pending.after <= 0:
                self._due_locked(pending)
                self._jobs.put(pending)
            else:
                self._pending.append(pending)
        log.info("stepscope flight recorder: %s trigger at step %s", trigger, step)
        return pending

    def _due_locked(self, job: _Pending) -> None:
        """The window of ``job`` ends now: it keeps every segment that holds part of it (the
        ring may move on before the writer reads them)."""
        job.stop_ns = time_ns()
        held = {id(s) for s in job.segments}
        job.segments += [s for s in self._segments if id(s) not in held]

    def _count_down(self) -> None:
        with self._lock:
            ready = []
            for job in self._pending:
                job.after -= 1
                if job.after <= 0:
                    self._due_locked(job)
                    ready.append(job)
            self._pending = [job for job in self._pending if job.after > 0]
        for job in ready:
            self._jobs.put(job)

    def dump(self, reason: str = "call", *, wait: bool = True,
             timeout: float | None = 60.0) -> Dump | None:
        """Save the window now (``after`` steps are not waited for); with ``wait``, return
        the saved run once written (None if the write failed: a warning says why)."""
        if not self._running:
            raise ProfilerNotRunningError("The flight recorder is not running; start it "
                                          "first (stepscope.flight_recorder(logdir, ...)).")
        pending = self._trigger("call", reason[:500], after=0)
        assert pending is not None
        return pending.future.result(timeout) if wait else None

    def report_exception(self, error: BaseException, *, wait: bool = True,
                         timeout: float | None = 60.0) -> Dump | None:
        """Save the window because ``error`` ended the program (a launcher's last word): a
        dump named ``exception``, whatever the cool-down. A clean ``SystemExit`` is none."""
        if not self._running:
            return None
        if isinstance(error, SystemExit) and error.code in (0, None):
            return None
        pending = self._trigger("exception", f"{type(error).__name__}: {error}"[:500],
                                after=0, limited=False)
        return pending.future.result(timeout) if wait and pending is not None else None

    def snapshot(self) -> bytes:
        """The window as a serialised ``XSpace`` (for the profiler server), not saved here."""
        if not self._running:
            raise ProfilerNotRunningError("The flight recorder is not running.")
        now = time_ns()
        with self._lock:
            job = _Pending(trigger="snapshot", detail="a snapshot request (GetSnapshot)",
                           step=None, step_ms=None, median_ms=None, threshold_ms=None,
                           keep_from_ns=self._window_start(None, None, now), after=0,
                           segments=list(self._segments))
        job.stop_ns = now
        return self._space(job)

    # ---- writing ----------------------------------------------------------------------

    def _space(self, job: _Pending) -> bytes:
        segments = list(job.segments)
        env: dict[str, Any] = {
            schema.ENV_FLIGHT_TRIGGER: job.trigger,
            schema.ENV_FLIGHT_DETAIL: job.detail,
            schema.ENV_FLIGHT_STEP: job.step if isinstance(job.step, int) else -1,
            schema.ENV_FLIGHT_WINDOW: (f"steps={self.steps}" if self.steps is not None
                                       else f"seconds={self.seconds:g}"),
            schema.ENV_FLIGHT_AFTER_STEPS: self.triggers.after_steps,
            schema.ENV_FLIGHT_MAX_BYTES: self.max_bytes,
        }
        for key, value in ((schema.ENV_FLIGHT_STEP_MS, job.step_ms),
                           (schema.ENV_FLIGHT_MEDIAN_MS, job.median_ms),
                           (schema.ENV_FLIGHT_THRESHOLD_MS, job.threshold_ms)):
            if value is not None:
                env[key] = float(value)
        from stepscope.capture.flight_window import window_space

        return window_space([s.recorder for s in segments], keep_from_ns=job.keep_from_ns,
                            stop_ns=job.stop_ns or time_ns(), host=self._host,
                            options=self.options,
                            python=self.options.python_tracer_level >= 1, env=env)

    def _save(self, job: _Pending) -> Dump:
        from stepscope.capture.flight_window import save_run

        data = self._space(job)
        path = save_run(self.logdir, f"flight-{job.trigger}", self._host, data)
        dump = Dump(path, job.trigger, job.step, job.step_ms, job.detail)
        self.dumps.append(dump)
        log.warning("stepscope flight recorder saved the last %s (%s) to %s",
                    f"{self.steps} steps" if self.steps else f"{self.seconds:g} s",
                    job.trigger, path.parent)
        return dump

    def _write_jobs(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.future.set_result(self._save(job))
            except Exception as err:  # a full disk must not end the training loop
                warnings.warn(f"stepscope flight recorder could not save its {job.trigger} "
                              f"dump: {err}", FlightRecorderWarning, stacklevel=1)
                job.future.set_result(None)

    # ---- signals -------------------------------------------------------------------------

    def _install_signals(self) -> None:
        wanted: dict[int, Callable[[int, FrameType | None], None]] = {}
        if self.triggers.signal is not None:
            wanted[self.triggers.signal] = self._on_signal
        if self.triggers.sigterm:
            wanted[int(signal.SIGTERM)] = self._on_sigterm
        if not wanted:
            return
        if threading.current_thread() is not threading.main_thread():
            warnings.warn("stepscope flight recorder started off the main thread: no signal "
                          "triggers (SIGUSR1, SIGTERM); start it on the main thread for them.",
                          FlightRecorderWarning, stacklevel=3)
            return
        for signum, handler in wanted.items():
            self._old_handlers[signum] = signal.signal(signum, handler)

    def _restore_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, old in self._old_handlers.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)
        self._old_handlers = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Runs between two bytecodes of the main thread: only a list append under the lock
        # would be unsafe here, so the trigger is queued by a thread of its own.
        threading.Thread(target=self._trigger, args=("signal", f"signal {signum}"),
                         name="stepscope-flight-signal", daemon=True).start()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Save the window before the process exits, then do what SIGTERM did before."""
        old = self._old_handlers.get(signum, signal.SIG_DFL)
        if self._terminating:  # a second SIGTERM while the first one's dump is written
            return
        self._terminating = True
        try:
            now = time_ns()
            job = _Pending(trigger="sigterm", detail=f"signal {signum} (the process is "
                           "exiting)", step=None, step_ms=None, median_ms=None,
                           threshold_ms=None, keep_from_ns=self._window_start(None, None, now),
                           after=0, segments=list(self._segments), stop_ns=now)
            self._save(job)
        except Exception as err:
            log.warning("stepscope flight recorder could not save on SIGTERM: %s", err)
        signal.signal(signum, old if old is not None else signal.SIG_DFL)
        if callable(old):
            old(signum, frame)
        elif old == signal.SIG_DFL:
            os.kill(os.getpid(), signum)


# ---- the module-level door --------------------------------------------------------------

_active: FlightRecorder | None = None
_active_lock = threading.Lock()


def _flight_running() -> bool:
    recorder = _active
    return recorder is not None and recorder.running


def start(logdir: str | os.PathLike[str], *, seconds: float | None = None,
          steps: int | None = None, options: ProfilerOptions | None = None,
          triggers: FlightTriggers | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
          clock: Callable[[], int] = perf_counter_ns) -> FlightRecorder:
    """Start this process's flight recorder (see ``FlightRecorder``); return it."""
    recorder = FlightRecorder(logdir, seconds=seconds, steps=steps, options=options,
                              triggers=triggers, max_bytes=max_bytes, clock=clock)
    return recorder.start()


def stop() -> list[Dump]:
    """Stop this process's flight recorder; return the dumps it saved."""
    recorder = _active
    if recorder is None:
        raise ProfilerNotRunningError("No flight recorder is running; start one with "
                                      "stepscope.flight_recorder(logdir, steps=N).")
    return recorder.stop()


def active() -> FlightRecorder | None:
    """This process's running flight recorder, or None."""
    return _active


def _running() -> FlightRecorder:
    recorder = _active
    if recorder is None:
        raise ProfilerNotRunningError("No flight recorder is running; start one with "
                                      "stepscope.flight_recorder(logdir, steps=N).")
    return recorder


class _FlightRecorderDoor:
    """``stepscope.flight_recorder``: call it to start one (a context manager too), or use
    ``.start``, ``.stop``, ``.dump``, ``.step`` and ``.active`` on this process's."""

    def __call__(self, logdir: str | os.PathLike[str], *, seconds: float | None = None,
                 steps: int | None = None, options: ProfilerOptions | None = None,
                 triggers: FlightTriggers | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], int] = perf_counter_ns) -> FlightRecorder:
        """Start the flight recorder; ``with stepscope.flight_recorder(...)`` stops it."""
        return start(logdir, seconds=seconds, steps=steps, options=options,
                     triggers=triggers, max_bytes=max_bytes, clock=clock)

    start = staticmethod(start)
    stop = staticmethod(stop)
    active = staticmethod(active)

    @staticmethod
    def dump(reason: str = "call", *, wait: bool = True) -> Dump | None:
        """Save the running flight recorder's window now."""
        return _running().dump(reason, wait=wait)

    @staticmethod
    def step(step_num: int | None = None, name: str = "train") -> Any:
        """Mark one step of the running flight recorder (a context manager)."""
        return _running().step(step_num, name)


flight_recorder = _FlightRecorderDoor()


def dump(reason: str = "call", *, wait: bool = True) -> Dump | None:
    """Save the running flight recorder's window now (``stepscope.flight_recorder.dump``)."""
    return _running().dump(reason, wait=wait)


def snapshot() -> bytes:
    """The running flight recorder's window as a serialised ``XSpace`` (for the server)."""
    return _running().snapshot()


def start_from_args(logdir: str, *, seconds: float | None = None, steps: int | None = None,
                    slow_factor: float | None = 3.0, slow_ms: float | None = None,
                    warmup_steps: int = 20, after_steps: int = 2, max_dumps: int = 5,
                    cooldown_s: float = 60.0, max_bytes: int = DEFAULT_MAX_BYTES,
                    python_tracer: bool = False, counters: bool = False) -> FlightRecorder:
    """Start the flight recorder from command-line values (``stepscope profile
    --flight-recorder``). Without ``seconds`` or ``steps``, the last 1000 steps.

    A launcher runs the program inside it, and reports what ended it::

        fr = flight.start_from_args(logdir, steps=...)
        try:
            runpy.run_path(script, run_name="__main__")
        except BaseException as err:
            fr.report_exception(err)  # saves the window as an "exception" dump
            raise
        finally:
            flight.stop()

    The program marks its steps with ``stepscope.flight_recorder.step(i)`` (slow steps are
    judged only where steps are marked); SIGUSR1, SIGTERM and snapshots work regardless.
    """
    if seconds is None and steps is None:
        steps = 1000
    options = replace(DEFAULT_OPTIONS, python_tracer_level=1 if python_tracer else 0,
                      counter_interval_ms=50 if counters else 0)
    triggers = FlightTriggers(slow_factor=slow_factor, slow_ms=slow_ms,
                              warmup_steps=warmup_steps, after_steps=after_steps,
                              max_dumps=max_dumps, cooldown_s=cooldown_s)
    return start(logdir, seconds=seconds, steps=steps, options=options, triggers=triggers,
                 max_bytes=max_bytes)
