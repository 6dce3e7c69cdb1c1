"""The compiled ``Trace`` and the pure-Python ``PyTrace`` behave the same."""

from __future__ import annotations

from pathlib import Path

import pytest

import stepscope
from stepscope.capture import trace
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

from xspace_view import events, plane

IMPLS = [pytest.param(trace.PyTrace, id="python")]
if trace._fastpath is not None:
    IMPLS.append(pytest.param(trace._fastpath.Trace, id="compiled"))


def test_the_compiled_path_is_built() -> None:
    # `make setup` compiles it; a silent fallback would hide a slower Trace from users.
    assert trace._fastpath is not None
    assert stepscope.Trace is trace._fastpath.Trace


@pytest.mark.parametrize("impl", IMPLS)
def test_same_events_from_both(tmp_path: Path, impl: type) -> None:
    @impl("decorated", kind="fn")
    def f() -> int:
        return 3

    stepscope.start(tmp_path, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    with impl("plain"):
        pass
    with impl("with-stats", step_num=4, _r=1) as t:
        t.set_metadata(extra="yes", step_num=5)
    with impl(name="by-keyword", a=1):
        pass
    assert f() == 3
    with pytest.raises(KeyError), impl("raising"):
        raise KeyError("x")
    path = stepscope.stop()
    assert path is not None
    got = {e.name: e.stats for e in events(plane(read_space(path), schema.HOST_PLANE))}
    assert got == {
        "plain": {},
        "with-stats": {"step_num": 5, "_r": 1, "extra": "yes"},
        "by-keyword": {"a": 1},
        "decorated": {"kind": "fn"},
        "raising": {},
    }


@pytest.mark.parametrize("impl", IMPLS)
def test_name_and_argument_errors(impl: type) -> None:
    assert impl("n").name == "n"
    with pytest.raises(TypeError):
        impl()
    with pytest.raises(TypeError):
        impl("a", "b")


@pytest.mark.parametrize("impl", IMPLS)
def test_subclasses_work(tmp_path: Path, impl: type) -> None:
    class Step(impl):  # type: ignore[misc, valid-type]
        pass

    # No framework bridges: a JAX imported by an earlier test adds its garbage-collection
    # hook's host events when a collection falls inside.
    stepscope.start(tmp_path, options=stepscope.ProfilerOptions(counter_interval_ms=0,
                                                                device_tracer_level=0))
    with Step("sub", k=2):
        pass
    path = stepscope.stop()
    assert path is not None
    got = {e.name: e.stats for e in events(plane(read_space(path), schema.HOST_PLANE))}
    assert got == {"sub": {"k": 2}}
