"""stepscope: a profiler for machine-learning programs in Python.

The capture API mirrors ``tf.profiler.experimental``::

    import stepscope as prof
    prof.start("logs", options=prof.ProfilerOptions(python_tracer_level=1))
    with prof.Trace("train", step_num=step, _r=1):
        ...
    prof.stop()

and ``stepscope.open(path)`` opens a run for analysis: one method per tool, each answer as
JSON, columns or a DataFrame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.errors import (
    InvalidOptionError,
    LogdirError,
    ProfileFormatError,
    ProfilerAlreadyRunningError,
    ProfilerNotRunningError,
    StepscopeError,
)
from stepscope.version import __version__

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

    from stepscope.capture.flight import FlightTriggers, flight_recorder
    from stepscope.capture.options import ProfilerOptions
    from stepscope.capture.session import DroppedEventsWarning, Profile, start, stop
    from stepscope.capture.trace import Trace
    from stepscope.model.run_tables import RunTables
    from stepscope.run import Run

# The capture API, imported on first use: reading a profile (the CLI's ``report``, ``serve``)
# must not pay for the recorder, its tracers and psutil. Name → the module that defines it.
_CAPTURE = {
    "FlightTriggers": "stepscope.capture.flight",
    "flight_recorder": "stepscope.capture.flight",
    "ProfilerOptions": "stepscope.capture.options",
    "DroppedEventsWarning": "stepscope.capture.session",
    "Profile": "stepscope.capture.session",
    "start": "stepscope.capture.session",
    "stop": "stepscope.capture.session",
    "Trace": "stepscope.capture.trace",
}


def load(path: str, *, use_cache: bool = True) -> RunTables:
    """Load a profile: a logdir (its newest run), a run directory, or one file.

    XSpace (``.xplane.pb``) from TensorFlow, JAX or stepscope, PyTorch traces
    (``.json``/``.json.gz``), and TensorFlow's legacy RunMetadata/StepStats (``.pb``/``.pbtxt``)
    and timeline ``ctf.json``; see ``stepscope.analysis`` for what to do with it.
    """
    from stepscope.formats.run_reader import load as _load

    return _load(path, use_cache=use_cache)


def open(path: str | Path, *, engine: str = "auto", cache: bool = True) -> Run:  # noqa: A001
    """Open a run for analysis: a logdir (its newest run), a run directory, one file, or a
    URL of any of these (``gs://``, ``s3://``, ...). Every tool is a method of the ``Run``
    (``run.overview()``, ``run.op_stats()``, ... or ``run.tool(name, **params)``), and each
    answer has ``to_dict()``, ``table()``, ``to_pandas()`` and ``to_arrow()``.
    ``engine``: where each host is analysed (``local``, ``pool``, ``ray``; ``auto`` picks);
    ``cache``: read and keep results in the on-disk cache."""
    from stepscope.run import open_run

    return open_run(path, engine=engine, cache=cache)


def __getattr__(name: str) -> Any:
    """The capture API (``start``, ``stop``, ``Trace``, ...), and ``stepscope.server``,
    ``stepscope.client`` (they load gRPC), ``stepscope.keras`` (it loads Keras),
    ``stepscope.torch`` and ``stepscope.timeline``, imported on first use."""
    import importlib

    if name in _CAPTURE:
        value = getattr(importlib.import_module(_CAPTURE[name]), name)
        globals()[name] = value  # later lookups find it without this function
        return value
    if name in ("server", "client", "keras", "torch", "timeline"):
        module: ModuleType = importlib.import_module(f"stepscope.{name}")
        return module
    raise AttributeError(f"module 'stepscope' has no attribute {name!r}")


__all__ = [
    "DroppedEventsWarning",
    "FlightTriggers",
    "InvalidOptionError",
    "LogdirError",
    "Profile",
    "ProfileFormatError",
    "ProfilerAlreadyRunningError",
    "ProfilerNotRunningError",
    "ProfilerOptions",
    "StepscopeError",
    "Trace",
    "__version__",
    "flight_recorder",
    "load",
    "open",
    "start",
    "stop",
]
