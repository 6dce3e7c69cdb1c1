"""The flight recorder (``stepscope.flight_recorder``): a bounded ring that keeps the slow step.

Step times come from a fake clock, so which step is slow does not depend on how busy the
machine is; the recorded events themselves are real (``Trace`` on the compiled and the
pure-Python recorders, through one fixture). Kills, SIGTERM and the snapshot request run
against real child processes, the snapshot over real gRPC on 127.0.0.1.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import stepscope
from stepscope.analysis.run_model.overview_page import overview
from stepscope.capture import flight
from stepscope.capture import recorder as recorder_module
from stepscope.errors import InvalidOptionError, ProfilerAlreadyRunningError
from stepscope.formats import xplane_builder as xb
from stepscope.model import schema

SRC = Path(__file__).resolve().parents[1] / "src"
compiled_only = pytest.mark.skipif(recorder_module._fastpath is None,
                                   reason="_fastpath is not built")
RECORDERS = [pytest.param(False, id="python"),
             pytest.param(True, id="compiled", marks=compiled_only)]
MS = 1_000_000


@pytest.fixture
def recorder_kind(request: pytest.FixtureRequest,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Record into the compiled records (True) or the pure-Python tuples (False)."""
    compiled: bool = request.param
    if not compiled:
        monkeypatch.setattr(recorder_module, "_fastpath", None)
    yield compiled


@pytest.fixture(autouse=True)
def _no_flight_leaks() -> Iterator[None]:
    yield
    if flight.active() is not None:
        flight.stop()
        pytest.fail("the test left a flight recorder running")


