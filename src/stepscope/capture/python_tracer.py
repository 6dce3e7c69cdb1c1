"""The Python tracer: every Python function call and return, on every thread, as events.

Uses the interpreter's profile hook on every thread already running (Python 3.12's
``threading.setprofile_all_threads``, or our compiled fast path before 3.12; without either,
only the calling thread) and on threads started later (``threading.setprofile``). Events are
named as TensorFlow's Python tracer names them: ``$<file>:<line> <function>`` for Python code
and ``$<module>.<name>`` for C functions.

stepscope's own threads (the counter sampler, the profiler server's, the capture client's, a
delayed start's timer) are left out: their calls are the profiler's work, not the program's.
Every thread's first hook event goes through ``_bootstrap``, which drops the hook there.

The hook on each thread is the compiled ``_pyhook.ThreadHook`` where it was built, else the
pure-Python hook below; both record the same events. ``STEPSCOPE_PURE_PYTHON`` forces the
pure-Python one, as it does for ``Trace``. The compiled hook writes each finished call into
its thread buffer's binary records at once (16 bytes, the code object or C-function name
interned, its id cached in the hook), where the recorder has them; else it keeps them in C and
hands them to the buffer's list as tuples on ``stop`` (or ``flush``), in the order they
happened.

Two modes. ``c_calls=True`` (``python_tracer_level=1``): Python and C function calls, through
the profile hook above. ``c_calls=False`` (level 2): Python functions only, through a cheaper
hook where the compiled module has one (``engine``): on 3.10-3.11 a frame-evaluation function
(PEP 523, interpreter-wide, so it reaches every thread), on 3.12+ sys.monitoring's PY_* events
with compiled callbacks. A profile function makes 3.11 run every instruction through its
tracing path, unspecialised, which alone costs a call-heavy program about 4x; the
frame-evaluation hook leaves the instructions alone. Without the compiled module, level 2 is
the pure-Python profile hook ignoring C functions' events: the same events, which the tests
compare. Threads find their hook themselves there, through ``_thread_hook`` on their first
frame.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import weakref
from collections.abc import Callable
from time import time_ns
from types import CodeType, FrameType
from typing import Any

from stepscope.capture.recorder import Recorder, ThreadBuffer
from stepscope.native import compiled

ProfileFunc = Callable[[FrameType, str, Any], object]
# Empties one thread's stack of open calls: (start_ns, code or C callable), innermost first.
Drain = Callable[[], list[tuple[int, Any]]]
# Moves the events one thread's hook holds back into its buffer (the compiled hook batches).
Flush = Callable[[], None]

_pyhook: Any = compiled("stepscope.capture._pyhook")


# Threads stepscope starts for itself, never traced (see ``leave_out``).
_left_out: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
# Thread pools of stepscope's that make their threads on demand: known by name instead.
PROFILER_SERVER_POOL = "stepscope-profiler-server"
LEFT_OUT_POOLS = (PROFILER_SERVER_POOL,)


def leave_out(thread: threading.Thread) -> None:
    """Never trace ``thread``: one of stepscope's own (register it before it starts)."""
    _left_out.add(thread)


def is_left_out(thread: threading.Thread) -> bool:
    """Whether ``thread`` is one of stepscope's own, which the tracer leaves out."""
    return thread in _left_out or thread.name.startswith(LEFT_OUT_POOLS)


# How a tracer hooks the interpreter (``PythonTracer.engine``).
PROFILE = "profile"        # a profile function per thread (sys.setprofile's hook)
FRAME = "frame"            # a frame-evaluation function (PEP 523), Python 3.10-3.11
MONITORING = "monitoring"  # sys.monitoring's PY_* events, Python 3.12+
# The sys.monitoring tool id the Python-only mode takes (the one meant for profilers).
MONITORING_TOOL = 2


