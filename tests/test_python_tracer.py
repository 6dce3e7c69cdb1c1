"""The Python tracer's compiled hook (``_pyhook``) and its pure-Python hook record the same."""

from __future__ import annotations

import gc
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

from stepscope.capture import python_tracer
from stepscope.capture.python_tracer import PythonTracer
from stepscope.capture.recorder import Recorder, ThreadBuffer

_pyhook: Any
try:
    from stepscope.capture import _pyhook  # type: ignore[attr-defined, no-redef]
except ImportError:
    _pyhook = None

IMPLS = [pytest.param(None, id="python")]
if _pyhook is not None:
    IMPLS.append(pytest.param(_pyhook, id="compiled"))
needs_compiled = pytest.mark.skipif(_pyhook is None, reason="_pyhook is not built")
# The hook the compiled Python-only mode (python_tracer_level=2) runs on, by Python version.
CHEAP_ENGINE = (python_tracer.MONITORING if sys.version_info >= (3, 12)
                else python_tracer.FRAME)
# Both modes: every Python and C function call (level 1), Python functions only (level 2).
MODES = [pytest.param(True, id="python-and-c"), pytest.param(False, id="python-only")]

# One row of an outline: (depth, event name).
Row = tuple[int, str]


# --- a workload that exercises calls, C calls, generators and exceptions -------------------------

class Box(list[int]):
    pass


def leaf(n: int) -> int:
    return sum(range(n))


def gen(n: int) -> Generator[int, None, None]:
    for i in range(n):
        yield leaf(i)


def fails() -> None:
    raise ValueError("from Python")


def deep(n: int) -> None:
    if n == 0:
        raise KeyError(n)
    deep(n - 1)


def after() -> int:
    return leaf(2)


def workload() -> None:
    total = 0
    for value in gen(3):
        total += value
    g = gen(5)
    next(g)
    g.close()
    try:  # not contextlib.suppress, whose own calls would be traced too
        fails()
    except ValueError:
        total += 1
    try:
        deep(3)
    except KeyError:
        total += 1
    try:
        math.sqrt(-1.0)  # a C function that raises
    except ValueError:
        total += 1
    box = Box()
    box.append(1)
    empty: list[int] = []
    empty.append(2)
    dict.fromkeys("ab")
    str.maketrans("a", "b")
    ",".join(["a", "b"])
    sorted([3, 1, 2], key=lambda v: -v)  # C calling back into Python
    after()


def worker() -> None:
    leaf(4)
    workload()


# --- helpers -------------------------------------------------------------------------------------

def run_traced(monkeypatch: pytest.MonkeyPatch, impl: Any, body: Callable[[], object],
               max_events: int = 1_000_000, c_calls: bool = True) -> Recorder:
    """Run ``body`` under a PythonTracer using ``impl`` (None: the pure-Python hook)."""
    monkeypatch.setattr(python_tracer, "_pyhook", impl)
    recorder = Recorder(max_events)
    tracer = PythonTracer(recorder, c_calls=c_calls)
    assert tracer.compiled == (impl is not None)
    if not c_calls and impl is not None:
        assert tracer.engine == CHEAP_ENGINE
    enabled = gc.isenabled()
    gc.disable()  # a collection mid-run could call finalizers, which would be traced
    try:
        tracer.start()
        try:
            body()
        finally:
            tracer.stop()
    finally:
        if enabled:
            gc.enable()
    return recorder


def buffer_of(recorder: Recorder, name: str) -> ThreadBuffer:
    """The Python-tracer buffer of the thread called ``name``."""
    found = [b for b in recorder.python_buffers if b.thread_name == name]
    assert len(found) == 1, [b.thread_name for b in recorder.python_buffers]
    return found[0]


def outline(events: list[Any]) -> list[Row]:
    """Events as (depth, name) in start order; fails unless every pair nests or is disjoint."""
    names: dict[Any, str] = {}
    ends: list[int] = []
    rows: list[Row] = []
    for what, start, end in sorted(events, key=lambda e: (e[1], -e[2])):
        assert start <= end
        while ends and start >= ends[-1]:
            ends.pop()
        assert not ends or end <= ends[-1], "events overlap without nesting"
        rows.append((len(ends), PythonTracer.event_name(what, names)))
        ends.append(end)
    return rows


