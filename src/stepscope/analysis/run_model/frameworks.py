"""Which framework a host's events came from, and which input pipeline library fed it.

Advice must speak the framework the run used: a PyTorch user is told about ``DataLoader``
arguments, a tf.data user about ``tf.data.AUTOTUNE``. The framework is read from what the
events are, never from what happened to be imported:

* ``torch``: Kineto categories (a PyTorch trace, or stepscope's PyTorch bridge),
  ``ProfilerStep#N`` steps, ``aten::`` ops, DataLoader stages;
* ``jax``: events stepscope's JAX bridge merged, or JAX's own runtime (``PjitFunction(…)``,
  ``jit_…`` XLA modules) in a JAX profile;
* ``tensorflow``: events stepscope's TensorFlow bridge merged, TensorFlow ops
  (``name:Type``), tf.data's ``IteratorGetNext``, ``__inference_…`` functions, TensorFlow's
  eager runtime, or a TensorFlow profile file with none of the above;
* ``python``: none of these (plain Python, NumPy, ``stepscope.data``).

The framework with most such events wins (a Keras run on the PyTorch backend is ``torch``).

The input library: ``DataLoader`` (PyTorch's), ``tf.data`` (iterator events TensorFlow
recorded) or ``stepscope.data`` (iterator events of its stages, which carry their ``id``);
"" when the run recorded no input pipeline, or only ``Trace`` events named like one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from stepscope.model import schema
from stepscope.model.events import EventTable

FRAMEWORKS = ("tensorflow", "torch", "jax", "python")
INPUT_LIBRARIES = ("tf.data", "DataLoader", "stepscope.data", "")
FRAMEWORK_LABELS = {"tensorflow": "TensorFlow", "torch": "PyTorch", "jax": "JAX",
                    "python": "Python"}

_TORCH_NAME = re.compile(r"^(aten::|ProfilerStep#\d|Iterator::DataLoader|"
                         r"enumerate\(DataLoader\)|Optimizer\.step#|autograd::)")
_JAX_NAME = re.compile(r"^(PjitFunction\(|jit_|pjit|ThunkExecutor::|PjRt)")
_TF_NAME = re.compile(r"^(IteratorGetNext|__inference_|__forward_|EagerExecute|"
                      r"EagerKernelExecute|FunctionRun|ExecutorState::|"
                      r"[A-Za-z0-9.][\w.\-/>]*:[A-Z]\w*$)")
_ITERATOR = "Iterator::"
_DATALOADER = "Iterator::DataLoader"


@dataclass(frozen=True)
class RunFramework:
    """The framework of a host's (or a run's) events and its input pipeline library."""

    framework: str  # one of FRAMEWORKS
    input_library: str  # one of INPUT_LIBRARIES

    @property
    def label(self) -> str:
        """The framework's name as people write it."""
        return FRAMEWORK_LABELS[self.framework]

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "input_library": self.input_library}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RunFramework:
        if not d:
            return cls("python", "")
        framework = str(d.get("framework", "python"))
        library = str(d.get("input_library", ""))
        return cls(framework if framework in FRAMEWORKS else "python",
                   library if library in INPUT_LIBRARIES else "")


def _per_event(table: EventTable, pattern: re.Pattern[str]) -> np.ndarray:
    hits = np.array([bool(pattern.match(n)) for n in table.names] + [False], dtype=bool)
    out: np.ndarray = hits[table.name]
    return out


def framework_of(table: EventTable) -> RunFramework:
    """The framework and input library of one host's events (see the module docstring)."""
    counts = dict.fromkeys(FRAMEWORKS, 0)
    bridged = _bridges(table)
    kineto_rows, _, _ = table.text_stat(schema.KINETO_CATEGORY)
    torch_event = _per_event(table, _TORCH_NAME)
    torch_event[kineto_rows] = True
    counts["torch"] = int(torch_event.sum())
    counts["jax"] = int(((bridged == _JAX) | (_per_event(table, _JAX_NAME)
                                              & (bridged != _TF))).sum())
    counts["tensorflow"] = int(((bridged == _TF) | (_per_event(table, _TF_NAME)
                                                    & (bridged != _JAX))).sum())
    ours = any(schema.ENV_PRODUCER in p.stats for p in table.planes
               if p.name == schema.TASK_ENV_PLANE)
    framework = max(("torch", "jax", "tensorflow"), key=lambda f: counts[f])
    if counts[framework] == 0:
        # A TensorFlow-written profile (not stepscope's) with none of the names above is
        # still TensorFlow's (a TF profile of Python-only work); ours is plain Python.
        xspace = any(p.stats.get(schema.ENV_SOURCE_FORMAT) not in ("kineto",)
                     for p in table.planes if p.name == schema.TASK_ENV_PLANE)
        framework = "tensorflow" if xspace and not ours and len(table) else "python"
    return RunFramework(framework, _input_library(table, bridged, ours))


def input_library_of(table: EventTable) -> str:
    """The input library of one host's events (see the module docstring)."""
    bridged = _bridges(table)
    ours = any(schema.ENV_PRODUCER in p.stats for p in table.planes
               if p.name == schema.TASK_ENV_PLANE)
    return _input_library(table, bridged, ours)


# Per event, the framework bridge that recorded it (the BRIDGE stat) as a code: one int8 an
# event, where an object array of the bridge's name was 8 bytes an event (tens of MB).
_NO_BRIDGE, _JAX, _TF, _OTHER_BRIDGE = 0, 1, 2, 3


def _bridges(table: EventTable) -> np.ndarray:
    """Per event: its bridge's code (``_NO_BRIDGE`` … ``_OTHER_BRIDGE``)."""
    bridged = np.zeros(len(table), dtype=np.int8)
    rows, codes, values = table.text_stat(schema.BRIDGE)
    if len(rows):
        code_of = np.array([_JAX if v == "jax" else _TF if v == "tensorflow" else _OTHER_BRIDGE
                            for v in values], dtype=np.int8)
        bridged[rows] = code_of[codes]
    return bridged


def _input_library(table: EventTable, bridged: np.ndarray, ours: bool) -> str:
    is_iter = np.array([n.startswith(_ITERATOR) for n in table.names] + [False], bool)
    rows = np.flatnonzero(is_iter[table.name])
    if not len(rows):
        return ""
    names = {table.names[int(c)] for c in np.unique(table.name[rows])}
    if all(n.startswith(_DATALOADER) for n in names):
        return "DataLoader"
    loader = np.array([n.startswith(_DATALOADER) for n in table.names] + [False], bool)
    others = rows[~loader[table.name[rows]]]
    # Iterator events stepscope recorded itself are stepscope.data's (they carry the stage's
    # id), or the user's own Trace named like them (no id: no library to advise on);
    # TensorFlow's own profiles and its bridge's events are tf.data's.
    if not ours or (bridged[others] == _TF).any():
        return "tf.data"
    ids, _ = table.int_stat("id")
    return "stepscope.data" if np.isin(others, ids).any() else ""


def combined_framework(parts: list[RunFramework]) -> RunFramework:
    """The framework of a run from its hosts' (the most common; ties: first)."""
    if not parts:
        return RunFramework("python", "")
    frameworks = [p.framework for p in parts]
    framework = max(dict.fromkeys(frameworks), key=frameworks.count)
    libraries = [p.input_library for p in parts if p.input_library]
    library = max(dict.fromkeys(libraries), key=libraries.count) if libraries else ""
    return RunFramework(framework, library)


__all__ = ["FRAMEWORKS", "FRAMEWORK_LABELS", "INPUT_LIBRARIES", "RunFramework",
           "combined_framework", "framework_of", "input_library_of"]
