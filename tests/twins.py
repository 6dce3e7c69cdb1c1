"""One way to run a test on both twins of a compiled hot path (see ``stepscope.native``).

``@pytest.mark.parametrize("twin", TWINS, indirect=True)`` (or the ``twin`` fixture of a module
that imports it) runs a test once with the compiled modules and once with their pure-Python
twins; ``compiled_only(name)`` skips a test where that compiled module is not built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stepscope.capture import python_tracer, recorder
from stepscope.formats import xplane_encoder

# Where each compiled module is held: (module, attribute); None there means its twin is used.
HANDLES: dict[str, tuple[Any, str]] = {
    "_fastpath": (recorder, "_fastpath"),
    "_pyhook": (python_tracer, "_pyhook"),
    "_xplane_encode": (xplane_encoder, "_xplane_encode"),
}
TWINS = [pytest.param(True, id="compiled"), pytest.param(False, id="pure-python")]


def built(name: str) -> bool:
    """Whether the compiled module ``name`` (``_fastpath``, ``_pyhook``, ``_xplane_encode``,
    ``_xspace_decode``, ``_trace_layout``, ``_intervals``) is built and used."""
    if name == "_intervals":  # read at each call, as the layout
        from stepscope.native import compiled

        return compiled("stepscope.analysis.run_model._intervals") is not None
    if name == "_xspace_decode":
        from stepscope.formats.xspace_columns import compiled

        return compiled()
    if name == "_trace_layout":  # read at each layout, as the decoder
        from stepscope.analysis.trace.trace_index import compiled_layout

        return compiled_layout() is not None
    module, attr = HANDLES[name]
    return getattr(module, attr) is not None


def compiled_only(name: str) -> pytest.MarkDecorator:
    """Skip where the compiled module ``name`` is not built (or the twins are asked for)."""
    return pytest.mark.skipif(not built(name), reason=f"{name} is not built")


def use_twins(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    """Use the compiled modules (skipping where one is not built) or every pure twin."""
    if compiled:
        missing = [name for name in (*HANDLES, "_xspace_decode") if not built(name)]
        if missing:
            pytest.skip(f"not built: {', '.join(missing)}")
        return
    for module, attr in HANDLES.values():
        monkeypatch.setattr(module, attr, None)
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")  # read at each decode


@pytest.fixture
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """True: the compiled modules; False: their pure-Python twins (parametrize it with
    ``TWINS``, indirect)."""
    compiled: bool = request.param
    use_twins(monkeypatch, compiled)
    yield compiled
