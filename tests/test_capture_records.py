"""The recorder's binary records and the XPlane bytes written from them, exactly.

Events recorded with known times (``trace.record``) must come back from the profile file as
they went in: names, times to the nanosecond, stats of every value type, one line per thread;
the compiled and pure-Python recorders, and the compiled and NumPy encoders, must agree with
each other and with the protobuf message ``xplane_builder`` builds from the same events.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import stepscope
from stepscope.capture import recorder as recorder_module
from stepscope.capture import trace
from stepscope.capture.recorder import PyNames, Recorder
from stepscope.capture.recorder_columns import buffer_columns, records_to_tuples
from stepscope.capture.recorder_to_xplane import plane_columns
from stepscope.formats import xplane_builder as xb
from stepscope.formats import xplane_encoder as enc
from stepscope.formats.xplane_proto import XPlane, XSpace
from stepscope.formats.xspace_columns import decode_columns, decode_columns_protobuf
from stepscope.model import schema

import twins
from xspace_view import Ev, plane, plane_stats
from xspace_view import events as float_events


def events(p: Any) -> list[Ev]:
    """As ``xspace_view.events``, with times as exact ints (ns)."""
    out = float_events(p)
    exact = [(line.timestamp_ns + e.offset_ps // 1000, e.duration_ps // 1000)
             for line in p.lines for e in line.events]
    for ev, (start, duration) in zip(out, exact, strict=True):
        ev.start_ns, ev.duration_ns = start, duration
    return out

compiled_only = twins.compiled_only("_fastpath")
RECORDERS = [pytest.param(False, id="python"),
             pytest.param(True, id="compiled", marks=compiled_only)]
ENCODERS = [pytest.param(False, id="numpy"),
            pytest.param(True, id="compiled", marks=twins.compiled_only("_xplane_encode"))]

BASE = time.time_ns() + 10**12  # ns: after the session's start, as recorded times are


class Opaque:
    """A stat value of no known type: written as its str()."""

    def __str__(self) -> str:
        return "opaque!"


# Every kind of stat value, and what reading the profile gives back for it.
STATS: dict[str, Any] = {
    "int": 7, "zero": 0, "negative": -(2**40), "int64_min": -(2**63), "int64_max": 2**63 - 1,
    "uint64": 2**64 - 1, "float": 2.5, "nan_free": -0.0, "true": True, "false": False,
    "str": "héllo", "empty": "", "bytes": b"\x00\xff", "object": Opaque(), "none": None,
}
READ_BACK: dict[str, Any] = {**STATS, "true": 1, "false": 0, "object": "opaque!", "none": "None"}


@pytest.fixture
def recorder_kind(request: pytest.FixtureRequest,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Run the session with the compiled records (True) or the pure-Python tuples (False)."""
    compiled: bool = request.param
    if not compiled:
        twins.use_twins(monkeypatch, False)
    yield compiled


def _session(tmp_path: Path, **options: Any) -> None:
    """A session of our events only: no counters, no framework profilers (whose events,
    when a framework was imported by another test, would join ours)."""
    stepscope.start(tmp_path, options=stepscope.ProfilerOptions(
        counter_interval_ms=0, device_tracer_level=0, **options))