def subtree(rows: list[Row], suffix: str, nth: int = 0) -> list[Row]:
    """The ``nth`` event whose name ends with ``suffix`` and everything nested in it."""
    starts = [i for i, (_, name) in enumerate(rows) if name.endswith(suffix)]
    assert len(starts) > nth, f"no {suffix!r} in {rows}"
    first = starts[nth]
    depth = rows[first][0]
    out = [(0, rows[first][1])]
    for d, name in rows[first + 1:]:
        if d <= depth:
            break
        out.append((d - depth, name))
    return out


def fn(name: str) -> str:
    """The event name of a function of this module."""
    return f"$test_python_tracer.py:{globals()[name].__code__.co_firstlineno} {name}"


# What ``gen(5).close()`` in ``workload`` runs under it. Python 3.13 closes a generator whose
# ``yield`` has no exception handler around it without resuming its frame: no event at all.
CLOSE_RESUMES: list[Row] = [] if sys.version_info >= (3, 13) else [(1, fn("gen"))]


# --- tests ---------------------------------------------------------------------------------------

@pytest.mark.skipif(bool(os.environ.get("STEPSCOPE_PURE_PYTHON")),
                    reason="STEPSCOPE_PURE_PYTHON asks for the pure-Python hook")
def test_the_compiled_hook_is_built_and_used() -> None:
    # `make setup` compiles it; a silent fallback would hide a much slower tracer.
    assert python_tracer._pyhook is not None
    recorder = Recorder(1000)
    tracer = PythonTracer(recorder)
    assert tracer.compiled
    tracer.start()
    hook = sys.getprofile()
    tracer.stop()
    assert isinstance(hook, python_tracer._pyhook.ThreadHook)
    assert sys.getprofile() is None


@needs_compiled
def test_both_hooks_record_the_same_events(monkeypatch: pytest.MonkeyPatch) -> None:
    def body() -> None:
        workload()
        t = threading.Thread(target=worker, name="twin-worker")
        t.start()
        t.join()

    runs = {impl: run_traced(monkeypatch, impl, body) for impl in (None, _pyhook)}
    main = threading.current_thread().name
    by_impl = {impl: outline(buffer_of(rec, main).events) for impl, rec in runs.items()}
    # Everything on the calling thread: the workload, and the frames stop() closed.
    python_rows = subtree(by_impl[None], " workload")
    assert python_rows == subtree(by_impl[_pyhook], " workload")
    assert len(python_rows) > 30
    closed = [name for _, name in by_impl[None] if name.endswith("PythonTracer.stop")]
    assert len(closed) == 1
    assert closed == [n for _, n in by_impl[_pyhook] if n.endswith("PythonTracer.stop")]
    # The very same tuples, but for the times: code objects for Python, names for C.
    for impl, rec in runs.items():
        events = buffer_of(rec, main).events
        assert all(isinstance(e, tuple) and len(e) == 3 for e in events), impl
        assert all(isinstance(e[1], int) and isinstance(e[2], int) for e in events), impl
    kinds = {impl: sorted({type(e[0]).__name__ for e in buffer_of(rec, main).events})
             for impl, rec in runs.items()}
    assert kinds[None] == kinds[_pyhook] == ["code", "str"]
    # A thread started during the session.
    workers = [subtree(outline(buffer_of(rec, "twin-worker").events), " worker")
               for rec in runs.values()]
    assert workers[0] == workers[1]
    assert subtree(workers[0], " workload") == python_rows


