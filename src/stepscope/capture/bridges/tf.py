"""TensorFlow bridge: TF's own profiler runs alongside the session; its planes are merged.

TF records its op executions, tf.data iterators and runtime events (and device activity,
where a device tracer exists) with ``tf.profiler.experimental``; at the end we read the XSpace
it wrote into a private temporary directory. Its ``/host:CPU`` lines join our host plane
(the Python main thread's line is merged with ours, so TF's events nest inside the user's
``Trace`` steps); every other plane except its Task Environment is added as it is.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from stepscope.capture.bridges import BridgeData, HostLine
from stepscope.capture.bridges.xspace import host_lines, profile_start_ns, shift_plane
from stepscope.capture.options import ProfilerOptions
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

FRAMEWORK = "tensorflow"
# TF's host tracer level at which op executions are traced (1 is user annotations only).
_TF_OPS_LEVEL = 2


def _main_thread_os_name() -> str | None:
    """The OS name of the main thread, which TF uses to name its line (Linux only)."""
    try:
        return Path("/proc/self/comm").read_text().strip()
    except OSError:
        return None


class TensorFlowBridge:
    """TF's profiler, started for one stepscope session."""

    framework = FRAMEWORK

    def __init__(self, options: ProfilerOptions) -> None:
        tf: Any = sys.modules[FRAMEWORK]
        self._dir = Path(tempfile.mkdtemp(prefix="stepscope-tf-"))
        tf_options = tf.profiler.experimental.ProfilerOptions(
            # TF ops are framework activity, which device_tracer_level >= 1 asks for, so
            # they are traced even when our own host level keeps only user annotations.
            host_tracer_level=max(options.host_tracer_level, _TF_OPS_LEVEL),
            python_tracer_level=0,  # stepscope's own Python tracer covers Python calls
            device_tracer_level=options.device_tracer_level)
        try:
            tf.profiler.experimental.start(str(self._dir), options=tf_options)
        except Exception:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def stop(self) -> BridgeData:
        """Stop TF's profiler and convert what it wrote."""
        tf: Any = sys.modules[FRAMEWORK]
        try:
            tf.profiler.experimental.stop()
            files = sorted(self._dir.glob("plugins/profile/*/*" + schema.XPLANE_SUFFIX))
            data = BridgeData(FRAMEWORK)
            for path in files:
                _convert(read_space(path), data)
            return data
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def _convert(space: Any, data: BridgeData) -> None:
    """Add the host lines and device planes of TF's ``space`` to ``data``, times absolute."""
    base = profile_start_ns(space)
    main_name = _main_thread_os_name()
    main_id = threading.main_thread().native_id
    for plane in space.planes:
        if plane.name == schema.TASK_ENV_PLANE:
            continue  # ours describes the session
        if plane.name != schema.HOST_PLANE:
            data.planes.append(shift_plane(plane, base))
            continue
        lines = host_lines(plane, base)
        mains = [line for line in lines if main_name and line.name == main_name]
        for line in lines:
            if len(mains) == 1 and line is mains[0] and main_id is not None:
                line = HostLine(main_id, threading.main_thread().name, line.events)
            data.host_lines.append(line)


def start(options: ProfilerOptions) -> TensorFlowBridge:
    """Start TF's profiler for a session with ``options``."""
    return TensorFlowBridge(options)