class FakeClock:
    """Step times for the judge: each step advances it by what the test says."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def runs(logdir: Path) -> list[Path]:
    root = logdir / "plugins" / "profile"
    return sorted(root.iterdir()) if root.is_dir() else []


def step_nums(path: Path) -> list[int]:
    """The step numbers of the ``train`` step events in one saved profile."""
    space = xb.read_space(path)
    host = next(p for p in space.planes if p.name == schema.HOST_PLANE)
    names = {k: v.name for k, v in host.event_metadata.items()}
    stats = {k: v.name for k, v in host.stat_metadata.items()}
    return sorted(st.int64_value for line in host.lines for e in line.events
                  if names[e.metadata_id] == "train"
                  for st in e.stats if stats[st.metadata_id] == schema.STEP_NUM)


def env_stats(path: Path) -> dict[str, Any]:
    space = xb.read_space(path)
    env = next(p for p in space.planes if p.name == schema.TASK_ENV_PLANE)
    names = {k: v.name for k, v in env.stat_metadata.items()}
    out: dict[str, Any] = {}
    for st in env.stats:
        field = st.WhichOneof("value")
        out[names[st.metadata_id]] = getattr(st, field) if field else None
    return out


def loop(fr: flight.FlightRecorder, clock: FakeClock, n: int, slow: set[int],
         events_per_step: int = 2) -> None:
    """``n`` steps of ~10 ms (fake), the ones in ``slow`` 5× longer; real annotations."""
    jitter = random.Random(7)
    for i in range(n):
        with fr.step(i):
            for j in range(events_per_step):
                with stepscope.Trace("work", layer=j):
                    pass
            clock.now += (50 if i in slow else 10) * MS + jitter.randrange(0, MS // 2)


TRIGGERS = stepscope.FlightTriggers(warmup_steps=50, after_steps=3, cooldown_s=0.0,
                                    signal=None, sigterm=False)


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_one_slow_step_in_ten_thousand_is_dumped_with_its_window(
        tmp_path: Path, recorder_kind: bool) -> None:
    slow = random.Random(recorder_kind).randrange(1000, 9900)
    clock = FakeClock()
    with stepscope.flight_recorder(tmp_path, steps=200, triggers=TRIGGERS,
                                   clock=clock) as fr:
        assert fr._segments[-1].recorder.compiled == recorder_kind
        loop(fr, clock, 10_000, {slow})
    assert len(fr.dumps) == 1
    [run] = runs(tmp_path)
    assert run.name.endswith("-flight-slow_step")
    [profile] = run.iterdir()
    # The 200 steps before it, the slow step, and the 3 after it: no more, no fewer.
    assert step_nums(profile) == list(range(slow - 200, slow + 4))
    env = env_stats(profile)
    assert env[schema.ENV_FLIGHT_TRIGGER] == "slow_step"
    assert env[schema.ENV_FLIGHT_STEP] == slow
    assert 50 <= env[schema.ENV_FLIGHT_STEP_MS] < 51
    assert 10 <= env[schema.ENV_FLIGHT_MEDIAN_MS] < 11
    assert env[schema.ENV_FLIGHT_THRESHOLD_MS] == pytest.approx(
        3 * env[schema.ENV_FLIGHT_MEDIAN_MS], rel=1e-6)
    assert env[schema.ENV_FLIGHT_WINDOW] == "steps=200"
    # The overview reads the trigger back, and the terminal report says it.
    summary = overview(stepscope.load(str(run))).to_dict()
    assert summary["flight"]["trigger"] == "slow_step" and summary["flight"]["step"] == slow
    from rich.console import Console

    from stepscope.views.report import render_overview

    console = Console(record=True, width=200)
    render_overview(summary, console)
    assert f"Saved by the flight recorder: slow step at step {slow} (5" in console.export_text()


def test_both_recorders_dump_the_same_window(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if recorder_module._fastpath is None:
        pytest.skip("_fastpath is not built")
    windows = []
    for kind in ("compiled", "python"):
        if kind == "python":
            monkeypatch.setattr(recorder_module, "_fastpath", None)
        clock = FakeClock()
        with stepscope.flight_recorder(tmp_path / kind, steps=40, triggers=TRIGGERS,
                                       clock=clock) as fr:
            loop(fr, clock, 700, {333}, events_per_step=3)
        [run] = runs(tmp_path / kind)
        [profile] = run.iterdir()
        space = xb.read_space(profile)
        host = next(p for p in space.planes if p.name == schema.HOST_PLANE)
        names = {k: v.name for k, v in host.event_metadata.items()}
        windows.append(sorted((names[e.metadata_id], len(e.stats))
                              for line in host.lines for e in line.events))
    assert windows[0] == windows[1]
    assert len(windows[0]) == (40 + 1 + 3) * 4


def test_a_slow_step_in_the_warm_up_is_not_dumped(tmp_path: Path) -> None:
    clock = FakeClock()
    with stepscope.flight_recorder(tmp_path, steps=100, triggers=TRIGGERS, clock=clock) as fr:
        loop(fr, clock, 2000, {random.Random(3).randrange(1, 50)})
    assert fr.dumps == [] and runs(tmp_path) == []


def test_cool_down_and_max_dumps_limit_slow_step_dumps(tmp_path: Path) -> None:
    clock = FakeClock()
    triggers = stepscope.FlightTriggers(warmup_steps=10, after_steps=0, cooldown_s=1.0,
                                        max_dumps=2, signal=None, sigterm=False)
    with stepscope.flight_recorder(tmp_path, steps=20, triggers=triggers, clock=clock) as fr:
        # Slow every 50 steps (0.5 s of fake time apart): the cool-down lets one in 1 s pass.
        loop(fr, clock, 1000, set(range(100, 1000, 50)))
    assert [d.step for d in fr.dumps] == [100, 200]


def test_fixed_time_threshold(tmp_path: Path) -> None:
    clock = FakeClock()
    triggers = stepscope.FlightTriggers(slow_factor=None, slow_ms=45.0, warmup_steps=5,
                                        after_steps=0, signal=None, sigterm=False)
    with stepscope.flight_recorder(tmp_path, steps=10, triggers=triggers, clock=clock) as fr:
        loop(fr, clock, 100, {70})
    assert [(d.trigger, d.step) for d in fr.dumps] == [("slow_step", 70)]


def test_exception_escaping_a_step_dumps(tmp_path: Path) -> None:
    clock = FakeClock()
    fr = stepscope.flight_recorder(tmp_path, steps=30, triggers=TRIGGERS, clock=clock)
    with pytest.raises(ZeroDivisionError), fr:
        loop(fr, clock, 120, set())
        with fr.step(120):
            clock.now += 10 * MS
            _ = 1 / 0
    [dump] = fr.dumps
    assert dump.trigger == "exception" and dump.step == 120
    assert "ZeroDivisionError" in dump.detail
    assert step_nums(dump.path) == list(range(90, 121))
    assert env_stats(dump.path)[schema.ENV_FLIGHT_DETAIL].startswith("ZeroDivisionError")


def test_call_and_sigusr1_dump(tmp_path: Path) -> None:
    clock = FakeClock()
    triggers = stepscope.FlightTriggers(warmup_steps=10, after_steps=2, sigterm=False)
    with stepscope.flight_recorder(tmp_path, seconds=30.0, triggers=triggers,
                                   clock=clock) as fr:
        loop(fr, clock, 50, set())
        called = stepscope.flight_recorder.dump("checkpoint went slow")
        assert called is not None and called.trigger == "call"
        assert step_nums(called.path) == list(range(50))
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not fr._pending and time.monotonic() < deadline:
            time.sleep(0.01)  # the handler queues the trigger from a thread of its own
        loop(fr, clock, 10, set())
    triggers_seen = sorted(d.trigger for d in fr.dumps)
    assert triggers_seen == ["call", "signal"]
    sig = next(d for d in fr.dumps if d.trigger == "signal")
    # The 30 s window: every step so far, and the two after the signal (numbered from 0 again).
    assert step_nums(sig.path) == sorted([*range(50), 0, 1])
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # put back at stop


def test_one_recorder_at_a_time_and_no_session_beside_it(tmp_path: Path) -> None:
    with stepscope.flight_recorder(tmp_path, steps=10, triggers=TRIGGERS):
        with pytest.raises(ProfilerAlreadyRunningError):
            stepscope.flight_recorder(tmp_path, steps=10)
        with pytest.raises(ProfilerAlreadyRunningError):
            stepscope.start(tmp_path)
    with pytest.raises(InvalidOptionError):
        stepscope.flight_recorder(tmp_path, steps=10, seconds=1.0)
    with pytest.raises(InvalidOptionError):
        stepscope.flight_recorder(tmp_path, steps=10, max_bytes=1000)
    with pytest.raises(InvalidOptionError):
        stepscope.FlightTriggers(slow_factor=0.5)


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_memory_stays_at_the_bound_over_100k_steps(tmp_path: Path, recorder_kind: bool) -> None:
    bound = 16 << 20
    clock = FakeClock()
    process = psutil.Process()
    # A window far larger than the bound holds: the bound, not the window, must decide.
    with stepscope.flight_recorder(tmp_path, steps=100_000, triggers=TRIGGERS, clock=clock,
                                   max_bytes=bound) as fr:
        peak = 0
        rss_at: dict[int, int] = {}
        for i in range(100_000):
            with fr.step(i):
                for j in range(6):
                    with stepscope.Trace("work", layer=j, name=f"op{i % 7}"):
                        pass
                clock.now += 10 * MS
            if i % 500 == 0:
                peak = max(peak, fr.nbytes)
                if i in (20_000, 99_500):
                    rss_at[i] = process.memory_info().rss
        assert peak <= bound
        # It filled up to near the bound, then recycled whole segments.
        assert peak > bound // 2
        assert fr.peak_current <= fr.segment_bytes
    # Past the point where the ring is full, the process does not grow by more than a
    # fraction of the bound (allocator slack), whatever the length of the run.
    assert rss_at[99_500] - rss_at[20_000] < bound // 2


def _run_child(code: str, logdir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(logdir)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# A job whose dumps take long enough to be killed in the middle of one: a large window,
# dumped again and again.
DUMPING_JOB = """
    import sys, stepscope
    fr = stepscope.flight_recorder(sys.argv[1], steps=5000,
                                   triggers=stepscope.FlightTriggers(after_steps=0))
    for i in range(4000):
        with fr.step(i):
            for j in range(40):
                with stepscope.Trace("work", layer=j):
                    pass
    print("ready", flush=True)
    while True:
        fr.dump("again")