class PythonTracer:
    """Installs the hooks on start and removes them on stop.

    ``c_calls`` False records Python functions only (``python_tracer_level=2``): no C
    function calls, through a much cheaper hook where one is built (see ``engine``)."""

    def __init__(self, recorder: Recorder, c_calls: bool = True) -> None:
        self._recorder = recorder
        self.c_calls = c_calls
        self._active = False
        # Each thread's buffer, how to flush its hook's events into it, and how to empty its
        # call stack, so that frames still open at stop can be closed there.
        self._threads: list[tuple[ThreadBuffer, Flush, Drain]] = []
        self._lock = threading.Lock()
        # The compiled hook counts events on the recorder's own counter, as Recorder.admit
        # does, without a Python call per event; it needs that counter to be the usual one.
        counter = getattr(recorder, "_counter", None)
        self._native: Any = _pyhook if isinstance(counter, itertools.count) else None
        self._state: Any = (self._native.HookState(counter, recorder.max_events, _c_name,
                                                   c_calls)
                            if self._native is not None else None)
        self.engine = self._pick_engine()

    def _pick_engine(self) -> str:
        """The cheapest hook that records what was asked for (``PROFILE`` records C calls)."""
        if self.c_calls or self._native is None:
            return PROFILE
        if hasattr(self._native, "install_frame_hook"):
            return FRAME
        monitoring = getattr(sys, "monitoring", None)
        if (hasattr(self._native, "set_monitoring_hooks") and monitoring is not None
                and monitoring.get_tool(MONITORING_TOOL) is None):
            return MONITORING
        return PROFILE

    @property
    def compiled(self) -> bool:
        """Whether threads get the compiled hook (else the pure-Python one)."""
        return self._native is not None

    def _make_hook(self) -> ProfileFunc:
        """A profile function bound to the calling thread's own buffer and stack."""
        buf = self._recorder.python_buffer()
        if self._native is not None:
            hook = self._native.ThreadHook(
                self._state, buf.records if buf.records is not None else buf.events)
            flush: Flush = hook.flush
            drain: Drain = hook.drain
        else:
            hook, drain = self._make_python_hook(buf.listed)
            flush = _nothing_to_flush
        with self._lock:
            self._threads.append((buf, flush, drain))
        return hook  # type: ignore[no-any-return]

    def _make_python_hook(self, events: list[Any]) -> tuple[ProfileFunc, Drain]:
        """The pure-Python profile function appending to ``events``, and its stack's drain."""
        stack: list[tuple[int, Any]] = []
        admit = self._recorder.admit
        push, pop = stack.append, stack.pop
        tracer = self

        c_calls = self.c_calls

        def hook(frame: FrameType, event: str, arg: Any) -> None:
            if not c_calls and event[:2] == "c_":
                pass
            elif event == "call":
                push((time_ns(), frame.f_code))
            elif event == "return" and stack:
                start, what = pop()
                if admit():
                    events.append((what, start, time_ns()))
            elif event == "c_call":
                push((time_ns(), arg))
            elif (event == "c_return" or event == "c_exception") and stack:
                start, what = pop()
                if admit():
                    events.append((_c_name(what), start, time_ns()))
            if not tracer._active:
                sys.setprofile(None)

        def drain() -> list[tuple[int, Any]]:
            popped: list[tuple[int, Any]] = []
            while True:
                try:  # the thread may still be popping its own stack
                    popped.append(pop())
                except IndexError:
                    return popped

        return hook, drain

    def _bootstrap(self, frame: FrameType, event: str, arg: Any) -> None:
        """First hook of a thread: swap in a hook that owns this thread's buffer (or none, on
        a thread of stepscope's own)."""
        if not self._active or is_left_out(threading.current_thread()):
            sys.setprofile(None)
            return
        hook = self._make_hook()
        if self._native is not None:
            self._native.install(hook)
        else:
            sys.setprofile(hook)
        # This event's call (if it is one) returns to the new hook, so it must see it too.
        hook(frame, event, arg)

    def _thread_hook(self) -> Any:
        """A thread's first frame under the frame or monitoring hook: its ThreadHook, None
        for a thread of stepscope's own, or False while a starting thread is not yet known to
        ``threading`` (then its next frame asks again). Called from C, on that thread."""
        if not self._active:
            return None
        known = getattr(threading, "_active", None)
        # A thread between start() and its registration (its name is not known yet) while
        # threads are starting; else one made outside ``threading`` (named as a dummy).
        if (known is not None and threading.get_ident() not in known
                and getattr(threading, "_limbo", None)):
            return False
        if is_left_out(threading.current_thread()):
            return None
        return self._make_hook()

    def start(self) -> None:
        """Begin tracing the current thread and every thread started from now on."""
        self._active = True
        if self._state is not None:
            self._state.active = True
        if self.engine == FRAME:
            self._native.install_frame_hook(self._state, self._thread_hook)
            return
        if self.engine == MONITORING:
            try:
                self._start_monitoring()
                return
            except ValueError:  # another tool took the id since: the profile hook instead
                self.engine = PROFILE
        threading.setprofile(self._bootstrap)
        set_all = _set_profile_all_threads()
        if set_all is not None:  # reach threads that are already running too
            set_all(self._bootstrap)
        else:
            sys.setprofile(self._bootstrap)

    def stop(self) -> None:
        """Stop tracing; frames still open are closed at the stop time."""
        self._active = False
        if self._state is not None:
            self._state.active = False  # hooks on threads not reached below remove themselves
        if self.engine == FRAME:
            self._native.uninstall_frame_hook()
        elif self.engine == MONITORING:
            self._stop_monitoring()
        else:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            set_all = _set_profile_all_threads()
            if set_all is not None:
                set_all(None)
        # The hooks' own clock: never before an end they recorded, so closed calls still nest.
        now = self._native.now_ns() if self._native is not None else time_ns()
        admit = self._recorder.admit
        with self._lock:
            for buf, flush, drain in self._threads:
                flush()
                for start, what in drain():
                    if admit():
                        buf.add(what if isinstance(what, CodeType) else _c_name(what),
                                start, now)

    def _start_monitoring(self) -> None:
        """Python 3.12+: the compiled callbacks on sys.monitoring's PY_* events."""
        monitoring: Any = sys.monitoring  # type: ignore[attr-defined, unused-ignore]
        events = monitoring.events
        monitoring.use_tool_id(MONITORING_TOOL, "stepscope")
        self._native.set_monitoring_hooks(self._state, self._thread_hook)
        for event in (events.PY_START, events.PY_RESUME, events.PY_THROW):
            monitoring.register_callback(MONITORING_TOOL, event, self._native.monitoring_start)
        for event in (events.PY_RETURN, events.PY_YIELD, events.PY_UNWIND):
            monitoring.register_callback(MONITORING_TOOL, event, self._native.monitoring_end)
        monitoring.set_events(MONITORING_TOOL, events.PY_START | events.PY_RESUME
                              | events.PY_THROW | events.PY_RETURN | events.PY_YIELD
                              | events.PY_UNWIND)

    def _stop_monitoring(self) -> None:
        monitoring: Any = sys.monitoring  # type: ignore[attr-defined, unused-ignore]
        monitoring.set_events(MONITORING_TOOL, 0)
        events = monitoring.events
        for event in (events.PY_START, events.PY_RESUME, events.PY_THROW, events.PY_RETURN,
                      events.PY_YIELD, events.PY_UNWIND):
            monitoring.register_callback(MONITORING_TOOL, event, None)
        monitoring.free_tool_id(MONITORING_TOOL)
        self._native.set_monitoring_hooks(None, None)

    def flush(self) -> None:
        """Bring every thread's buffer up to date while tracing (``stop`` does it too)."""
        with self._lock:
            for _buf, flush, _drain in self._threads:
                flush()

    @staticmethod
    def event_name(what: Any, cache: dict[Any, str]) -> str:
        """The display name of a recorded code object or C-function name."""
        if isinstance(what, str):
            return what
        name = cache.get(what)
        if name is None:
            qualname = getattr(what, "co_qualname", None) or _qualname_310(what)
            name = f"${os.path.basename(what.co_filename)}:{what.co_firstlineno} {qualname}"
            cache[what] = name
        return name


