"""Recording inside the profiled process: ``Trace``, the session and its tracers."""