"""


def _complete_runs(logdir: Path) -> list[Path]:
    """Every run in the profile folder, each checked to be whole (one readable profile)."""
    found = runs(logdir)
    for run in found:
        files = list(run.iterdir())
        assert len(files) == 1 and files[0].name.endswith(".xplane.pb"), files
        space = xb.read_space(files[0])  # a truncated file fails to parse
        assert any(p.name == schema.TASK_ENV_PLANE for p in space.planes)
    return found


@pytest.mark.parametrize("how", ["kill", "term"])
def test_killed_during_a_dump_never_leaves_a_half_written_run(tmp_path: Path, how: str) -> None:
    delays = random.Random(how).sample(range(50, 900), 3)
    for n, delay_ms in enumerate(delays):
        logdir = tmp_path / str(n)
        child = _run_child(DUMPING_JOB, logdir)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready", child.stderr
            time.sleep(delay_ms / 1000)
            child.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
            child.wait(120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        done = _complete_runs(logdir)
        if how == "term":
            # SIGTERM: the window was saved before the process exited, by the signal.
            assert child.returncode == -signal.SIGTERM
            assert any(r.name.endswith("-flight-sigterm") for r in done)
            sigterm = next(r for r in done if r.name.endswith("-flight-sigterm"))
            [profile] = sigterm.iterdir()
            assert len(step_nums(profile)) == 4000
        else:
            assert child.returncode == -signal.SIGKILL


def test_snapshot_over_grpc_from_another_process(tmp_path: Path) -> None:
    job = _run_child("""
        import sys, time, stepscope
        import stepscope.server
        port = stepscope.server.start(0)
        # No automatic dumps: the sleeps of a busy machine make slow steps of their own.
        fr = stepscope.flight_recorder(sys.argv[1], steps=300,
                                       triggers=stepscope.FlightTriggers(slow_factor=None))
        print(port, flush=True)
        i = 0
        while i < 100_000:
            with fr.step(i):
                with stepscope.Trace("work"):
                    time.sleep(0.002)
            i += 1
    """, tmp_path / "job")
    try:
        assert job.stdout is not None
        port = int(job.stdout.readline())
        time.sleep(1.0)  # a few hundred steps into the loop
        out = subprocess.run(
            [sys.executable, "-m", "stepscope", "capture", "--snapshot", f"127.0.0.1:{port}",
             "--logdir", str(tmp_path / "fetched"), "--json"],
            env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True,
            timeout=120)
    finally:
        job.kill()
        job.wait()
    assert out.returncode == 0, out.stderr
    [run] = runs(tmp_path / "fetched")
    assert run.name.endswith("-flight-snapshot")
    [profile] = run.iterdir()
    nums = step_nums(profile)
    assert 50 <= len(nums) <= 301 and nums == list(range(nums[0], nums[0] + len(nums)))
    assert env_stats(profile)[schema.ENV_FLIGHT_TRIGGER] == "snapshot"
    # Nothing was written on the worker's side.
    assert runs(tmp_path / "job") == []


def test_snapshot_of_a_process_without_a_flight_recorder_says_so(tmp_path: Path) -> None:
    from stepscope import server
    from stepscope.errors import CaptureError
    from stepscope.remote import client

    port = server.start(0)
    try:
        with pytest.raises(CaptureError, match="no flight recorder"):
            client.snapshot(f"127.0.0.1:{port}", tmp_path)
    finally:
        server.stop()
    assert runs(tmp_path) == []


def test_web_run_list_and_overview_show_the_trigger(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from stepscope.web.app import create_app

    clock = FakeClock()
    with stepscope.flight_recorder(tmp_path, steps=30, triggers=TRIGGERS, clock=clock) as fr:
        loop(fr, clock, 200, {150})
    stepscope.start(tmp_path, options=stepscope.ProfilerOptions(counter_interval_ms=0))
    with stepscope.Trace("train", step_num=0, _r=1):
        pass
    stepscope.stop()
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        listed = client.get("/api/runs").json()["runs"]
        triggers = {r["name"]: r["trigger"] for r in listed}
        assert sorted(triggers.values(), key=str) == [None, "slow_step"]
        dumped = next(name for name, trigger in triggers.items() if trigger)
        host = next(r["hosts"][0] for r in listed if r["name"] == dumped)
        for params in ({}, {"host": host}):
            for _ in range(1200):  # 202 while the run loads: ask again
                reply = client.get("/api/data", params={"run": dumped, "tool": "overview_page",
                                                        **params})
                if reply.status_code != 202:
                    break
                time.sleep(0.05)
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["flight"]["trigger"] == "slow_step"
            assert body["flight"]["step"] == 150


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_python_tracer_and_counters_in_the_ring(tmp_path: Path) -> None:
    clock = FakeClock()
    options = stepscope.ProfilerOptions(python_tracer_level=1, counter_interval_ms=5)
    with stepscope.flight_recorder(tmp_path, steps=16, options=options, triggers=TRIGGERS,
                                   clock=clock) as fr:
        for i in range(100):  # 2 steps a segment: the tracer moves to a new one often
            with fr.step(i):
                _fib(8)
                time.sleep(0.002)
                clock.now += (50 if i == 80 else 10) * MS
    [dump] = fr.dumps
    space = xb.read_space(dump.path)
    planes = {p.name: p for p in space.planes}
    assert step_nums(dump.path) == list(range(64, 84))
    py = planes[schema.PYTHON_TRACER_PLANE]
    names = {k: v.name for k, v in py.event_metadata.items()}
    fib_calls = [e for line in py.lines for e in line.events if "_fib" in names[e.metadata_id]]
    # fib(8) makes 67 calls; 20 steps are in the window (a call at a cut may be split).
    assert 19 * 67 <= len(fib_calls) <= 21 * 67
    counters = planes[schema.COUNTERS_PLANE]
    assert {line.name for line in counters.lines} >= {schema.COUNTER_PROCESS_RSS}


def test_a_launcher_starts_it_from_arguments_and_reports_the_end(tmp_path: Path) -> None:
    fr = flight.start_from_args(str(tmp_path), steps=10, python_tracer=False)
    try:
        for i in range(30):
            with stepscope.flight_recorder.step(i):
                pass
        assert fr.report_exception(SystemExit(0)) is None
        dump = fr.report_exception(RuntimeError("the program died"))
    finally:
        flight.stop()
    assert dump is not None and dump.trigger == "exception"
    assert dump.detail == "RuntimeError: the program died"
    assert step_nums(dump.path) == list(range(20, 30))


def test_sigusr1_without_step_marks_dumps_at_once(tmp_path: Path) -> None:
    with stepscope.flight_recorder(tmp_path, seconds=5.0, triggers=stepscope.FlightTriggers(
            sigterm=False)) as fr:
        for _ in range(50):
            with stepscope.Trace("request"):
                pass
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 60
        while not fr.dumps and time.monotonic() < deadline:
            time.sleep(0.02)
        [dump] = fr.dumps
    assert dump.trigger == "signal" and dump.step is None
    space = xb.read_space(dump.path)
    host = next(p for p in space.planes if p.name == schema.HOST_PLANE)
    names = {k: v.name for k, v in host.event_metadata.items()}
    assert sum(names[e.metadata_id] == "request" for line in host.lines
               for e in line.events) == 50
    assert env_stats(dump.path)[schema.ENV_FLIGHT_STEP] == -1


def test_a_seconds_window_keeps_only_the_recent_past(tmp_path: Path) -> None:
    clock = FakeClock()
    triggers = stepscope.FlightTriggers(warmup_steps=5, after_steps=1, signal=None,
                                        sigterm=False)
    with stepscope.flight_recorder(tmp_path, seconds=0.5, triggers=triggers,
                                   clock=clock) as fr:
        for i in range(120):  # ~1.2 s of real time: the ticker rotates the ring meanwhile
            with fr.step(i):
                time.sleep(0.01)
                clock.now += (50 if i == 110 else 10) * MS
        segments = len(fr._segments)
    [dump] = fr.dumps
    nums = step_nums(dump.path)
    space = xb.read_space(dump.path)
    env = env_stats(dump.path)
    host = next(p for p in space.planes if p.name == schema.HOST_PLANE)
    starts = [line.timestamp_ns + e.offset_ps // 1000 for line in host.lines
              for e in line.events]
    # Nothing older than half a second before the slow step began; the step and one after.
    assert nums[-2:] == [110, 111] and nums == list(range(nums[0], 112))
    assert nums[0] > 0 and len(nums) < 112
    assert min(starts) >= env[schema.ENV_PROFILE_START_TIME]
    assert env[schema.ENV_FLIGHT_WINDOW] == "seconds=0.5"
    assert segments <= flight.KEPT_SEGMENTS
