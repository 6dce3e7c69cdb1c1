"""Framework bridges: run a framework's own profiler alongside a stepscope session.

A bridge starts when a session begins recording with ``device_tracer_level >= 1`` and its
framework is *already imported* in the process (stepscope never imports a framework itself),
and at the end hands back what the framework recorded as host events by thread and as whole
extra planes (devices), on the session's clock. A bridge that fails warns and is left out:
stepscope's own events are never lost to it.
"""

from __future__ import annotations

import importlib
import logging
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from stepscope.capture.options import ProfilerOptions
from stepscope.capture.recorder import Event
from stepscope.errors import StepscopeWarning

log = logging.getLogger(__name__)

# (framework, modules of which one must already be imported, stepscope module holding its
# bridge). A bridge module is imported only when its framework is, so unused ones cost nothing.
REGISTRY: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("tensorflow", ("tensorflow",), "stepscope.capture.bridges.tf"),
    ("torch", ("torch",), "stepscope.capture.bridges.pytorch"),
    ("jax", ("jax",), "stepscope.capture.bridges.jax"),
    # CUDA without a framework: CuPy, Numba, PyCUDA or cuda-python (NVIDIA's bindings).
    ("CUDA", ("cupy", "numba", "pycuda", "cuda"), "stepscope.capture.bridges.cuda"),
)


class BridgeWarning(StepscopeWarning):
    """A framework bridge could not start or stop; the profile lacks that framework's events."""


@dataclass
class HostLine:
    """Events a framework recorded on one host thread (times in ns, session clock)."""

    line_id: int
    name: str
    events: list[Event] = field(default_factory=list)


@dataclass
class BridgeData:
    """What one bridge recorded: host lines to merge and planes (XPlane messages) to add."""

    framework: str
    host_lines: list[HostLine] = field(default_factory=list)
    planes: list[Any] = field(default_factory=list)


class Bridge(Protocol):
    """A framework profiler started for the session; ``stop`` ends it and returns its data."""

    framework: str

    def stop(self) -> BridgeData:
        """Stop the framework's profiler and return what it recorded."""


def version_tuple(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``"2.13.0+cpu"``; (0, 0) if unreadable."""
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def _warn(message: str) -> None:
    warnings.warn(message, BridgeWarning, stacklevel=4)
    log.warning(message)


def _imported(name: str) -> bool:
    """Whether module ``name`` is imported and done initialising (not mid-import, as a
    framework is while it imports another that sets a bridge starting)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and not getattr(spec, "_initializing", False)


def start_all(options: ProfilerOptions, running: frozenset[str] = frozenset()) -> list[Bridge]:
    """Start the bridge of every imported framework (none when ``device_tracer_level`` is 0),
    but for the frameworks named in ``running``, whose bridges already run."""
    started: list[Bridge] = []
    if options.device_tracer_level < 1:
        return started
    for framework, triggers, module_name in REGISTRY:
        if framework in running or not any(_imported(name) for name in triggers):
            continue
        try:
            module = importlib.import_module(module_name)
            start: Callable[[ProfilerOptions], Bridge | None] = module.start
            bridge = start(options)  # None: not needed here (said why in the log)
            if bridge is not None:
                started.append(bridge)
        except Exception as err:  # any framework failure must leave our session running
            _warn(f"stepscope could not start the {framework} profiler alongside its session "
                  f"({type(err).__name__}: {err}); the profile will lack {framework}'s events.")
    return started


def stop_all(bridges: list[Bridge]) -> list[BridgeData]:
    """Stop every started bridge and collect its data (a failing one is warned about, skipped)."""
    collected: list[BridgeData] = []
    for bridge in bridges:
        try:
            collected.append(bridge.stop())
        except Exception as err:  # as in start_all: never lose stepscope's own profile
            _warn(f"stepscope could not collect the {bridge.framework} profile "
                  f"({type(err).__name__}: {err}); the profile lacks {bridge.framework}'s "
                  "events.")
    return collected
