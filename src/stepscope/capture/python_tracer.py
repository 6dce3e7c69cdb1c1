"""The Python tracer: every Python function call and return, on every thread, as events.

Uses the interpreter's profile hook on every thread already running (Python 3.12's
``threading.setprofile_all_threads``, or our compiled fast path before 3.12; without either,
only the calling thread) and on threads started later (``threading.setprofile``). Events are
named as TensorFlow's Python tracer names them: ``$<file>:<line> <function>`` for Python code
and ``$<module>.<name>`` for C functions.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from time import time_ns
from types import CodeType, FrameType
from typing import Any

from stepscope.capture.recorder import Recorder, ThreadBuffer

ProfileFunc = Callable[[FrameType, str, Any], object]


class PythonTracer:
    """Installs the profile hook on start and removes it on stop."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._active = False
        # Per-thread call stacks, so frames still open at stop can be closed there.
        self._stacks: list[tuple[ThreadBuffer, list[tuple[int, Any]]]] = []
        self._lock = threading.Lock()

    def _make_hook(self) -> ProfileFunc:
        """A profile function bound to the calling thread's own buffer and stack."""
        recorder = self._recorder
        buf = recorder.python_buffer()
        stack: list[tuple[int, Any]] = []
        with self._lock:
            self._stacks.append((buf, stack))
        events = buf.events
        admit = recorder.admit
        push, pop = stack.append, stack.pop
        tracer = self

        def hook(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
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

        return hook

    def _bootstrap(self, frame: FrameType, event: str, arg: Any) -> None:
        """First hook of a thread: swap in a hook that owns this thread's buffer."""
        if not self._active:
            sys.setprofile(None)
            return
        hook = self._make_hook()
        sys.setprofile(hook)
        hook(frame, event, arg)

    def start(self) -> None:
        """Begin tracing the current thread and every thread started from now on."""
        self._active = True
        threading.setprofile(self._bootstrap)
        set_all = _set_profile_all_threads()
        if set_all is not None:  # reach threads that are already running too
            set_all(self._bootstrap)
        else:
            sys.setprofile(self._bootstrap)

    def stop(self) -> None:
        """Stop tracing; frames still open are closed at the stop time."""
        self._active = False
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        set_all = _set_profile_all_threads()
        if set_all is not None:
            set_all(None)
        now = time_ns()
        with self._lock:
            for buf, stack in self._stacks:
                while stack:
                    start, what = stack.pop()
                    if self._recorder.admit():
                        name = what if isinstance(what, CodeType) else _c_name(what)
                        buf.events.append((name, start, now))

    @staticmethod
    def event_name(what: Any, cache: dict[Any, str]) -> str:
        """The display name of a recorded code object or C-function name."""
        if isinstance(what, str):
            return what
        name = cache.get(what)
        if name is None:
            qualname = getattr(what, "co_qualname", what.co_name)
            name = f"${os.path.basename(what.co_filename)}:{what.co_firstlineno} {qualname}"
            cache[what] = name
        return name


def _set_profile_all_threads() -> Callable[[Any], None] | None:
    """A function installing a profile hook on every running thread, where one exists."""
    set_all = getattr(threading, "setprofile_all_threads", None)  # Python 3.12+
    if set_all is not None:
        return set_all  # type: ignore[no-any-return]
    from stepscope.capture.trace import _fastpath

    return _fastpath.set_profile_all_threads if _fastpath is not None else None


def _c_name(func: Any) -> str:
    """``$module.qualname`` of a builtin function or method."""
    owner = getattr(func, "__self__", None)
    qualname = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", "?"))
    if owner is not None and not isinstance(owner, type(sys)):
        return f"${type(owner).__module__}.{qualname}" if "." in qualname else f"${qualname}"
    module = getattr(func, "__module__", None)
    return f"${module}.{qualname}" if module else f"${qualname}"
