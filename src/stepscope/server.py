"""``stepscope.server``: the profiler server, as ``tf.profiler.experimental.server``.

``stepscope.server.start(6009)`` in a training process lets ``stepscope capture`` (or
TensorFlow's and TensorBoard's capture) take a profile of it on demand.
"""

from __future__ import annotations

from stepscope.remote.profiler_service import (
    DEFAULT_HOST,
    ProfilerServer,
    running_address,
    start,
    stop,
)

__all__ = ["DEFAULT_HOST", "ProfilerServer", "running_address", "start", "stop"]
