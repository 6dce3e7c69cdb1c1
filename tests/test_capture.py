"""The in-process capture API: sessions, Trace, threads, nesting, stats, caps and errors."""

from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path

import pytest

import stepscope
from stepscope.formats.xplane_builder import read_space
from stepscope.model import schema

from xspace_view import events, plane, plane_stats


def _profile(tmp_path: Path, body, options: stepscope.ProfilerOptions | None = None):
    stepscope.start(tmp_path, options=options or stepscope.ProfilerOptions(counter_interval_ms=0))
    try:
        body()
    finally:
        path = stepscope.stop()
    assert path is not None
    return path, read_space(path)


def test_profile_lands_in_tensorboard_layout(tmp_path: Path) -> None:
    path, space = _profile(tmp_path, lambda: None)
    rel = path.relative_to(tmp_path)
    assert rel.parts[:2] == ("plugins", "profile")
    assert len(rel.parts) == 4
    time.strptime(rel.parts[2], "%Y_%m_%d_%H_%M_%S")
    assert rel.name.endswith(".xplane.pb")
    assert list(space.hostnames) and rel.name.startswith(space.hostnames[0].split(".")[0])
    # Nothing half-written is left beside it.
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_steps_nesting_and_metadata_stats(tmp_path: Path) -> None:
    def body() -> None:
        for step in range(3):
            with stepscope.Trace("train", step_num=step, _r=1):
                with stepscope.Trace("forward", lr=0.5, tag="fwd", flag=True):
                    time.sleep(0.001)
                with stepscope.Trace("backward"):
                    pass

    _, space = _profile(tmp_path, body)
    evs = events(plane(space, schema.HOST_PLANE))
    train = [e for e in evs if e.name == "train"]
    assert [e.stats for e in train] == [{"step_num": i, "_r": 1} for i in range(3)]
    forward = [e for e in evs if e.name == "forward"]
    assert forward[0].stats == {"lr": 0.5, "tag": "fwd", "flag": 1}
    for t, f in zip(train, forward, strict=True):
        assert t.start_ns <= f.start_ns and f.end_ns <= t.end_ns  # nested inside its step
        assert f.duration_ns >= 1_000_000
    # Same line for all: one line per thread.
    assert len({e.line for e in evs}) == 1
    # Parents come before children on a line.
    assert [e.name for e in evs][:3] == ["train", "forward", "backward"]


