"""``Trace``: the user annotation, as ``tf.profiler.experimental.Trace``.

``Trace`` is the compiled type from ``_fastpath`` where it was built (about the cost of a
function call when no session records), else the pure-Python ``PyTrace`` below, which behaves
the same. Both hand finished events to the session's ``Recorder``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from time import time_ns
from types import TracebackType
from typing import Any, TypeVar

from stepscope.capture.recorder import Recorder
from stepscope.native import compiled

F = TypeVar("F", bound=Callable[..., Any])

# The recorder that takes user annotations, or None when none should be recorded. Set only
# by the session (host_tracer_level >= 1 and past delay_ms).
_annotations: Recorder | None = None
# The recorder that takes stepscope's own instrumentation events (host_tracer_level >= 2).
_instrumentation: Recorder | None = None
_verbose: Recorder | None = None


def set_recorders(annotations: Recorder | None, instrumentation: Recorder | None,
                  verbose: Recorder | None) -> None:
    """Route events of each host tracer level to a recorder (None turns that level off)."""
    global _annotations, _instrumentation, _verbose
    _annotations, _instrumentation, _verbose = annotations, instrumentation, verbose
    if _fastpath is not None:
        # The recorder's Sink takes Trace events without a Python call; else its add.
        _fastpath.set_recorder(None if annotations is None else
                               annotations.sink if annotations.sink is not None else
                               annotations.add)


class PyTrace:
    """Context manager (and decorator) that records a named event on the calling thread.

    ``Trace("train", step_num=3, _r=1)`` records an event named ``train`` with stats
    ``step_num=3`` and ``_r=1``; ``_r=1`` marks a step root, as in TensorFlow. Keyword
    arguments become stats of the event (TraceMe's ``name#key=value#``).
    """

    __slots__ = ("_name", "_stats", "_start")

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._name = name
        self._stats = kwargs
        self._start = 0

    def __enter__(self) -> PyTrace:
        if _annotations is not None:
            self._start = time_ns()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._start:
            recorder = _annotations
            if recorder is not None:
                recorder.add(self._name, self._start, time_ns(), self._stats or None)
            self._start = 0

    def set_metadata(self, **kwargs: Any) -> None:
        """Add or update stats of the event while it is open (as TF's ``Trace.set_metadata``)."""
        self._stats.update(kwargs)

    @property
    def name(self) -> str:
        """The event name."""
        return self._name

    def __call__(self, func: F) -> F:
        """Use as a decorator: every call of ``func`` is recorded as one event."""
        return _decorate(self._name, self._stats or None, func)


def _decorate(name: str, stats: dict[str, Any] | None, func: F) -> F:
    """Wrap ``func`` so that each call is recorded as an event named ``name``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        recorder = _annotations
        if recorder is None:
            return func(*args, **kwargs)
        start = time_ns()
        try:
            return func(*args, **kwargs)
        finally:
            recorder.add(name, start, time_ns(), dict(stats) if stats else None)

    return wrapper  # type: ignore[return-value]


_fastpath: Any = compiled("stepscope.capture._fastpath")

if _fastpath is not None:
    _fastpath.set_decorator(_decorate)
    # Typed as PyTrace: the compiled type has the same signature and methods.
    Trace: type[PyTrace] = _fastpath.Trace
else:
    _fastpath = None
    Trace = PyTrace


def record(name: str, start_ns: int, end_ns: int, level: int = 2, **stats: Any) -> None:
    """Record a complete event from stepscope's own instrumentation at a host tracer level."""
    recorder = _annotations if level <= 1 else _instrumentation if level == 2 else _verbose
    if recorder is not None:
        recorder.add(name, start_ns, end_ns, stats or None)