@pytest.mark.parametrize("impl", IMPLS)
def test_names_and_nesting(monkeypatch: pytest.MonkeyPatch, impl: Any) -> None:
    rec = run_traced(monkeypatch, impl, workload)
    rows = subtree(outline(buffer_of(rec, threading.current_thread().name).events),
                   " workload")
    children = [name for depth, name in rows if depth == 1]
    # Each resumption of a generator is one event; an exception ends a frame like a return.
    assert children == [
        fn("gen"), fn("gen"), fn("gen"), fn("gen"),  # three values, then the end
        "$builtins.next", "$builtins.generator.close",
        fn("fails"), fn("deep"), "$math.sqrt",
        "$test_python_tracer.Box.append", "$builtins.list.append", "$builtins.dict.fromkeys",
        "$str.maketrans", "$builtins.str.join", "$builtins.sorted", fn("after"),
    ]
    assert subtree(rows, fn("gen"), 1)[1:] == [(1, fn("leaf")), (2, "$builtins.sum")]
    assert subtree(rows, fn("gen"), 3) == [(0, fn("gen"))]
    assert subtree(rows, "$builtins.next") == [(0, "$builtins.next"), (1, fn("gen")),
                                               (2, fn("leaf")), (3, "$builtins.sum")]
    assert subtree(rows, "$builtins.generator.close") == [(0, "$builtins.generator.close"),
                                                          *CLOSE_RESUMES]
    assert subtree(rows, fn("deep")) == [(0, fn("deep")), (1, fn("deep")), (2, fn("deep")),
                                         (3, fn("deep"))]
    lambdas = [name for _, name in subtree(rows, "$builtins.sorted")[1:]]
    assert len(lambdas) == 3 and all(n.endswith("workload.<locals>.<lambda>") for n in lambdas)
    assert subtree(rows, fn("after")) == [(0, fn("after")), (1, fn("leaf")),
                                          (2, "$builtins.sum")]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c_calls", MODES)
def test_event_cap_is_honoured(monkeypatch: pytest.MonkeyPatch, impl: Any, c_calls: bool) -> None:
    cap = 50
    rec = run_traced(monkeypatch, impl, lambda: [leaf(3) for _ in range(100)], max_events=cap,
                     c_calls=c_calls)
    kept = sum(len(b.events) for b in rec.python_buffers)
    assert kept == cap
    assert rec.recorded == cap
    # every leaf (and every sum) was offered
    assert rec.attempted > (2 if c_calls else 1) * 100
    assert rec.dropped == rec.attempted - cap


@needs_compiled
def test_both_hooks_keep_and_drop_the_same_events(monkeypatch: pytest.MonkeyPatch) -> None:
    if threading.active_count() != 1:
        pytest.skip("another thread could take part of the cap")
    runs = {impl: run_traced(monkeypatch, impl, workload, max_events=30)
            for impl in (None, _pyhook)}
    names = {impl: [PythonTracer.event_name(e[0], {}) for b in rec.python_buffers
                    for e in b.events] for impl, rec in runs.items()}
    assert names[None] == names[_pyhook]
    assert runs[None].attempted == runs[_pyhook].attempted
    assert runs[None].dropped == runs[_pyhook].dropped > 0


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c_calls", MODES)
def test_threads_started_during_the_session_are_traced(monkeypatch: pytest.MonkeyPatch,
                                                        impl: Any, c_calls: bool) -> None:
    def body() -> None:
        threads = [threading.Thread(target=leaf, args=(5,), name=f"late-{i}") for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    rec = run_traced(monkeypatch, impl, body, c_calls=c_calls)
    for i in range(3):
        rows = outline(buffer_of(rec, f"late-{i}").events)
        assert subtree(rows, fn("leaf")) == [(0, fn("leaf")), (1, "$builtins.sum")][
            :2 if c_calls else 1]
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(sys.getprofile()))
    t.start()
    t.join()
    assert seen == [None]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c_calls", MODES)
def test_threads_running_before_the_session_are_traced_and_released(
        monkeypatch: pytest.MonkeyPatch, impl: Any, c_calls: bool) -> None:
    if python_tracer._set_profile_all_threads() is None:
        pytest.skip("no way to reach running threads here (Python < 3.12 without _fastpath)")
    go, stop = threading.Event(), threading.Event()
    profiles: list[object] = []

    def spin() -> None:
        go.wait()
        while not stop.is_set():
            leaf(3)
            stop.wait(0.001)
        profiles.append(sys.getprofile())

    def body() -> None:
        go.set()
        threading.Event().wait(0.05)

    t = threading.Thread(target=spin, name="early")
    t.start()
    try:
        rec = run_traced(monkeypatch, impl, body, c_calls=c_calls)
    finally:
        stop.set()
        t.join()
    leaves = [row for row in outline(buffer_of(rec, "early").events) if row[1] == fn("leaf")]
    assert len(leaves) >= 5
    assert profiles == [None]


