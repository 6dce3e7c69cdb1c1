"""How a run's steps were found, in words a user can act on (``Steps.method`` is the machine
key; the overview's JSON keeps it beside this sentence)."""

from __future__ import annotations

from collections.abc import Sequence

# What each of steps.find_steps' methods looked for, and which API records it.
_METHODS = {
    "root": "step markers ({marker}): root-level events with a step number, as "
            "stepscope.Trace(..., step_num=i, _r=1), TensorFlow's "
            "tf.profiler.experimental.Trace(..., step_num=i, _r=1) and JAX's "
            "StepTraceAnnotation record them",
    "profiler_step": "PyTorch's ProfilerStep#N annotations, one per prof.step()",
    "step_num": "the most frequent host event with a step number ({marker}), as Keras's "
                "profiling callback records each batch",
    "device_steps": "the devices' Steps lines, which TensorFlow wrote; a step lasts as long "
                    "as its longest device marker, as in XProf",
    "xla_module": "repeated runs of the XLA program that took the most device time "
                  "({marker}): no step markers were recorded",
}


def _marker_text(marker: str, method: str) -> str:
    """The marker's name quoted, or a plain phrase when the marker is only the method's key
    (several names marked steps)."""
    return "several event names" if not marker or marker == method else f"'{marker}'"


def steps_found_sentence(methods: Sequence[str], markers: Sequence[str]) -> str:
    """One sentence saying how steps were found, for ``methods`` (``Steps.method`` of each
    host, distinct) and their ``markers`` (the event names that marked steps)."""
    known = [m for m in methods if m != "none"]
    if not known:
        return "No steps were found: no step markers, no PyTorch ProfilerStep annotations " \
               "and no repeated XLA program."
    marker = markers[0] if len(markers) == 1 else ""
    parts = [_METHODS.get(m, m).format(marker=_marker_text(marker, m)) for m in known]
    head = "Steps were found from " if len(parts) == 1 else "Steps were found (per host) from "
    return head + "; and ".join(parts) + "."
