"""``stepscope.client``: capture running workers, as ``tf.profiler.experimental.client``.

``stepscope.client.trace("grpc://127.0.0.1:6009", "logs/", duration_ms=2000)`` writes one
run with one ``<host>_<port>.xplane.pb`` per worker.
"""

from __future__ import annotations

from stepscope.remote.client import CaptureResult, WorkerProgress, WorkerResult, trace

__all__ = ["CaptureResult", "WorkerProgress", "WorkerResult", "trace"]