def _read(path: Path | None) -> Any:
    assert path is not None
    return xb.read_space(path)


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_events_round_trip_exactly(tmp_path: Path, recorder_kind: bool) -> None:
    _session(tmp_path)
    assert stepscope.capture.session._session.recorder.compiled == recorder_kind  # type: ignore
    trace.record("plain", BASE + 10, BASE + 15, level=1)
    trace.record("with stats", BASE + 20, BASE + 20, level=1, **STATS)
    trace.record("plain", BASE + 30, BASE + 1_000_000_030, level=1, step_num=3, _r=1)
    trace.record("négatif", BASE + 40, BASE + 35, level=1)  # an end before its start
    space = _read(stepscope.stop())
    got = [(e.name, e.start_ns, e.duration_ns, e.stats)
           for e in events(plane(space, schema.HOST_PLANE))]
    assert got == [
        ("plain", BASE + 10, 5, {}),
        ("with stats", BASE + 20, 0, READ_BACK),
        ("plain", BASE + 30, 1_000_000_000, {"step_num": 3, "_r": 1}),
        ("négatif", BASE + 40, -5, {}),
    ]
    host = plane(space, schema.HOST_PLANE)
    assert sorted(md.name for md in host.event_metadata.values()) == [
        "négatif", "plain", "with stats"]  # one metadata per distinct name
    stat = {host.stat_metadata[s.metadata_id].name: s.WhichOneof("value")
            for e in host.lines[0].events for s in e.stats}
    assert stat["uint64"] == "uint64_value" and stat["float"] == "double_value"
    assert stat["bytes"] == "bytes_value" and stat["str"] == "str_value"
    assert stat["true"] == stat["int64_min"] == stat["zero"] == "int64_value"


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_ints_beyond_64_bits_are_written_as_text(tmp_path: Path, recorder_kind: bool) -> None:
    _session(tmp_path)
    trace.record("big", BASE, BASE + 1, level=1, above=2**64, below=-(2**63) - 1)
    (event,) = events(plane(_read(stepscope.stop()), schema.HOST_PLANE))
    assert event.stats == {"above": str(2**64), "below": str(-(2**63) - 1)}


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_many_threads_each_get_their_line_and_share_names(tmp_path: Path,
                                                          recorder_kind: bool) -> None:
    n_threads, per_thread = 8, 500
    barrier = threading.Barrier(n_threads)

    def work(t: int) -> None:
        barrier.wait()  # all alive at once: distinct thread ids
        for i in range(per_thread):
            name = "shared" if i % 2 == 0 else f"own-{t}"
            trace.record("".join(name), BASE + t * 10**9 + 2 * i, BASE + t * 10**9 + 2 * i + 1,
                         level=1, i=i, thread=f"t{t}")

    _session(tmp_path)
    threads = [threading.Thread(target=work, args=(t,), name=f"worker-{t}")
               for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    space = _read(stepscope.stop())
    host = plane(space, schema.HOST_PLANE)
    assert sorted(line.name for line in host.lines) == sorted(f"worker-{t}"
                                                              for t in range(n_threads))
    assert len({line.id for line in host.lines}) == n_threads
    # Names are interned across threads: one metadata per distinct text.
    names = [md.name for md in host.event_metadata.values()]
    assert sorted(names) == sorted(["shared"] + [f"own-{t}" for t in range(n_threads)])
    by_line: dict[str, list[Any]] = {}
    for e in events(host):
        by_line.setdefault(e.line, []).append(e)
    for t in range(n_threads):
        got = by_line[f"worker-{t}"]
        assert [(e.name, e.start_ns, e.duration_ns, e.stats) for e in got] == [
            ("shared" if i % 2 == 0 else f"own-{t}", BASE + t * 10**9 + 2 * i, 1,
             {"i": i, "thread": f"t{t}"}) for i in range(per_thread)]


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_a_thread_that_ended_before_stop_keeps_its_events(tmp_path: Path,
                                                          recorder_kind: bool) -> None:
    def short_lived(tag: str) -> None:
        with stepscope.Trace(f"in-{tag}", tag=tag):
            pass

    _session(tmp_path)
    for tag in ("a", "b", "c"):  # one after the other: the system may reuse a thread id
        t = threading.Thread(target=short_lived, args=(tag,), name=f"gone-{tag}")
        t.start()
        t.join()
    space = _read(stepscope.stop())
    got = {e.name: e.stats for e in events(plane(space, schema.HOST_PLANE))}
    assert got == {"in-a": {"tag": "a"}, "in-b": {"tag": "b"}, "in-c": {"tag": "c"}}


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_the_cap_keeps_the_first_events_and_counts_the_rest(tmp_path: Path,
                                                            recorder_kind: bool) -> None:
    _session(tmp_path, max_events=1000)
    with pytest.warns(stepscope.capture.session.DroppedEventsWarning):
        for i in range(1500):
            trace.record("e", BASE + i, BASE + i + 1, level=1, i=i)
        for _ in range(100):
            with stepscope.Trace("late"):
                pass
        space = _read(stepscope.stop())
    got = events(plane(space, schema.HOST_PLANE))
    assert [e.stats["i"] for e in got] == list(range(1000))
    env = plane_stats(plane(space, schema.TASK_ENV_PLANE))
    assert env[schema.ENV_RECORDED_EVENTS] == 1000
    assert env[schema.ENV_DROPPED_EVENTS] == 600
    assert any("dropped 600 events" in w for w in space.warnings)


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_compiled_trace_stats_and_set_metadata(tmp_path: Path, recorder_kind: bool) -> None:
    _session(tmp_path)
    with stepscope.Trace("inline", a=1, b="x", c=2.0, d=True):  # kept as the call's keywords
        pass
    with stepscope.Trace("five", a=1, b=2, c=3, d=4, e=5):  # more than are held inline
        pass
    with stepscope.Trace("updated", a=1) as t:
        t.set_metadata(a=2, z=b"z")
    space = _read(stepscope.stop())
    got = {e.name: e.stats for e in events(plane(space, schema.HOST_PLANE))}
    assert got == {"inline": {"a": 1, "b": "x", "c": 2.0, "d": 1},
                   "five": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5},
                   "updated": {"a": 2, "z": b"z"}}
    assert list(got["five"]) == ["a", "b", "c", "d", "e"]  # in the order given