# Python 3.10's code objects have no co_qualname. There the compiler put each function's
# qualified name in the enclosing code's constants, loaded just before MAKE_FUNCTION; recompiling
# the file gives them back. Per file: (co_firstlineno, co_name) -> the qualified names there.
_qualnames_310: dict[str, dict[tuple[int, str], set[str]]] = {}


def _qualname_310(code: CodeType) -> str:
    """``code``'s qualified name on Python 3.10 (``f.<locals>.g``), found by recompiling its
    source file; its bare ``co_name`` where the source is gone, changed, or leaves it open
    (two functions of the same name on one line, under different qualified names)."""
    if code.co_name == "<module>":
        return code.co_name
    names = _qualnames_310.get(code.co_filename)
    if names is None:
        names = _qualnames_310[code.co_filename] = _qualnames_in(code.co_filename)
    found = names.get((code.co_firstlineno, code.co_name), ())
    return next(iter(found)) if len(found) == 1 else code.co_name


def _qualnames_in(filename: str) -> dict[tuple[int, str], set[str]]:
    """Every function's and class body's qualified name in the Python file ``filename``."""
    import dis
    import linecache

    load_const, extended_arg = dis.opmap["LOAD_CONST"], dis.opmap["EXTENDED_ARG"]
    names: dict[tuple[int, str], set[str]] = {}
    source = "".join(linecache.getlines(filename))
    try:
        todo = [compile(source, filename, "exec", dont_inherit=True)] if source else []
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        todo = []
    while todo:
        code = todo.pop()
        consts, raw = code.co_consts, code.co_code
        # 3.10's instructions: two bytes each, opcode and argument (EXTENDED_ARG widening it);
        # read directly, as dis.get_instructions is ten times slower.
        loaded: Any = None
        arg = 0
        for i in range(0, len(raw) - 1, 2):
            op = raw[i]
            arg = arg << 8 | raw[i + 1]
            if op == extended_arg:
                continue
            value = consts[arg] if op == load_const else None
            if isinstance(loaded, CodeType) and isinstance(value, str):
                names.setdefault((loaded.co_firstlineno, loaded.co_name), set()).add(value)
            loaded, arg = value, 0
        todo.extend(c for c in consts if isinstance(c, CodeType))
    return names


def _nothing_to_flush() -> None:
    """The pure-Python hook appends each event to the buffer as it happens."""


def _set_profile_all_threads() -> Callable[[Any], None] | None:
    """A function installing a profile hook on every running thread, where one exists."""
    set_all = getattr(threading, "setprofile_all_threads", None)  # Python 3.12+
    if set_all is not None:
        return set_all  # type: ignore[no-any-return]
    # Not subject to STEPSCOPE_PURE_PYTHON: there is no pure-Python way to do this before 3.12.
    fastpath = compiled("stepscope.capture._fastpath", honour_pure_python=False)
    return None if fastpath is None else fastpath.set_profile_all_threads


def _c_name(func: Any) -> str:
    """``$module.qualname`` of a builtin function or method."""
    owner = getattr(func, "__self__", None)
    qualname = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", "?"))
    if owner is not None and not isinstance(owner, type(sys)):
        return f"${type(owner).__module__}.{qualname}" if "." in qualname else f"${qualname}"
    module = getattr(func, "__module__", None)
    return f"${module}.{qualname}" if module else f"${qualname}"
