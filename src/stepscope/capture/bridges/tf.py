"""TensorFlow bridge: TF's own profiler runs alongside the session; its planes are merged.

TF records its op executions, tf.data iterators and runtime events (and device activity,
where a device tracer exists) with ``tf.profiler.experimental``; at the end we read the XSpace
it wrote into a private temporary directory. Its ``/host:CPU`` lines join our host plane
(the Python main thread's line is merged with ours, so TF's events nest inside the user's
``Trace`` steps); every other plane except its Task Environment is added as it is.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stepscope.capture.bridges import BridgeData
from stepscope.capture.bridges.xspace import merge_space
from stepscope.capture.options import ProfilerOptions
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

FRAMEWORK = "tensorflow"
log = logging.getLogger(__name__)

# TF's host tracer level at which op executions are traced (1 is user annotations only).
_TF_OPS_LEVEL = 2
# The options TF's profiler session uses when it is given none (tsl's ProfileOptions
# defaults as TF sets them: host 2, device 1, Python 0, no delay).
_TF_DEFAULTS = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0}


@contextmanager
def _native_stderr_to_log() -> Iterator[None]:
    """While TF's profiler starts or stops, what its C++ code writes to file descriptor 2
    (its "Profiler session started" lines, the temporary folder it collects into, and, in
    TF 2.21, an "expects an i value" warning per option it is given from Python, since its
    binding's option map never takes a Python int) goes to this module's debug log instead
    of the user's terminal: kept, not shown."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (a daemon): nothing to keep out
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", "replace").strip()
            if text:
                log.debug("TensorFlow's profiler said: %s", text)


class TensorFlowBridge:
    """TF's profiler, started for one stepscope session."""

    framework = FRAMEWORK

    def __init__(self, options: ProfilerOptions) -> None:
        tf: Any = sys.modules[FRAMEWORK]
        self._dir = Path(tempfile.mkdtemp(prefix="stepscope-tf-"))
        wanted = {
            # TF ops are framework activity, which device_tracer_level >= 1 asks for, so
            # they are traced even when our own host level keeps only user annotations.
            "host_tracer_level": max(options.host_tracer_level, _TF_OPS_LEVEL),
            "python_tracer_level": 0,  # stepscope's own Python tracer covers Python calls
            "device_tracer_level": options.device_tracer_level}
        # Options equal to TF's defaults are not passed: TF then uses the same levels, and
        # has no option to warn about.
        tf_options = (None if wanted == _TF_DEFAULTS
                      else tf.profiler.experimental.ProfilerOptions(**wanted))
        try:
            with _native_stderr_to_log():
                tf.profiler.experimental.start(str(self._dir), options=tf_options)
        except Exception:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def stop(self) -> BridgeData:
        """Stop TF's profiler and convert what it wrote."""
        tf: Any = sys.modules[FRAMEWORK]
        try:
            with _native_stderr_to_log():
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
