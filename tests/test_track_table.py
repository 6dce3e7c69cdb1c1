"""The per-track table answers the trace viewer as the full index does (same events, rows,
blocks, counters, flows, searches, selections, event details) on real profiles and on
overlapping events; its compiled row layout equals the Python twin's; hostile windows, empty
tracks and a damaged index cache are answered, never a traceback."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.trace import trace_index as ti
from stepscope.analysis.trace.trace_index import MAX_WIDTH, TraceQueryError, build, plan_tracks
from stepscope.analysis.trace.track_table import TrackTable, flows_of
from stepscope.model import stat_kinds as sk
from stepscope.model.events import EventTable
from test_trace_index import _profiles, synthetic_table
from waiting import final_api, until

from twins import TWINS, built, compiled_only
from workloads import make_stepscope_run


@pytest.fixture(scope="module")
def stepscope_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_stepscope_run(tmp_path_factory.mktemp("track_table"))


@pytest.fixture(params=TWINS)
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both twins of the row layout (the compiled one where built)."""
    if not request.param:
        monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    elif not built("_trace_layout"):
        pytest.skip("_trace_layout is not built")
    return bool(request.param)


def _windows(span: int, seed: int) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    out = [(0, span, 2000), (-span // 2, span * 3 // 2, 1400), (span // 3, span // 3 + 1, 5),
           (-(1 << 62), 1 << 62, MAX_WIDTH), (span + 10, span + 1000, 50), (-1000, -1, 10),
           (0, span, 1)]
    for _ in range(40):
        length = max(int(span * 10 ** rng.uniform(-6, 0)), 1)
        a = int(rng.integers(-length, max(span, 1)))
        out.append((a, a + length, int(rng.integers(1, 3000))))
    return out


def _same_answers(table: EventTable) -> None:
    index = build(table)
    events = TrackTable(table, plan_tracks(table))
    assert events.meta() == index.meta()
    # The full index built from the table's layout (as the server builds it) is the same,
    # array for array.
    handing = TrackTable(table, plan_tracks(table))
    depth, by_start = handing.layout()
    handed = build(table, plan=handing.plan, by_start=by_start, depth=depth,
                   flows=handing.flows())
    assert handed.header == index.header
    assert set(handed.arrays) == set(index.arrays)
    for key, array in index.arrays.items():
        assert handed.arrays[key].dtype == array.dtype, key
        assert np.array_equal(handed.arrays[key], array), key
    all_tracks = [t.id for t in index.tracks]
    for a, b, w in _windows(max(index.span_ns, 1), len(table)):
        assert events.query(a, b, w) == index.query(a, b, w), (a, b, w)
        assert events.query(a, b, w, all_tracks[::2]) == index.query(a, b, w, all_tracks[::2])
        assert events.selection(a, b, all_tracks) == index.selection(a, b, all_tracks)
    for text in ("a", "op", "E", "no such name at all"):
        assert events.search(text) == index.search(text)
    for row in index.ev_row[:: max(len(index) // 40, 1)].tolist():
        assert events.event(row) == index.event(row)
    # Every event found where the index has it (events starting together included); the
    # table's other rows (counter samples, flow markers) and rows out of range on no track.
    on = np.flatnonzero(index.pos_of_row >= 0)
    for mine, theirs in zip(events.where(on), index.where(on), strict=True):
        assert np.array_equal(mine, theirs)
    off = np.r_[np.flatnonzero(index.pos_of_row < 0), -1, len(table), 1 << 40]
    for row in off.tolist()[:50]:
        with pytest.raises(ti.EventNotFoundError):
            events.event(row)


def test_windows_equal_the_full_index(stepscope_profile: Path, twin: bool) -> None:
    for table in _profiles(stepscope_profile):
        _same_answers(table)


@compiled_only("_trace_layout")
def test_overlapping_events_laid_out_by_both_twins_alike(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    rng = np.random.default_rng(11)
    n = 20_000
    # Nested, overlapping, equal starts, zero lengths, tracks with no events between others.
    start = rng.integers(0, 2_000_000, n)
    start[:-1:7] = start[1::7]
    dur = (10 ** rng.uniform(0, 5.5, n)).astype(np.int64)
    dur[::13] = 0
    line = rng.choice([0, 2, 3, 7], n)
    table = synthetic_table(start, dur, line)
    plan = plan_tracks(table)
    _, track, rel, _, lay_end = ti.event_columns(table, plan)
    by_start = ti.by_track_and_start(track, rel, lay_end, plan.bits)
    compiled_rows, _ = ti.layout_depth(track, rel, lay_end, by_start)
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    python_rows, _ = ti.layout_depth(track, rel, lay_end, by_start)
    assert np.array_equal(compiled_rows, python_rows)
    assert int(compiled_rows.max()) > 3  # they do overlap
    monkeypatch.delenv("STEPSCOPE_PURE_PYTHON")
    _same_answers(table)


def test_empty_tracks_and_tables() -> None:
    one = synthetic_table(np.array([5]), np.array([10]), np.array([0]))
    # A line with no events on it: no tracks at all.
    empty = dataclasses.replace(one, line=one.line[:0], name=one.name[:0],
                                start_ns=one.start_ns[:0], duration_ns=one.duration_ns[:0],
                                typed={k: v[:0] for k, v in one.typed.items()})
    events = TrackTable(empty, plan_tracks(empty))
    assert events.meta() == build(empty).meta()
    answer = events.query(0, 100, 10)
    assert answer["events"]["id"] == [] and answer["aggregates"]["count"] == []
    assert events.search("a")["total"] == 0
    # One event only: a track of one row.
    assert TrackTable(one, plan_tracks(one)).query(0, 20, 4) == build(one).query(0, 20, 4)


def test_hostile_windows_are_one_clear_error() -> None:
    table = synthetic_table(np.arange(100) * 10, np.full(100, 5), np.zeros(100, np.int64))
    events = TrackTable(table, plan_tracks(table))
    for a, b, w in ((10, 10, 5), (10, 5, 5), (0, 10, 0), (0, 10, MAX_WIDTH + 1)):
        with pytest.raises(TraceQueryError):
            events.query(a, b, w)
    with pytest.raises(TraceQueryError):
        events.selection(5, 5, [0])
    with pytest.raises(TraceQueryError):
        events.search("")
    with pytest.raises(ti.EventNotFoundError):
        events.event(10**9)


def test_a_truncated_index_cache_is_built_again(stepscope_profile: Path,
                                                cache_home: Path) -> None:
    from stepscope.formats.run_reader import load
    from stepscope.run.storage import index_for

    profile = load(stepscope_profile, use_cache=False)
    name = next(iter(profile.hosts))
    table, source = profile.hosts[name], profile.sources[name]
    first = index_for(table, source)
    entries = list(cache_home.rglob("*trace_index*"))
    assert entries
    for entry in entries:
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2])
    again = index_for(table, source)
    span = first.span_ns
    assert again.query(0, span, 800) == first.query(0, span, 800) == \
        TrackTable(table, plan_tracks(table)).query(0, span, 800)


def test_the_server_answers_exactly_before_the_index_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the full index held back, the tool data, windows and event details come from the
    per-track table, exact (not coarse), and equal the index's once it is built."""
    import threading

    from stepscope.model.logdir import list_runs
    from stepscope.run import storage
    from stepscope.web import trace
    from stepscope.web.api import Api

    gate, built = threading.Event(), threading.Event()

    def slow_index(table: Any, source: Any, **kwargs: Any) -> ti.TraceIndex:
        assert gate.wait(60)
        index = storage.index_for(table, source, **kwargs)
        built.set()
        return index

    monkeypatch.setattr(trace, "index_for", slow_index)
    make_stepscope_run(tmp_path)
    api = Api(tmp_path, use_cache=False)
    run = next(iter(list_runs(tmp_path)))
    try:
        code, meta = until(lambda: (lambda a: a if a[0] == 200 and "coarse" not in a[1]
                                    else None)(api.data(run, None, "trace_viewer", {})),
                           "the per-track table")
        query = {"run": run, "start_ns": "-100", "end_ns": str(meta["span_ns"] + 100),
                 "width": "900"}
        code, early = api.trace("window", query)
        assert code == 200 and "coarse" not in early and early["events"]["id"]
        assert not built.is_set()
        first = early["events"]["id"][0]
        code, detail = api.trace("event", {"run": run, "id": str(first)})
        assert code == 200 and detail["id"] == first
    finally:
        gate.set()
    until(lambda: built.is_set() or None, "the full index")
    code, late = final_api(lambda: api.trace("window", query), "the indexed window")
    assert late == early
    assert api.data(run, None, "trace_viewer", {})[1] == meta


def _stat_table(seed: int) -> tuple[Any, np.ndarray, np.ndarray | None, list[tuple[int, int]]]:
    """A random stat table (as ``_stat_flows`` reads one: ``stats``, ``line``) with the flow
    stats in every awkward way (several _p, _c or _pt to an event, _pt after _p, types missing
    or more than 255, string stats of those names, ids repeated and as large as real ones,
    consumers that are their own first producer), which events count, which lines are off,
    and the producer → consumer pairs the rule gives, by hand."""
    rng = np.random.default_rng(seed)
    n_events = int(rng.integers(1, 400))
    names = ["_c", "other", "_pt", "_p", "_ct"]
    per_event = rng.integers(0, 6, n_events)
    event = np.repeat(np.arange(n_events, dtype=np.int32), per_event)
    n = len(event)
    name = rng.integers(0, len(names) + 1, n)  # len(names): a name code with no name (-1)
    name[name == len(names)] = -1
    kind = np.where(rng.random(n) < 0.9, rng.choice([sk.KIND_INT64, sk.KIND_UINT64], n),
                    sk.KIND_STR).astype(np.int8)
    ids = int(rng.integers(1, 40))
    value = rng.integers(0, ids, n)
    types = 400 if seed % 5 == 2 else 3  # beyond 255 types: the compiled twin's codes run out
    is_type = (name == 2) | (name == 4)
    value[is_type] = rng.integers(-1, types, int(is_type.sum()))
    if seed % 4 == 1:
        value[~is_type] <<= 40
    elif seed % 4 == 3:  # small ids and large ones side by side
        value[~is_type & (rng.random(n) < 0.5)] += 1 << 23
    stats = SimpleNamespace(event=event, name=name.astype(np.int16 if seed % 2 else np.int32),
                            kind=kind, value=value.astype(np.int64), stat_names=names)
    n_lines = 3
    line = rng.integers(0, n_lines, n_events).astype(np.int16 if seed % 3 else np.int32)
    included = rng.random(n_events) < (1.0 if seed % 3 == 0 else 0.8)
    off = None if seed % 2 == 0 else rng.random(n_lines) < 0.4

    def first(e: int, stat: str) -> int:
        rows = np.flatnonzero((event == e) & (name == names.index(stat))
                              & (kind != sk.KIND_STR))
        return int(value[rows[0]]) if len(rows) else -1

    def rows_of(stat: str) -> list[int]:
        found = (name == names.index(stat)) & (kind != sk.KIND_STR)
        kept = included[event] & (True if off is None else ~off[line[event]])
        return np.flatnonzero(found & kept).tolist()

    producer: dict[tuple[int, int], int] = {}
    for r in rows_of("_p"):
        producer.setdefault((first(int(event[r]), "_pt"), int(value[r])), int(event[r]))
    pairs = []
    for r in rows_of("_c"):
        src = producer.get((first(int(event[r]), "_ct"), int(value[r])))
        if src is not None and src != int(event[r]):
            pairs.append((src, int(event[r])))
    return SimpleNamespace(stats=stats, line=line), included, off, pairs


@pytest.mark.parametrize("seed", range(40))
def test_producer_flows_found_by_both_twins_alike(seed: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled pass over the stat table pairs each consumer with the first producer of
    its type and id (not itself), in the consumers' order, as the pure-Python twin (stats,
    types looked up, a sort and a search) and the rule by hand do."""
    if not built("_trace_layout"):
        pytest.skip("_trace_layout is not built")
    table, included, off, pairs = _stat_table(seed)
    compiled = ti._stat_flows(table, included, off, np.dtype(np.int32))
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    twin = ti._stat_flows(table, included, off, np.dtype(np.int32))
    if compiled is None or twin is None:
        assert not pairs and (compiled is None or not len(compiled[0])) \
            and (twin is None or not len(twin[0]))
        return
    for a, b in zip(compiled, twin, strict=True):
        assert a.dtype == b.dtype == np.int32
        assert np.array_equal(a, b)
    assert list(zip(*(x.tolist() for x in compiled), strict=True)) == pairs


def test_flows_found_by_both_twins_alike(stepscope_profile: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``flows_of`` gives the same flows, in the same order, with either twin, on real
    profiles (XPlane with launches and producer → consumer flows, Kineto, stepscope's own);
    hostile columns are one clear error, and stats not by event are left to the twin."""
    if not built("_trace_layout"):
        pytest.skip("_trace_layout is not built")
    from stepscope.analysis.trace import _trace_layout

    found = np.zeros(2, np.int64)
    for table in _profiles(stepscope_profile):
        plan = plan_tracks(table)
        compiled = flows_of(table, plan)
        found += np.bincount(compiled[2], minlength=2)
        monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
        twin = flows_of(table, plan)
        monkeypatch.delenv("STEPSCOPE_PURE_PYTHON")
        for a, b in zip(compiled, twin, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    assert found.all()  # both kinds were there to find
    e = np.array([0, 0, 1, 1], np.int32)
    cols = [np.array([0, 2, 1, 3], np.int16), np.full(4, sk.KIND_INT64, np.int8), e,
            np.arange(4, dtype=np.int64), np.array([0, 2, 1, 3, -1], np.int8),
            np.ones(2, bool), None, None]
    k = (sk.KIND_INT64, sk.KIND_UINT64)
    assert _trace_layout.stat_flows(*cols, 0, None, None, *k) == (1, 1)
    src, dst = np.empty(1, np.int32), np.empty(1, np.int32)
    assert _trace_layout.stat_flows(*cols, 1, src, dst, *k) == 0  # ids 0 and 2 differ
    assert _trace_layout.stat_flows(*(cols[:2] + [e[::-1].copy()] + cols[3:]), 0, None,
                                    None, *k) is None  # not by event
    with pytest.raises(ValueError, match="outside the table"):
        _trace_layout.stat_flows(*(cols[:2] + [e + 1] + cols[3:]), 0, None, None, *k)
    with pytest.raises(ValueError, match="as long"):
        _trace_layout.stat_flows(*(cols[:2] + [e[:3].copy()] + cols[3:]), 0, None, None, *k)
    with pytest.raises(TypeError, match="2- or 4-byte"):
        _trace_layout.stat_flows(*([cols[0].astype(np.int64)] + cols[1:]), 0, None, None, *k)
    with pytest.raises(ValueError, match="than counted"):
        _trace_layout.stat_flows(*cols, 0, src, dst, *k)  # producers not counted
    with pytest.raises(ValueError, match="alike"):
        _trace_layout.stat_flows(*cols, 1, src, np.empty(1, np.int64), *k)


def test_a_whole_trace_window_counts_every_flow(stepscope_profile: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A window over the whole trace counts its flows without sorting them by time: the
    count the time-sorted search gives (a window a nanosecond inside), and every flow."""
    counted = 0
    for table in _profiles(stepscope_profile):
        index = build(table)
        if len(index.flow_src) < 2:
            continue
        monkeypatch.setattr(ti, "MAX_FLOWS", 1)
        span = index.span_ns
        for a, b in ((0, span + 1), (-5, span * 2), (-(1 << 62), 1 << 62)):
            assert index.query(a, b, 100)["flows_in_window"] == len(index.flow_src)
            assert index._flow_times is None  # not sorted for it
        # The sorted search over the same window less its first nanosecond's flows' ends.
        inside = index.query(1, span + 1, 100)["flows_in_window"]
        times = index.table.start_ns[np.r_[index.flow_src, index.flow_dst]] - index.origin_ns
        hi = np.maximum(times[:len(index.flow_src)], times[len(index.flow_src):])
        assert inside == int((hi >= 1).sum())
        counted += 1
    assert counted


def test_the_index_is_pending_while_it_builds(stepscope_profile: Path) -> None:
    """What a one-host run's model waits for: the host's index building (its per-track table
    there and answering or not), not once it is built or when none was started."""
    from concurrent.futures import Future

    from stepscope.model.run_tables import RunTables
    from stepscope.web import trace
    from stepscope.web.loaded_run import LoadedRun

    table = _profiles(stepscope_profile)[2]
    run = LoadedRun(RunTables("r", stepscope_profile, {"h": table}, {}), use_cache=False)
    name = "h"
    assert not trace.index_pending(run, None)  # nothing started
    future: Future[Any] = Future()
    run._background[("trace_index", name)] = future
    assert trace.index_pending(run, None)  # building, no table yet
    events = TrackTable(table, plan_tracks(table))
    run.partials[("trace_table", name)] = (events, 100.0)
    events.query(0, 1000, 10)
    assert trace.index_pending(run, None)  # answered, the index still building
    future.set_result(None)
    run.partials.clear()
    assert not trace.index_pending(run, None)  # built