def test_compiled_and_python_recorders_write_the_same_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if recorder_module._fastpath is None:
        pytest.skip("_fastpath is not built")

    def run(logdir: Path) -> list[Any]:
        _session(logdir)
        for i in range(300):
            trace.record(f"n{i % 7}", BASE + 3 * i, BASE + 3 * i + 2 + i % 3, level=1,
                         **({"k": i, "s": f"v{i % 4}"} if i % 5 == 0 else {}))
        host = plane(_read(stepscope.stop()), schema.HOST_PLANE)
        return [(e.name, e.start_ns, e.duration_ns, e.stats) for e in events(host)]

    compiled = run(tmp_path / "compiled")
    monkeypatch.setattr(recorder_module, "_fastpath", None)
    assert run(tmp_path / "python") == compiled
    assert len(compiled) == 300


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_python_tracer_events_reach_the_file(tmp_path: Path, recorder_kind: bool) -> None:
    def leaf() -> int:
        return len("abc")

    def body() -> None:
        for _ in range(50):
            leaf()

    _session(tmp_path, python_tracer_level=1)
    t = threading.Thread(target=body, name="py-worker")
    t.start()
    t.join()
    body()
    space = _read(stepscope.stop())
    py = events(plane(space, schema.PYTHON_TRACER_PLANE))
    leaf_name = f"$test_capture_records.py:{leaf.__code__.co_firstlineno} " \
                "test_python_tracer_events_reach_the_file.<locals>.leaf"
    for line in ("py-worker", threading.current_thread().name):
        mine = [e for e in py if e.line == line]
        leaves = [e for e in mine if e.name == leaf_name]
        assert len(leaves) == 50, line
        for e in leaves:  # each leaf's one call of len, nested in it
            inner = [c.name for c in mine if e.start_ns <= c.start_ns and c.end_ns <= e.end_ns
                     and c is not e]
            assert inner == ["$builtins.len"], line
        assert all(e.duration_ns >= 0 for e in mine)
        starts = [e.start_ns for e in mine]
        assert starts == sorted(starts)


