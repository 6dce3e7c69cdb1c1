"""The compiled twins of stepscope's hot paths, loaded one way.

Each compiled module (a ``.c`` file built by setup.py, typed by the ``.pyi`` beside it) has a
pure-Python twin that gives the same results: ``capture._fastpath`` (``Trace`` and the
recorder's records; twin: ``capture.trace.PyTrace``, ``capture.recorder``), ``capture._pyhook``
(the Python tracer's hook; twin: ``capture.python_tracer``), ``formats._xspace_decode``
(XSpace → columns; twin: ``formats.xspace_columns``), ``formats._xplane_encode`` (columns →
XEvent bytes; twin: ``formats.xplane_encoder``) and ``analysis.trace._trace_layout`` (the trace
viewer's row layout, its (track, start) order, its flows and their stats; twins:
``analysis.trace.trace_index.layout_depth``, the sort in ``sorted_by_track_and_start``,
``_stat_flows``' pure path: ``_int_stats``, ``_lookup``, ``_producer_flows``) and
``analysis.run_model._intervals`` (intervals' parents and self times in one walk; twin: the
NumPy passes of ``analysis.run_model.intervals``). ``compiled`` gives
the compiled module, or None where it is not built or ``STEPSCOPE_PURE_PYTHON`` is set (the
tests run both twins so).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON = "STEPSCOPE_PURE_PYTHON"


def pure_python() -> bool:
    """Whether the pure-Python twins are asked for (``STEPSCOPE_PURE_PYTHON`` set, not 0)."""
    return os.environ.get(PURE_PYTHON, "") not in ("", "0")


def compiled(name: str, *, honour_pure_python: bool = True) -> ModuleType | None:
    """The compiled module ``name`` (e.g. ``stepscope.capture._fastpath``), or None where it
    was not built (no C compiler at install) or the pure-Python twins are asked for."""
    if honour_pure_python and pure_python():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