@pytest.mark.parametrize("impl", IMPLS)
def test_flush_brings_buffers_up_to_date(monkeypatch: pytest.MonkeyPatch, impl: Any) -> None:
    monkeypatch.setattr(python_tracer, "_pyhook", impl)
    rec = Recorder(10_000)
    tracer = PythonTracer(rec)
    tracer.start()
    try:
        leaf(3)
        tracer.flush()
        names = [PythonTracer.event_name(e[0], {}) for b in rec.python_buffers
                 for e in b.events]
    finally:
        tracer.stop()
    assert fn("leaf") in names and "$builtins.sum" in names


@pytest.mark.parametrize("impl", IMPLS)
def test_hooks_stop_themselves_where_stop_cannot_reach(monkeypatch: pytest.MonkeyPatch,
                                                       impl: Any) -> None:
    # As on Python < 3.12 without _fastpath: stop() removes the hook of its own thread only.
    monkeypatch.setattr(python_tracer, "_set_profile_all_threads", lambda: None)
    started, stopped = threading.Event(), threading.Event()
    profiles: list[object] = []

    def outlive() -> None:
        leaf(1)
        started.set()
        stopped.wait()  # the hook goes on its first event after stop
        profiles.append(sys.getprofile())
        leaf(2)

    t = threading.Thread(target=outlive, name="outlives")

    def body() -> None:
        t.start()
        started.wait()

    rec = run_traced(monkeypatch, impl, body)
    after_stop = time.time_ns()
    stopped.set()
    t.join()
    assert profiles == [None]
    events = buffer_of(rec, "outlives").events
    names = [name for _, name in outline(events)]
    assert names.count(fn("leaf")) == 1
    # The calls open at stop were closed then; nothing was recorded after.
    assert all(e[2] < after_stop for e in events)
    closed = [name for name in names if name.endswith(".acquire")]
    assert closed and events[-1][2] == max(e[2] for e in events)


@needs_compiled
def test_compiled_hook_keeps_order_across_stop() -> None:
    events: list[Any] = []
    state = _pyhook.HookState(itertools.count(), 100, python_tracer._c_name)
    hook = _pyhook.ThreadHook(state, events)
    frame = sys._getframe()
    code = frame.f_code
    hook(frame, "call", None)
    hook(frame, "c_call", len)
    hook(frame, "c_return", len)
    assert events == []  # held in C until flushed
    hook(frame, "call", None)
    state.active = False
    hook(frame, "return", None)  # after stop: straight to the list, after the held ones
    assert [e[0] for e in events] == ["$builtins.len", code]
    assert all(isinstance(e[1], int) and e[1] <= e[2] for e in events)
    assert sys.getprofile() is None
    assert hook.depth == 1
    (start, what), = hook.drain()
    assert what is code and start <= events[0][1]
    assert hook.depth == 0 and hook.drain() == []


# --- stepscope's own threads -----------------------------------------------------------------

def _python_tracer_lines(path: Any) -> list[str]:
    """The thread names of a written profile's Python-tracer lines."""
    from stepscope.formats.xplane_builder import read_space
    from stepscope.model import schema

    planes = [p for p in read_space(path).planes if p.name == schema.PYTHON_TRACER_PLANE]
    return [line.name for p in planes for line in p.lines]


def test_stepscope_own_threads_are_not_traced(tmp_path: Any) -> None:
    """Recorded with the Python tracer and the system counters on, in a process that also runs
    a profiler server and captures itself through it: the program's threads have Python-tracer
    lines; the counter sampler, the server's threads and the capture client's have none."""
    import stepscope

    def user_work(stop: threading.Event) -> None:
        while not stop.is_set():
            leaf(200)
            stop.wait(0.002)

    before = set(threading.enumerate())
    port = stepscope.server.start(0)
    server_threads = {t.name for t in set(threading.enumerate()) - before}
    stop = threading.Event()
    worker = threading.Thread(target=user_work, args=(stop,), name="user-worker", daemon=True)
    worker.start()
    try:
        options = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=2)
        with stepscope.Profile(tmp_path / "local", options=options) as prof:
            for _ in range(20):
                workload()
                time.sleep(0.003)
        # The process captured through its own server (the server's worker thread runs the
        # session there, the client's threads wait for it), sampling counters all along.
        remote = stepscope.client.trace(f"127.0.0.1:{port}", tmp_path / "remote", 300,
                                        options=options)
        assert remote.ok
    finally:
        stop.set()
        worker.join()
        stepscope.server.stop()
    assert prof.path is not None
    (remote_file,) = remote.run_dir.glob("*.xplane.pb")
    for path in (remote_file, prof.path):
        lines = _python_tracer_lines(path)
        assert "user-worker" in lines, lines
        own = [name for name in lines if name in server_threads
               or name.startswith(("stepscope-counters", "stepscope-profiler-server",
                                   "stepscope-capture"))]
        assert own == [], (path, lines)
    assert "MainThread" in _python_tracer_lines(prof.path)