@compiled_only
def test_records_hold_16_bytes_an_event_and_read_back_as_tuples() -> None:
    fp = recorder_module._fastpath
    names = fp.Names()
    records = fp.Records(names)
    code = test_records_hold_16_bytes_an_event_and_read_back_as_tuples.__code__
    for i in range(10_000):
        records.add("x" if i % 2 else "".join(["x"]), i, i + 1)  # equal texts: one id
    records.add(code, 5, 6)
    records.add(code, 7, 8)
    records.add("s", 1, 2, {"k": 1, "f": 0.5, "t": True, "u": 2**64 - 1, "o": None})
    records.add("long", 10, 10 + 2**32)  # durations beyond 32 bits (or below 0): end aside
    records.add("back", 10, 9)
    records.add("far", -(2**63), 2**63 - 1)
    assert len(records) == 10_006
    assert names.objects == ["x", code, "s", "k", "f", "t", "u", "o", None, "long", "back",
                             "far"]
    assert fp.EVENT_RECORD_BYTES == 16
    assert records.nbytes == 2 * 8192 * 16 + 4096 * 24 + 1024 * 16  # whole chunks only
    events_bytes, stats_bytes = records.dump()
    assert len(events_bytes) == 10_006 * 16 and len(stats_bytes) == 5 * 24
    tuples = records_to_tuples(records, with_stats=True)
    assert tuples[0] == ("x", 0, 1, None) and tuples[10_000] == (code, 5, 6, None)
    assert tuples[10_002] == ("s", 1, 2, {"k": 1, "f": 0.5, "t": True, "u": 2**64 - 1,
                                          "o": None})
    assert tuples[-3:] == [("long", 10, 10 + 2**32, None), ("back", 10, 9, None),
                           ("far", -(2**63), 2**63 - 1, None)]
    assert records_to_tuples(records, with_stats=False)[10_001] == (code, 7, 8)
    assert records.span() == (-(2**63), 2**63 - 1)
    assert fp.Records(names).span() is None


@compiled_only
def test_records_made_after_others_were_freed_hold_only_their_own_events() -> None:
    """Freed event chunks are kept for the next Records: what they held never shows again,
    and two Records never share one."""
    fp = recorder_module._fastpath
    names = fp.Names()
    per_chunk = 8192
    for _ in range(2):  # cleared, then freed: both hand their chunks back
        old = fp.Records(names)
        for i in range(3 * per_chunk + 5):
            old.add("old", 10**9 + i, 10**9 + 2 * i)
        old.clear()
        assert len(old) == 0 and records_to_tuples(old, with_stats=False) == []
        del old
    first, second = fp.Records(names), fp.Records(names)
    n = 2 * per_chunk + 3
    for i in range(n):
        first.add("first", i, i + 1)
        second.add("second", -i, 7)
    assert records_to_tuples(first, with_stats=False) == [("first", i, i + 1) for i in range(n)]
    assert records_to_tuples(second, with_stats=False) == [("second", -i, 7) for i in range(n)]
    assert first.span() == (0, n) and second.span() == (-(n - 1), 7)


@compiled_only
def test_records_extend_copies_events_stats_and_long_ends() -> None:
    fp = recorder_module._fastpath
    names = fp.Names()
    first, second = fp.Records(names), fp.Records(names)
    first.add("a", 1, 2, {"k": 1})
    second.add("b", 3, 3 + 2**33, {"s": "v", "t": 2.5})
    second.add("c", 4, 5)
    second.add("d", 6, 5, {"u": b"x"})
    first.extend(second)
    assert records_to_tuples(first, with_stats=True) == [
        ("a", 1, 2, {"k": 1}), ("b", 3, 3 + 2**33, {"s": "v", "t": 2.5}), ("c", 4, 5, None),
        ("d", 6, 5, {"u": b"x"})]
    with pytest.raises(ValueError):
        first.extend(fp.Records(fp.Names()))  # ids of other names would mean other things
    with pytest.raises(ValueError):
        first.extend(first)


