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
from pathlib import Path
from typing import Any

from stepscope.capture.bridges import BridgeData
from stepscope.capture.bridges.xspace import merge_space
from stepscope.capture.options import ProfilerOptions
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

FRAMEWORK = "tensorflow"
# TF's host tracer level at which op executions are traced (1 is user annotations only).
_TF_OPS_LEVEL = 2


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
                merge_space(read_space(path), data)
            return data
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def start(options: ProfilerOptions) -> TensorFlowBridge:
    """Start TF's profiler for a session with ``options``."""
    return TensorFlowBridge(options)