# --- Python functions only (python_tracer_level=2) -----------------------------------------------
# The compiled mode runs on a different hook (frame evaluation before 3.12, sys.monitoring from
# 3.12) from its pure-Python twin (the profile hook, ignoring C functions): the events must be
# the same all the same.

def raises_in_generator() -> Generator[int, None, None]:
    try:
        yield 1
    except KeyError:
        yield leaf(2)
    raise ValueError("done")


async def coro(n: int) -> int:
    return leaf(n)


async def awaits() -> int:
    return await coro(3) + await coro(4)


class Made:
    size = leaf(2)  # a class body is a frame too


def python_only_workload() -> None:
    g = raises_in_generator()
    next(g)
    g.throw(KeyError("in"))  # thrown into a suspended generator, which goes on
    try:  # noqa: SIM105 (contextlib.suppress's own calls would be traced too)
        next(g)
    except ValueError:
        pass
    unstarted = gen(3)
    unstarted.close()  # a generator never started makes no frame
    c = awaits()
    try:  # noqa: SIM105
        c.send(None)
    except StopIteration:
        pass
    type("Made2", (Made,), {})
    [leaf(i) for i in range(3)]
    sum(leaf(i) for i in range(2))
    exec(compile("leaf(1)", "<exec>", "exec"), {"leaf": leaf})
    sorted([3, 1, 2], key=lambda v: -v)
    deep_ok(50)
    workload()


def lingers(entered: threading.Event, release: threading.Event) -> None:
    entered.set()
    release.wait()
    leaf(7)


TIMED: list[tuple[int, int]] = []


def timed(seconds: float) -> None:
    """Sleeps, noting time.time_ns() as it begins and ends (in ``TIMED``)."""
    begun = time.time_ns()
    time.sleep(seconds)
    TIMED.append((begun, time.time_ns()))


def deep_ok(n: int) -> int:
    return 0 if n == 0 else 1 + deep_ok(n - 1)


@needs_compiled
@pytest.mark.parametrize("body", ["workload", "python_only_workload"])
def test_python_only_hooks_record_the_same_events(monkeypatch: pytest.MonkeyPatch,
                                                  body: str) -> None:
    run_body = globals()[body]

    def traced() -> None:
        run_body()
        t = threading.Thread(target=worker, name="twin-worker")
        t.start()
        t.join()

    runs = {impl: run_traced(monkeypatch, impl, traced, c_calls=False)
            for impl in (None, _pyhook)}
    main = threading.current_thread().name
    rows = {impl: outline(buffer_of(rec, main).events) for impl, rec in runs.items()}
    ours = subtree(rows[_pyhook], f" {body}")
    assert ours == subtree(rows[None], f" {body}")
    assert len(ours) > 19 + len(CLOSE_RESUMES)
    # Python functions only: every event is a code object, and none is a C function's.
    for rec in runs.values():
        for buf in rec.python_buffers:
            assert {type(e[0]).__name__ for e in buf.events} <= {"code"}
    closed = [[n for _, n in r if n.endswith("PythonTracer.stop")] for r in rows.values()]
    assert closed[0] == closed[1] and len(closed[0]) == 1
    workers = [subtree(outline(buffer_of(rec, "twin-worker").events), " worker")
               for rec in runs.values()]
    assert workers[0] == workers[1]