def test_reading_events_moves_records_into_the_list_in_order() -> None:
    rec = Recorder(100)
    rec.add("a", 1, 2, None)
    buf = rec.host_buffers[0]
    first = buf.events
    assert first == [("a", 1, 2, None)]
    buf.events.append(("listed", 3, 4, {"k": 1}))  # a producer's tuple
    rec.add("b", 5, 6, {"v": 2})
    assert buf.events is first
    assert buf.events == [("a", 1, 2, None), ("listed", 3, 4, {"k": 1}),
                          ("b", 5, 6, {"v": 2})]
    cols = buffer_columns(buf, rec.names)
    assert cols.start.tolist() == [1, 3, 5] and cols.nstats.tolist() == [0, 1, 1]


# --- the encoder against the protobuf builder -----------------------------------------------


def _random_lines(seed: int) -> list[tuple[int, str, list[tuple[str, int, int, Any]]]]:
    rng = np.random.default_rng(seed)
    pool: list[Any] = [3, -1, 0, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, -0.0, math.pi, True,
                       False, "", "ü", "x" * 300, b"", b"\x00\x01", Opaque()]
    lines = []
    for line in range(4):
        evs = []
        for _ in range(int(rng.integers(0, 400))):
            start = BASE + int(rng.integers(-(10**6), 10**12))
            end = start + int(rng.integers(-5, 10**9)) * int(rng.integers(0, 2))
            stats = None
            if rng.random() < 0.3:
                keys = rng.choice(12, size=int(rng.integers(1, 6)), replace=False)
                stats = {f"k{k}": pool[int(rng.integers(len(pool)))] for k in keys}
            evs.append((f"name{int(rng.integers(20))}", start, end, stats))
        lines.append((line * 7 + 1, f"line {line}", evs))
    return lines


def _built_by_protobuf(lines: list[Any], timestamp: int) -> Any:
    """What ``xplane_builder`` makes of the same events, sorted as the recorder sorts."""
    space = XSpace()
    builder = xb.add_plane(space, 5, "/host:CPU")
    for line_id, name, evs in lines:
        line = builder.add_line(line_id, name, timestamp)
        for ev_name, start, end, stats in sorted(evs, key=lambda e: (e[1], -e[2])):
            builder.add_event(line, ev_name, start, end - start, stats)
    return space.planes[0]


