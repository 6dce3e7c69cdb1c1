"""stepscope: a profiler for machine-learning programs in Python.

The capture API mirrors ``tf.profiler.experimental``::

    import stepscope as prof
    prof.start("logs", options=prof.ProfilerOptions(python_tracer_level=1))
    with prof.Trace("train", step_num=step, _r=1):
        ...
    prof.stop()
"""

from __future__ import annotations

__version__ = "0.1.0"

from stepscope.capture.options import ProfilerOptions  # noqa: E402
from stepscope.capture.session import DroppedEventsWarning, Profile, start, stop  # noqa: E402
from stepscope.capture.trace import Trace  # noqa: E402
from stepscope.errors import (  # noqa: E402
    InvalidOptionError,
    LogdirError,
    ProfileFormatError,
    ProfilerAlreadyRunningError,
    ProfilerNotRunningError,
    StepscopeError,
)

__all__ = [
    "DroppedEventsWarning",
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
    "start",
    "stop",
]