@needs_compiled
def test_python_only_names_generators_and_unwinding(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = run_traced(monkeypatch, _pyhook, python_only_workload, c_calls=False)
    rows = subtree(outline(buffer_of(rec, threading.current_thread().name).events),
                   " python_only_workload")
    children = [name for depth, name in rows if depth == 1]
    # One event per resumption of a generator or coroutine; a throw into one resumes it; an
    # exception leaving a frame ends it; making a generator is no call.
    local = "$test_python_tracer.py:{} python_only_workload.<locals>.{}".format
    line = python_only_workload.__code__.co_firstlineno
    # Closing a generator never started runs it on some versions (to throw GeneratorExit in).
    closed = [fn("gen")] if fn("gen") in children else []
    # Python 3.12 runs a list comprehension in its function's frame (PEP 709).
    listcomp = ([fn("leaf")] * 3 if sys.version_info >= (3, 12)
                else [local(line + 16, "<listcomp>")])
    assert children == [
        *[fn("raises_in_generator")] * 3, *closed, fn("awaits"), *listcomp,
        *[local(line + 17, "<genexpr>")] * 3, "$<exec>:1 <module>",
        *[local(line + 19, "<lambda>")] * 3, fn("deep_ok"), fn("workload"),
    ]
    assert subtree(rows, fn("awaits")) == [(0, fn("awaits")), (1, fn("coro")), (2, fn("leaf")),
                                           (1, fn("coro")), (2, fn("leaf"))]
    assert subtree(rows, fn("deep_ok"))[-1] == (50, fn("deep_ok"))
    assert "$<exec>:1 <module>" in children
    assert any(n.endswith("<lambda>") for n in children)


@needs_compiled
@pytest.mark.parametrize("c_calls", MODES)
def test_functions_made_and_dropped_while_tracing_keep_their_names(
        monkeypatch: pytest.MonkeyPatch, c_calls: bool) -> None:
    """More distinct functions than the compiled hook caches names for, each made, called and
    dropped: every event names its own function, as the pure-Python hook names it."""
    count = 1500

    def made_and_dropped() -> None:
        for i in range(count):
            namespace: dict[str, Any] = {}
            exec(compile(f"def f{i}():\n    return {i}\n", f"made{i}.py", "exec"), namespace)
            assert namespace[f"f{i}"]() == i
            del namespace

    runs = {impl: run_traced(monkeypatch, impl, made_and_dropped, c_calls=c_calls)
            for impl in (None, _pyhook)}
    main = threading.current_thread().name
    rows = {impl: subtree(outline(buffer_of(rec, main).events), "made_and_dropped")
            for impl, rec in runs.items()}
    assert rows[_pyhook] == rows[None]
    called = [name for depth, name in rows[_pyhook] if depth == 1 and " f" in name]
    assert called == [f"$made{i}.py:1 f{i}" for i in range(count)]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c_calls", MODES)
def test_tracing_twice_in_a_row(monkeypatch: pytest.MonkeyPatch, impl: Any,
                                c_calls: bool) -> None:
    first = run_traced(monkeypatch, impl, lambda: leaf(3), c_calls=c_calls)
    untraced = leaf(4)
    second = run_traced(monkeypatch, impl, lambda: [leaf(5), after()], c_calls=c_calls)
    assert untraced == 6
    main = threading.current_thread().name
    names = [[n for _, n in outline(buffer_of(rec, main).events)] for rec in (first, second)]
    assert names[0].count(fn("leaf")) == 1 and fn("after") not in names[0]
    assert names[1].count(fn("leaf")) == 2 and names[1].count(fn("after")) == 1
    assert (sys.getprofile(), threading.getprofile()) == (None, None)


@needs_compiled
def test_python_only_frame_hook_goes_when_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame that began under the tracer and ends after it stopped records nothing then,
    and the next tracer's events go to its own buffers only."""
    release, entered = threading.Event(), threading.Event()
    t = threading.Thread(target=lingers, args=(entered, release), name="lingers")
    rec = run_traced(monkeypatch, _pyhook, lambda: (t.start(), entered.wait()), c_calls=False)
    before = [n for _, n in outline(buffer_of(rec, "lingers").events)]
    second = run_traced(monkeypatch, _pyhook, lambda: leaf(1), c_calls=False)
    release.set()
    t.join()
    assert [n for _, n in outline(buffer_of(rec, "lingers").events)] == before
    assert fn("lingers") in before and fn("leaf") not in before
    assert "lingers" not in [b.thread_name for b in second.python_buffers]


@needs_compiled
@pytest.mark.skipif(bool(os.environ.get("STEPSCOPE_PURE_PYTHON")),
                    reason="STEPSCOPE_PURE_PYTHON asks for the pure-Python hook")
def test_deep_recursion_under_the_cheap_hook_never_crashes(tmp_path: Any) -> None:
    """Every Python call is a C call under the frame hook: a recursion limit set far above
    what the C stack holds gives a RecursionError, not a crash (in a child process, lest it
    crash this one)."""
    script = tmp_path / "deep.py"
    script.write_text(
        "import sys, threading\n"
        "from stepscope.capture.python_tracer import PythonTracer\n"
        "from stepscope.capture.recorder import Recorder\n"
        "def down(n):\n"
        "    return 0 if n == 0 else 1 + down(n - 1)\n"
        "sys.setrecursionlimit(10_000_000)\n"
        "rec = Recorder(10_000_000)\n"
        "tracer = PythonTracer(rec, c_calls=False)\n"
        "tracer.start()\n"
        "try:\n"
        "    print('depth', down(5_000))\n"
        "    try:\n"
        "        down(2_000_000)\n"
        "        print('finished')\n"
        "    except RecursionError:\n"
        "        print('RecursionError')\n"
        "finally:\n"
        "    tracer.stop()\n"
        "print('events', rec.recorded, tracer.engine)\n"
        "def small_stack():\n"
        "    inner = PythonTracer(Recorder(10_000_000), c_calls=False)\n"
        "    inner.start()\n"
        "    try:\n"
        "        down(2_000_000)\n"
        "        print('thread finished')\n"
        "    except RecursionError:\n"
        "        print('thread RecursionError')\n"
        "    finally:\n"
        "        inner.stop()\n"
        "threading.stack_size(512 * 1024)\n"
        "t = threading.Thread(target=small_stack)\n"
        "t.start()\n"
        "t.join()\n")
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "depth 5000"
    assert lines[1] in ("RecursionError", "finished")
    assert int(lines[2].split()[1]) > 5_000
    assert lines[2].split()[2] == CHEAP_ENGINE
    # sys.monitoring (3.12+) leaves Python-to-Python calls in one C frame: deep recursion may
    # finish there; the frame hook (3.10-3.11) makes each a C call and must stop it in time.
    assert lines[3] in (("thread RecursionError", "thread finished")
                        if CHEAP_ENGINE == python_tracer.MONITORING
                        else ("thread RecursionError",))


@needs_compiled
@pytest.mark.parametrize("c_calls", MODES)
def test_compiled_times_agree_with_time_ns(monkeypatch: pytest.MonkeyPatch,
                                           c_calls: bool) -> None:
    """The compiled hooks read the CPU's time-stamp counter, mapped onto time.time_ns's
    clock: their events lie where time.time_ns says they ran, also across the mapping's
    periodic re-anchoring (every few ms), and nest."""
    TIMED.clear()

    def body() -> None:
        for seconds in (0.0, 0.001, 0.012, 0.0, 0.03, 0.0, 0.005):
            timed(seconds)

    rec = run_traced(monkeypatch, _pyhook, body, c_calls=c_calls)
    events = sorted((e for e in buffer_of(rec, threading.current_thread().name).events
                     if PythonTracer.event_name(e[0], {}) == fn("timed")), key=lambda e: e[1])
    assert len(events) == len(TIMED) == 7
    slack = 50_000  # ns: far above the mapping's error (about a microsecond), below the sleeps
    for (_, start, end), (begun, ended) in zip(events, TIMED, strict=True):
        # The call holds what ran inside it, by time.time_ns's clock.
        assert start <= begun + slack and ended <= end + slack
        assert end - start >= ended - begun - 2 * slack
    outline(buffer_of(rec, threading.current_thread().name).events)  # nests


@needs_compiled
def test_a_counter_other_than_a_plain_count_is_asked_each_time() -> None:
    """The compiled hook reads an itertools.count in place; a count with a step, or another
    iterator, goes through next() as before."""
    for counter, kept in ((itertools.count(0, 2), 5), (iter(range(3)), None),
                          (itertools.count(7), 3)):
        events: list[Any] = []
        state = _pyhook.HookState(counter, 10, python_tracer._c_name)
        hook = _pyhook.ThreadHook(state, events)
        frame = sys._getframe()
        raised = False
        for _ in range(8):
            hook(frame, "call", None)
            try:
                hook(frame, "return", None)
            except RuntimeError:  # range ran out: the counter is exhausted
                raised = True
                break
        hook.flush()
        if kept is None:
            assert raised and len(events) == 3
        else:
            assert len(events) == kept, counter
    count = itertools.count(5)
    state = _pyhook.HookState(count, 100, python_tracer._c_name)
    hook = _pyhook.ThreadHook(state, [])
    frame = sys._getframe()
    for _ in range(4):
        hook(frame, "call", None)
        hook(frame, "return", None)
    assert next(count) == 9  # the four events were counted on the very object


@needs_compiled
def test_stepscope_level_two_session(tmp_path: Any) -> None:
    """A whole session at python_tracer_level=2: Python functions' events, no C function's,
    in the written profile."""
    import stepscope
    from stepscope.formats.xplane_builder import read_space
    from stepscope.model import schema

    options = stepscope.ProfilerOptions(python_tracer_level=2, counter_interval_ms=0,
                                        device_tracer_level=0)
    with stepscope.Profile(tmp_path, options=options) as prof:
        workload()
    assert prof.path is not None
    planes = [p for p in read_space(prof.path).planes if p.name == schema.PYTHON_TRACER_PLANE]
    names = {p.event_metadata[e.metadata_id].name for p in planes for line in p.lines
             for e in line.events}
    assert fn("workload") in names and fn("gen") in names
    assert not any(n.startswith("$builtins.") for n in names)


class _Outer:
    """Nested scopes whose qualified names event names must carry, on every Python version."""

    class Inner:
        def method(self) -> Callable[[], int]:
            def nested() -> int:
                return 1
            return nested

    @staticmethod
    def static() -> list[int]:
        return [i for i in range(2)]


def test_event_names_carry_qualified_names() -> None:
    """The qualified name of a method, a nested class's method, a closure, a comprehension: from
    co_qualname on 3.11+, from the recompiled source file on 3.10 (which has no co_qualname)."""
    closure = _Outer.Inner().method()
    codes = {closure.__code__: "_Outer.Inner.method.<locals>.nested",
             _Outer.Inner.method.__code__: "_Outer.Inner.method",
             _Outer.static.__code__: "_Outer.static"}
    if sys.version_info < (3, 12):  # 3.12 inlines comprehensions: no code object of their own
        listcomp = next(c for c in _Outer.static.__code__.co_consts if hasattr(c, "co_code"))
        codes[listcomp] = "_Outer.static.<locals>.<listcomp>"
    cache: dict[Any, str] = {}
    for code, qualname in codes.items():
        assert PythonTracer.event_name(code, cache) == \
            f"$test_python_tracer.py:{code.co_firstlineno} {qualname}"


def test_without_source_a_310_name_is_the_bare_function_name() -> None:
    """Code made from a string has no file to recompile: its name is its bare ``co_name``."""
    scope: dict[str, Any] = {}
    exec(compile("class K:\n    def f(self):\n        pass\n", "<made>", "exec"), scope)
    code = scope["K"].f.__code__
    expected = "K.f" if sys.version_info >= (3, 11) else "f"
    assert PythonTracer.event_name(code, {}) == f"$<made>:2 {expected}"
    assert python_tracer._qualname_310(code) == "f"


@pytest.mark.skipif(sys.version_info >= (3, 11), reason="3.11+ code objects have co_qualname")
def test_310_qualified_names_past_256_constants(tmp_path: Any) -> None:
    """A function defined after its enclosing function's 256th constant: its code object and
    qualified name are loaded through EXTENDED_ARG, which the 3.10 name finder must read as
    part of the same instruction."""
    path = tmp_path / "many_constants.py"
    path.write_text("def outer():\n" + "".join(f"    c{i} = {i}.5\n" for i in range(300))
                    + "    def inner():\n        pass\n    return inner\n")
    scope: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    inner = scope["outer"]()
    assert python_tracer._qualname_310(inner.__code__) == "outer.<locals>.inner"