def test_each_thread_gets_its_own_named_line(tmp_path: Path) -> None:
    def worker(i: int) -> None:
        with stepscope.Trace(f"work-{i}"):
            time.sleep(0.001)

    def body() -> None:
        threads = [threading.Thread(target=worker, args=(i,), name=f"loader-{i}")
                   for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with stepscope.Trace("main-work"):
            pass

    _, space = _profile(tmp_path, body)
    evs = events(plane(space, schema.HOST_PLANE))
    by_name = {e.name: e for e in evs}
    for i in range(3):
        assert by_name[f"work-{i}"].line == f"loader-{i}"
    assert by_name["main-work"].line == threading.current_thread().name
    assert len({e.line_id for e in evs}) == 4


def test_decorator_records_each_call(tmp_path: Path) -> None:
    @stepscope.Trace("decorated", kind="fn")
    def f(x: int) -> int:
        return x * 2

    assert f.__name__ == "f"

    def body() -> None:
        assert [f(i) for i in range(4)] == [0, 2, 4, 6]

    assert f(1) == 2  # no session: runs untouched
    _, space = _profile(tmp_path, body)
    evs = [e for e in events(plane(space, schema.HOST_PLANE)) if e.name == "decorated"]
    assert len(evs) == 4 and all(e.stats == {"kind": "fn"} for e in evs)


def test_set_metadata_and_exceptions_still_record(tmp_path: Path) -> None:
    def body() -> None:
        with stepscope.Trace("annotated") as tr:
            tr.set_metadata(items=7)
        with pytest.raises(ZeroDivisionError), stepscope.Trace("failing"):
            _ = 1 / 0

    _, space = _profile(tmp_path, body)
    by_name = {e.name: e for e in events(plane(space, schema.HOST_PLANE))}
    assert by_name["annotated"].stats == {"items": 7}
    assert "failing" in by_name


def test_traces_outside_a_session_are_not_recorded(tmp_path: Path) -> None:
    with stepscope.Trace("before"):
        pass
    t = stepscope.Trace("straddles")
    t.__enter__()
    # No framework bridges: a JAX imported by an earlier test would add its own host events
    # (its garbage-collection hook) whenever a collection falls inside the session.
    opts = stepscope.ProfilerOptions(device_tracer_level=0, counter_interval_ms=0)
    _, space = _profile(tmp_path, lambda: stepscope.Trace("inside").__enter__().__exit__(
        None, None, None), opts)
    t.__exit__(None, None, None)
    names = {e.name for e in events(plane(space, schema.HOST_PLANE))}
    assert names == {"inside"}


@pytest.mark.parametrize(("level", "expected"), [(0, set()), (1, {"user"}),
                                                 (2, {"user", "internal"}),
                                                 (3, {"user", "internal", "verbose"})])
def test_host_tracer_levels(tmp_path: Path, level: int, expected: set[str]) -> None:
    from stepscope.capture.trace import record

    def body() -> None:
        with stepscope.Trace("user"):
            pass
        now = time.time_ns()
        record("internal", now, now + 10, level=2)
        record("verbose", now, now + 10, level=3)

    # No framework bridges: a JAX imported by an earlier test adds its garbage-collection
    # hook's host events (PythonRefManager::CollectGarbage) when a collection falls inside.
    opts = stepscope.ProfilerOptions(host_tracer_level=level, counter_interval_ms=0,
                                     device_tracer_level=0)
    _, space = _profile(tmp_path, body, opts)
    assert {e.name for e in events(plane(space, schema.HOST_PLANE))} == expected


def test_event_cap_drops_counts_and_warns(tmp_path: Path) -> None:
    # No framework bridge (a framework imported by another test would add its events).
    opts = stepscope.ProfilerOptions(max_events=100, counter_interval_ms=0, device_tracer_level=0)
    stepscope.start(tmp_path, options=opts)
    for i in range(250):
        with stepscope.Trace("e", i=i):
            pass
    with pytest.warns(stepscope.DroppedEventsWarning, match="dropped 150 events"):
        path = stepscope.stop()
    assert path is not None
    space = read_space(path)
    evs = events(plane(space, schema.HOST_PLANE))
    assert len(evs) == 100
    assert [e.stats["i"] for e in evs] == list(range(100))  # the first ones are kept
    env = plane_stats(plane(space, schema.TASK_ENV_PLANE))
    assert env[schema.ENV_DROPPED_EVENTS] == 150
    assert env[schema.ENV_RECORDED_EVENTS] == 100
    assert any("dropped 150" in w for w in space.warnings)


def test_no_warning_under_the_cap(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, space = _profile(tmp_path, lambda: None)
    assert plane_stats(plane(space, schema.TASK_ENV_PLANE))[schema.ENV_DROPPED_EVENTS] == 0


def test_task_environment_records_times_and_options(tmp_path: Path) -> None:
    before = time.time_ns()
    opts = stepscope.ProfilerOptions(host_tracer_level=3, counter_interval_ms=0)
    _, space = _profile(tmp_path, lambda: time.sleep(0.01), opts)
    after = time.time_ns()
    env = plane_stats(plane(space, schema.TASK_ENV_PLANE))
    start, stop = env[schema.ENV_PROFILE_START_TIME], env[schema.ENV_PROFILE_STOP_TIME]
    assert before <= start < stop <= after
    assert stop - start >= 10_000_000
    assert env[schema.ENV_OPTION_PREFIX + "host_tracer_level"] == 3
    assert env[schema.ENV_OPTION_PREFIX + "python_tracer_level"] == 0


def test_profile_context_manager(tmp_path: Path) -> None:
    with stepscope.Profile(tmp_path) as prof, stepscope.Trace("in-profile"):
        pass
    assert prof.path is not None and prof.path.exists()
    names = {e.name for e in events(plane(read_space(prof.path), schema.HOST_PLANE))}
    assert names == {"in-profile"}


def test_delay_ms_skips_the_start(tmp_path: Path) -> None:
    opts = stepscope.ProfilerOptions(delay_ms=150, counter_interval_ms=0)
    stepscope.start(tmp_path, options=opts)
    with stepscope.Trace("early"):
        pass
    time.sleep(0.4)
    with stepscope.Trace("late"):
        pass
    path = stepscope.stop()
    assert path is not None
    assert {e.name for e in events(plane(read_space(path), schema.HOST_PLANE))} == {"late"}


def test_python_tracer_records_calls_on_every_thread(tmp_path: Path) -> None:
    def leaf(n: int) -> int:
        return sum(range(n))

    def branch() -> int:
        return leaf(10) + leaf(20)

    def worker() -> None:
        branch()

    def body() -> None:
        t = threading.Thread(target=worker, name="py-worker")
        t.start()
        t.join()
        branch()

    opts = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=0)
    _, space = _profile(tmp_path, body, opts)
    py = events(plane(space, schema.PYTHON_TRACER_PLANE))
    lines = {e.line for e in py}
    assert "py-worker" in lines and threading.current_thread().name in lines
    branch_name = f"$test_capture.py:{branch.__code__.co_firstlineno} " \
                  "test_python_tracer_records_calls_on_every_thread.<locals>.branch"
    for line in ("py-worker", threading.current_thread().name):
        on_line = [e for e in py if e.line == line]
        branches = [e for e in on_line if e.name == branch_name]
        assert len(branches) == 1
        leaves = [e for e in on_line if e.name.endswith("<locals>.leaf")]
        assert len(leaves) == 2
        assert all(branches[0].start_ns <= lf.start_ns <= lf.end_ns <= branches[0].end_ns
                   for lf in leaves)
    # C functions are recorded too, named after the builtin.
    assert any(e.name == "$builtins.sum" for e in py)
    # The host plane holds no Python-tracer events.
    assert not any(e.name.startswith("$") for e in events(plane(space, schema.HOST_PLANE)))


def test_python_tracer_off_by_default(tmp_path: Path) -> None:
    _, space = _profile(tmp_path, lambda: sum(range(3)))
    assert schema.PYTHON_TRACER_PLANE not in [p.name for p in space.planes]


def test_system_counters_are_sampled(tmp_path: Path) -> None:
    opts = stepscope.ProfilerOptions(counter_interval_ms=10)
    block = bytearray(50 * 1024 * 1024)  # noqa: F841 - keeps RSS visibly non-zero
    _, space = _profile(tmp_path, lambda: time.sleep(0.2), opts)
    counters = events(plane(space, schema.COUNTERS_PLANE))
    by_line: dict[str, list[float]] = {}
    for e in counters:
        by_line.setdefault(e.line, []).append(e.stats[schema.VALUE])
    rss = by_line[schema.COUNTER_PROCESS_RSS]
    assert len(rss) >= 5  # 200 ms at 10 ms, allowing for a slow machine
    assert min(rss) > 50 * 1024 * 1024
    assert all(v >= 0 for v in by_line[schema.COUNTER_PROCESS_CPU])
    used = by_line[schema.COUNTER_SYSTEM_MEMORY_USED]
    avail = by_line[schema.COUNTER_SYSTEM_MEMORY_AVAILABLE]
    assert all(u > 0 and a > 0 for u, a in zip(used, avail, strict=True))


# --- errors ---------------------------------------------------------------------------------

def test_start_while_running_is_refused(tmp_path: Path) -> None:
    stepscope.start(tmp_path, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    try:
        with pytest.raises(stepscope.ProfilerAlreadyRunningError, match="stop"):
            stepscope.start(tmp_path)
    finally:
        stepscope.stop(save=False)


def test_stop_without_start_is_refused() -> None:
    with pytest.raises(stepscope.ProfilerNotRunningError, match="start"):
        stepscope.stop()


def test_unwritable_logdir_fails_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(stepscope.LogdirError, match="a-file"):
        stepscope.start(blocker / "logs")
    assert not stepscope.capture.session.is_running()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to read-only directories")
def test_read_only_logdir_fails_at_start(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(stepscope.LogdirError):
            stepscope.start(tmp_path / "logs")
    finally:
        tmp_path.chmod(0o700)


@pytest.mark.parametrize("kwargs", [
    {"host_tracer_level": 4}, {"host_tracer_level": -1}, {"host_tracer_level": "2"},
    {"python_tracer_level": 3}, {"device_tracer_level": 7}, {"delay_ms": -5},
    {"max_events": 0}, {"counter_interval_ms": -1}, {"host_tracer_level": True},
])
def test_bad_options_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(stepscope.InvalidOptionError) as info:
        stepscope.ProfilerOptions(**kwargs)  # type: ignore[arg-type]
    assert next(iter(kwargs)) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_options_must_be_profiler_options(tmp_path: Path) -> None:
    with pytest.raises(stepscope.InvalidOptionError, match="ProfilerOptions"):
        stepscope.start(tmp_path, options={"host_tracer_level": 2})  # type: ignore[arg-type]


def test_errors_share_a_base_class() -> None:
    for err in (stepscope.ProfilerAlreadyRunningError, stepscope.ProfilerNotRunningError,
                stepscope.InvalidOptionError, stepscope.LogdirError):
        assert issubclass(err, stepscope.StepscopeError)


def test_python_tracer_reaches_threads_started_before_the_session(tmp_path: Path) -> None:
    stop = threading.Event()

    def tick() -> int:
        return 1

    def spin() -> None:
        while not stop.is_set():
            tick()
            time.sleep(0.001)

    t = threading.Thread(target=spin, name="pre-existing")
    t.start()
    try:
        opts = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=0)
        _, space = _profile(tmp_path, lambda: time.sleep(0.1), opts)
    finally:
        stop.set()
        t.join()
    ticks = [e for e in events(plane(space, schema.PYTHON_TRACER_PLANE))
             if e.line == "pre-existing" and e.name.endswith("<locals>.tick")]
    assert len(ticks) >= 10


def test_python_tracer_stops_with_the_session(tmp_path: Path) -> None:
    import sys

    opts = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=0)
    _profile(tmp_path, lambda: None, opts)
    assert sys.getprofile() is None
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(sys.getprofile()))
    t.start()
    t.join()
    assert seen == [None]


def test_profiles_get_the_umask_mode_not_a_private_one(tmp_path: Path) -> None:
    """TensorBoard often runs as another user: a profile is as readable as any file written."""
    import os

    old = os.umask(0o027)
    try:
        path, _ = _profile(tmp_path, lambda: None)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
