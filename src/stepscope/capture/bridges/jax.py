"""JAX bridge: ``jax.profiler`` runs alongside the session; its planes are merged.

JAX's profiler records the XLA modules and ops it runs (on the CPU's XLA planes here, on
device planes where a GPU or TPU runs them), its runtime events and ``StepTraceAnnotation``
steps, and writes an XSpace into a private temporary directory, read back at the end. It
writes the same layout as TensorFlow (times relative to its profile's start, a ``/host:CPU``
plane with a line per thread), so the merge is the TensorFlow bridge's.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from stepscope.capture.bridges import BridgeData, version_tuple
from stepscope.capture.bridges.xspace import merge_space
from stepscope.capture.options import ProfilerOptions
from stepscope.errors import StepscopeError
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

FRAMEWORK = "jax"
MINIMUM_VERSION = (0, 4)  # jax.profiler.start_trace writing XSpace with ProfileOptions
# JAX's host tracer level at which its runtime and XLA execution are traced.
_JAX_OPS_LEVEL = 2


class JaxBridge:
    """``jax.profiler`` started for one stepscope session."""

    framework = FRAMEWORK

    def __init__(self, options: ProfilerOptions) -> None:
        jax: Any = sys.modules[FRAMEWORK]
        version = getattr(jax, "__version__", "0")
        profiler = getattr(jax, "profiler", None)
        if (version_tuple(version) < MINIMUM_VERSION or profiler is None
                or not hasattr(profiler, "ProfileOptions")):
            raise StepscopeError(
                f"JAX {version} is too old for stepscope's JAX bridge; it needs jax >= "
                f"{'.'.join(map(str, MINIMUM_VERSION))} with jax.profiler.ProfileOptions.")
        self._dir = Path(tempfile.mkdtemp(prefix="stepscope-jax-"))
        jax_options = profiler.ProfileOptions()
        jax_options.host_tracer_level = max(options.host_tracer_level, _JAX_OPS_LEVEL)
        jax_options.python_tracer_level = 0  # stepscope's own Python tracer covers Python
        try:
            profiler.start_trace(str(self._dir), profiler_options=jax_options)
        except Exception:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def stop(self) -> BridgeData:
        """Stop JAX's profiler and convert what it wrote."""
        jax: Any = sys.modules[FRAMEWORK]
        try:
            jax.profiler.stop_trace()
            data = BridgeData(FRAMEWORK)
            for path in sorted(self._dir.glob("plugins/profile/*/*" + schema.XPLANE_SUFFIX)):
                merge_space(read_space(path), data)
            return data
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


def start(options: ProfilerOptions) -> JaxBridge:
    """Start ``jax.profiler`` for a session with ``options``."""
    return JaxBridge(options)