@pytest.mark.parametrize("compiled", ENCODERS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_encoder_writes_what_the_protobuf_builder_builds(seed: int, compiled: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _random_lines(seed)
    names = PyNames()
    cols = []
    for line_id, name, evs in lines:
        rec = Recorder(10**6, compiled=False)
        rec.names = names
        buf = rec.line_buffer(line_id, name)
        buf.events.extend(evs)
        cols.append((line_id, name, buffer_columns(buf, names)))
    timestamp = BASE + 123
    columns = plane_columns(5, "/host:CPU", cols, names.objects, timestamp, 0, str)
    monkeypatch.setattr(enc, "_xplane_encode", enc._xplane_encode if compiled else None)
    data = enc.encode_plane(columns)
    expected = _built_by_protobuf(lines, timestamp)
    got = XPlane.FromString(data)
    assert got == expected
    assert data == expected.SerializeToString(deterministic=True)


def test_numpy_and_compiled_encoders_give_the_same_bytes() -> None:
    if enc._xplane_encode is None:
        pytest.skip("_xplane_encode is not built")
    names = PyNames()
    rec = Recorder(10**6, compiled=False)
    rec.names = names
    lines = []
    for line_id, name, evs in _random_lines(7):
        buf = rec.line_buffer(line_id, name)
        buf.events.extend(evs)
        lines.append((line_id, name, buffer_columns(buf, names)))
    columns = plane_columns(5, "p", lines, names.objects, BASE, BASE + 10**9, str)
    assert [bytes(b) for b in enc.line_events(columns, compiled=True)] == [
        bytes(b) for b in enc.line_events(columns, compiled=False)]


@pytest.mark.parametrize("recorder_kind", RECORDERS, indirect=True)
def test_our_files_decode_the_same_with_both_decoders(tmp_path: Path,
                                                      recorder_kind: bool) -> None:
    _session(tmp_path)
    for i in range(200):
        trace.record("e", BASE + i, BASE + 2 * i, level=1, **({"i": i, "s": "v"} if i % 3 else {}))
    path = stepscope.stop()
    assert path is not None
    data = path.read_bytes()
    ours, theirs = decode_columns(data), decode_columns_protobuf(data)
    for part in ("line", "metadata_id", "offset_ps", "duration_ps", "nstats"):
        assert np.array_equal(getattr(ours.events, part), getattr(theirs.events, part)), part
    assert np.array_equal(ours.stats.value, theirs.stats.value)


# --- records straight to bytes (records_xplane.c) against the columns path ------------------


class Named:
    """An event named by an object: written as its str(), merged with an equal str name."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no name")


def _hostile_lines(seed: int) -> list[tuple[int, str, list[tuple[Any, int, int, Any]]]]:
    """Lines of every shape the ordering meets: recorded as they end (nested, so out of
    start order), in order, many equal starts, identical events, durations negative or
    beyond 32 bits, extreme times; names and values of every kind."""
    rng = np.random.default_rng(seed)
    pool: list[Any] = [3, -1, 0, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, -0.0, math.pi, True,
                       False, "", "ü", "x" * 300, "\ud800", b"", b"\x00\x01", Opaque(),
                       Unprintable(), 2**70]
    names: list[Any] = ["a", "b", "c", Named("a"), Named("zz"), "\udcff", Unprintable()]

    def stats() -> Any:
        if rng.random() >= 0.3:
            return None
        keys = rng.choice(6, size=int(rng.integers(1, 5)), replace=False)
        return {f"k{k}": pool[int(rng.integers(len(pool)))] for k in keys}

    def name() -> Any:
        return names[int(rng.integers(len(names)))]

    lines = []
    nested = []  # a call tree, recorded as each call ends
    t = BASE

    def call(depth: int) -> None:
        nonlocal t
        begin = t
        t += int(rng.integers(0, 3))
        for _ in range(int(rng.integers(0, 4)) if depth < 4 else 0):
            call(depth + 1)
        t += int(rng.integers(0, 3))
        nested.append((name(), begin, t, stats()))

    for _ in range(60):
        call(0)
    lines.append((1, "nested", nested))
    lines.append((2, "in order", [(name(), BASE + 10 * i, BASE + 10 * i + int(rng.integers(0, 9)),
                                   stats()) for i in range(300)]))
    ties = [(name(), BASE + int(rng.integers(0, 3)), BASE + int(rng.integers(-2, 40)), stats())
            for _ in range(200)]  # runs of equal starts longer than insertion sorts take
    lines.append((3, "ties", ties + ties[:20]))
    lines.append((4, "far", [
        (name(), BASE, BASE + 2**32, stats()), (name(), BASE, BASE + 2**32 - 1, None),
        (name(), BASE + 5, BASE - 5, stats()), (name(), -(2**63), 2**63 - 1, None),
        (name(), 2**63 - 1, 2**63 - 1, None), (name(), 0, 2**62, stats()),
        (name(), BASE + 3, BASE + 3 + 10**13, None)]))
    lines.append((5, "empty", []))
    return lines


def _as_records(lines: list[Any]) -> tuple[Any, list[tuple[int, str, Any]]]:
    fp = recorder_module._fastpath
    names = fp.Names()
    out = []
    for line_id, line_name, evs in lines:
        records = fp.Records(names)
        for ev_name, start, end, stats in evs:
            records.add(ev_name, start, end, stats)
        out.append((line_id, line_name, records))
    return names, out


@compiled_only
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("window", [(0, None), (BASE + 2, BASE + 200), (BASE + 5, None)])
def test_records_to_bytes_write_what_the_columns_path_writes(
        seed: int, window: tuple[int, int | None]) -> None:
    from stepscope.capture.recorder_to_xplane import plane_parts
    from stepscope.capture.safe_text import TextRepairs

    lines = _hostile_lines(seed)
    names, records = _as_records(lines)
    keep_from, keep_until = window
    written = {}
    for compiled in (True, False):
        repairs = TextRepairs()
        written[compiled] = (b"".join(plane_parts(
            5, "/host:CPU", records, names.objects, BASE + 1, keep_from, str, keep_until,
            repairs, compiled=compiled)), repairs.count)
    assert written[True] == written[False]
    assert written[True][1] > 0  # the lone surrogates and unprintable objects were replaced
    if window == (0, None):  # and what the protobuf builder makes of the same events
        plane = XPlane.FromString(written[True][0])
        assert sum(len(line.events) for line in plane.lines) == sum(len(e) for _, _, e in lines)
        got = [[(plane.event_metadata[e.metadata_id].name, e.offset_ps, e.duration_ps)
                for e in line.events] for line in plane.lines]
        want = [[(TextRepairs().text(ev[0]) if not isinstance(ev[0], Unprintable)
                  else "<unprintable name>", (ev[1] - BASE - 1) * 1000, (ev[2] - ev[1]) * 1000)
                 for ev in sorted(evs, key=lambda e: (e[1], -e[2]))] for _, _, evs in lines]

        def wrap(v: int) -> int:
            return (v + 2**63) % 2**64 - 2**63  # int64, as the file holds it
        assert got == [[(n, wrap(o), wrap(d)) for n, o, d in line] for line in want]


@compiled_only
def test_records_to_bytes_free_each_line_when_asked() -> None:
    from stepscope.capture.recorder_to_xplane import plane_parts

    names, records = _as_records(_hostile_lines(9))
    kept = b"".join(plane_parts(5, "p", records, names.objects, BASE, 0, str))
    assert all(len(r) for _, _, r in records[:4])
    freed = b"".join(plane_parts(5, "p", records, names.objects, BASE, 0, str, release=True))
    assert freed == kept
    assert [len(r) for _, _, r in records] == [0] * 5


@compiled_only
def test_records_to_bytes_refuse_what_does_not_fit() -> None:
    """Hostile arguments to the compiled steps give one clear error, never a crash."""
    fp = recorder_module._fastpath
    names, [(_, _, records)] = _as_records([(1, "l", [("a", 1, 2, {"k": "v"}),
                                                      ("b", 3, 4, None)])])
    assert fp.line_order(records, None, None) is None  # in order already: no order made
    order = fp.line_order(records, 2, None)
    assert np.frombuffer(order, np.uint32).tolist() == [1]
    order = np.array([0, 1], np.uint32).tobytes()
    md = np.array([1, 2, 3, 4], np.int64)
    blob_of = np.array([-1, -1, 0, -1], np.int64)  # names: a, k, v, b
    args = (md, md, blob_of, np.array([enc.STR_VALUE], np.int8), np.array([0, 1], np.int64), b"v")
    assert len(fp.encode_line(records, order, 0, *args)) > 0
    for bad_order in (np.array([2], np.uint32).tobytes(), b"\x00\x00\x00"):
        with pytest.raises(ValueError):
            fp.encode_line(records, bad_order, 0, *args)
    with pytest.raises(ValueError):  # a name with no metadata id
        fp.encode_line(records, order, 0, md[:1], *args[1:])
    with pytest.raises(ValueError):  # a string value with no blob
        fp.encode_line(records, order, 0, md, md, np.full(4, -1, np.int64), *args[3:])
    with pytest.raises(ValueError):  # blobs that lie
        fp.encode_line(records, order, 0, md, md, blob_of, args[3], np.array([0, 9], np.int64),
                       b"v")
    with pytest.raises(TypeError):
        fp.encode_line(records, order, 0, md.astype(np.int32), *args[1:])
    with pytest.raises(ValueError):
        fp.first_uses([(records, np.array([5], np.uint32).tobytes())])
    with pytest.raises(TypeError):
        fp.first_uses([(records,)])
    with pytest.raises(TypeError):
        fp.line_order(object(), 0, 1)
