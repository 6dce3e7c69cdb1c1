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
from stepscope.analysis.trace.track_order import TrackOrder
from stepscope.analysis.trace.track_table import TrackTable, block_sums, flows_of
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


def _same_answers(table: EventTable) -> bool:
    """The per-track table answers as the full index, with its order as ``TrackOrder.of``
    gives it and sorted into columns; whether the former was the table's own order."""
    index = build(table)
    plan = plan_tracks(table)
    own = TrackTable(table, plan)
    for events in (own, TrackTable(table, plan, TrackOrder.sorted(table, plan))):
        _same_as_index(table, events, index)
    return own.order.in_table


def _same_as_index(table: EventTable, events: TrackTable, index: ti.TraceIndex) -> None:
    assert events.meta() == index.meta()
    # The full index built from the table's layout (as the server builds it) is the same,
    # array for array.
    depth, by_start = events.layout()
    handed = build(table, plan=events.plan, by_start=by_start, depth=depth,
                   flows=events.flows())
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
    own_order = [_same_answers(table) for table in _profiles(stepscope_profile)]
    # Both forms of the order are checked: the recorded profiles hold their events in
    # (track, start) order, the synthetic ones do not.
    assert any(own_order) and not all(own_order)


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


@compiled_only("_trace_layout")
def test_table_rows_pass_equals_its_twin_and_refuses_bad_columns(monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The per-track table's compiled pass (rows and latest ends per block, read through the
    keys and the table rows) gives what the twin made of start and end columns gives; the
    overview's order (ties ordered by duration) is the layout's (ties by end); bad columns
    are one clear error."""
    from stepscope.analysis.trace import track_table as tt
    from stepscope.analysis.trace.trace_overview import TraceOverview

    rng = np.random.default_rng(5)
    n = 30_000
    start = rng.integers(0, 3_000_000, n)
    start[:-1:5] = start[1::5]  # events starting together, of lengths 0, 1 and more
    dur = (10 ** rng.uniform(0, 5, n)).astype(np.int64)
    dur[::11] = 0
    dur[1::11] = 1
    dur[2::17] = -4
    table = synthetic_table(start, dur, rng.choice([0, 1, 4], n))
    plan = plan_tracks(table)
    events = TrackTable(table, plan)
    assert events.order.keys is not None  # random starts: the order is sorted, kept
    depth, block_end = events._rows_of()
    assert depth.dtype == events.depth.dtype == np.int32
    assert np.array_equal(depth, events.depth)
    assert np.array_equal(block_end, events.block_end)
    assert int(depth.max()) > 3
    overview = TraceOverview(table, plan)
    assert np.array_equal(overview.order.order(), events.order.order())
    assert np.array_equal(overview.order.keys, events.order.keys)
    native = ti.compiled_layout()
    assert native is not None
    key, rows = events.order.keys, np.asarray(events._table_rows, np.int64)
    good = (key, plan.bits, np.asarray(table.duration_ns, np.int64), rows, events.offsets,
            np.empty(len(key), np.int32), np.empty(-(-len(key) // tt.BLOCK), np.int64),
            tt.BLOCK)
    bad_rows = rows.copy()
    bad_rows[7] = len(table)
    for args in (good[:5] + (np.empty(len(key), np.int64),) + good[6:],
                 good[:6] + (np.empty(3, np.int64),) + good[7:],
                 good[:3] + (bad_rows,) + good[4:],
                 good[:4] + (events.offsets[::-1].copy(),) + good[5:],
                 good[:1] + (0,) + good[2:]):
        with pytest.raises((ValueError, TypeError)):
            native.table_rows(*args)
    # The table's own starts read through the rows: the same rows and ends.
    starts = np.asarray(table.start_ns, np.int64)
    by_rows = (starts,) + good[1:5] + (np.empty(len(key), np.int32),
                                       np.empty(-(-len(key) // tt.BLOCK), np.int64), tt.BLOCK)
    native.table_rows(*by_rows, plan.origin)
    assert np.array_equal(by_rows[5], events.depth)
    assert np.array_equal(by_rows[6], events.block_end)
    with pytest.raises(ValueError):
        native.table_rows(starts[:-1], *by_rows[1:], plan.origin)
    # Tracks that nest for a while (parents, children, grandchildren, some starting
    # together, some of length 0) and then overlap: the pass's stack hands over to its trees
    # mid-track with the rows running then.
    unit = np.arange(2_000, dtype=np.int64) * 1_000
    nest_start = np.concatenate([unit, unit, unit + 100, unit + 150, unit + 400])
    nest_dur = np.concatenate([np.full(2_000, 900), np.full(2_000, 300), np.full(2_000, 200),
                               np.zeros(2_000, np.int64), np.full(2_000, 100)])
    late = rng.integers(2_000_000, 2_500_000, 5_000)
    mixed = synthetic_table(np.concatenate([nest_start, late, nest_start + 3_000_000]),
                            np.concatenate([nest_dur, rng.integers(0, 40_000, 5_000),
                                            nest_dur]),
                            np.r_[np.zeros(10_000, np.int64), rng.choice([0, 1], 5_000),
                                  np.ones(10_000, np.int64)])
    mixed_events = TrackTable(mixed, plan_tracks(mixed))
    depth2, block_end2 = mixed_events._rows_of()
    assert np.array_equal(depth2, mixed_events.depth)
    assert np.array_equal(block_end2, mixed_events.block_end)
    assert int(depth2.max()) > 3
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    assert np.array_equal(TrackTable(table, plan).depth, depth)
    assert np.array_equal(TrackTable(mixed, plan_tracks(mixed)).depth, depth2)


@compiled_only("_trace_layout")
def test_track_plans_equal_their_twins(stepscope_profile: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's compiled pass (events per line and the latest end, where every event is
    drawn and none is a counter sample) plans as the chunked NumPy passes do; a line code
    outside the lines is one clear error."""
    tables = _profiles(stepscope_profile)
    compiled = [plan_tracks(table) for table in tables]
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    for table, mine in zip(tables, compiled, strict=True):
        twin = plan_tracks(table)
        for field in dataclasses.fields(twin):
            a, b = getattr(mine, field.name), getattr(twin, field.name)
            assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), field.name
    monkeypatch.delenv("STEPSCOPE_PURE_PYTHON")
    native = ti.compiled_layout()
    assert native is not None
    line, start, dur = np.array([0, 3, 1], np.int16), np.arange(3, dtype=np.int64), \
        np.array([5, -2, 0], np.int64)
    count = np.zeros(2, np.int64)
    with pytest.raises(ValueError):
        native.line_counts(line, start, dur, count)
    count = np.zeros(4, np.int64)
    assert native.line_counts(line, start, dur, count) == 5
    assert count.tolist() == [1, 1, 0, 1]
    with pytest.raises((ValueError, TypeError)):
        native.line_counts(line.astype(np.int8), start, dur, count)
    with pytest.raises((ValueError, TypeError)):
        native.line_counts(line, start[:2], dur, count)


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
        for a, b in ((0, span), (0, span + 1), (-5, span * 2), (-(1 << 62), 1 << 62)):
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


def _many_per_column() -> EventTable:
    """Nested and overlapping events, thousands per pixel column of a narrow window."""
    rng = np.random.default_rng(5)
    n = 120_000
    start = np.sort(rng.integers(0, 50_000_000, n))
    dur = (10 ** rng.uniform(0, 4.5, n)).astype(np.int64)
    dur[::97] = 40_000_000  # a few at least a pixel wide at every width
    dur[::31] = 0
    return synthetic_table(start, dur, rng.choice([0, 1, 4], n))


@compiled_only("_trace_layout")
def test_the_compiled_window_pass_equals_its_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled window pass (column edges found in the keys, rows summed in runs) answers
    as its NumPy twin: windows of thousands of events per column, of fewer than one, track
    subsets, every width from one pixel to MAX_WIDTH."""
    table = _many_per_column()
    events = TrackTable(table, plan_tracks(table))
    span = events.span_ns
    windows = [(0, span, w) for w in (1, 2, 3, 50, 2000, MAX_WIDTH)]
    windows += [(span // 3, span // 3 + span // 10 ** k, w) for k in range(1, 7)
                for w in (7, 1999)]
    windows += [(-span, 2 * span, 640), (span // 2, span + 5, 3)]
    compiled = [events.query(a, b, w, t) for a, b, w in windows for t in (None, [0], [2, 1])]
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    twin = [events.query(a, b, w, t) for a, b, w in windows for t in (None, [0], [2, 1])]
    assert compiled == twin
    assert sum(len(q["events"]["id"]) for q in compiled) > 100
    assert max(max(q["aggregates"]["count"], default=0) for q in compiled) > 1000
    monkeypatch.delenv("STEPSCOPE_PURE_PYTHON")
    index = build(table)
    for a, b, w in windows[:8]:
        assert events.query(a, b, w) == index.query(a, b, w)



def _deep_and_shallow() -> EventTable:
    """Thread 0: 40-deep nests (blocks of more rows than block sums keep) then flat events;
    thread 1: many short events per pixel column, a few long ones among them."""
    deep_start = np.repeat(np.arange(300) * 1_000_000, 40) + np.tile(np.arange(40) * 10, 300)
    deep_dur = np.tile(900_000 - np.arange(40) * 20, 300)
    flat_start = 300_000_000 + np.arange(20_000) * 1_000
    rng = np.random.default_rng(11)
    busy_start = np.sort(rng.integers(0, 320_000_000, 60_000))
    busy_dur = rng.integers(1, 5_000, 60_000)
    busy_dur[::500] = 30_000_000
    start = np.r_[deep_start, flat_start, busy_start]
    dur = np.r_[deep_dur, np.full(20_000, 900), busy_dur]
    line = np.r_[np.zeros(len(deep_start) + 20_000, np.int64), np.ones(60_000, np.int64)]
    return synthetic_table(start, dur, line)


@compiled_only("_trace_layout")
def test_block_sums_hold_each_blocks_rows_and_answer_as_the_events_do() -> None:
    """The per-block sums are each block's per-row counts and durations, as NumPy finds them
    (none kept for a block of more than 16 rows or with a negative duration); windows
    answered with them equal those answered event by event, at every zoom; bad sums or
    columns: one clear error."""
    native = ti.compiled_layout()
    assert native is not None
    for table in (_deep_and_shallow(), _many_per_column()):
        events = TrackTable(table, plan_tracks(table))
        assert events._block_sums is not None
        block, off, longest, rc, cov = events._block_sums
        rows = events._rows(np.arange(len(events.depth)))
        dur = np.asarray(table.duration_ns, np.int64)[rows]
        for k in range(len(longest)):
            sl = slice(k * block, (k + 1) * block)
            depth, d = events.depth[sl], dur[sl]
            kept = np.unique(depth)
            if len(kept) > 16:
                assert longest[k] == -1 and off[k] == off[k + 1]
                continue
            entries = slice(off[k], off[k + 1])
            got = {int(v >> 32): (int(v & 0xFFFFFFFF), int(c))
                   for v, c in zip(rc[entries], cov[entries], strict=True)}
            assert got == {int(r): (int((depth == r).sum()), int(d[depth == r].sum()))
                           for r in kept}
            assert longest[k] == d.max()
        span = events.span_ns
        windows = [(0, span, w) for w in (1, 7, 640, 2000)]
        windows += [(span // 5, span // 5 + span // 2 ** k, w) for k in range(1, 12)
                    for w in (3, 1999)]
        with_sums = [events.query(a, b, w) for a, b, w in windows]
        events._block_sums = None
        assert with_sums == [events.query(a, b, w) for a, b, w in windows]
    assert (longest >= 0).any()
    deep = TrackTable(_deep_and_shallow(), plan_tracks(_deep_and_shallow()))
    assert deep._block_sums is not None and (deep._block_sums[2] == -1).any()
    # A negative duration or a table row outside the durations: that block kept without sums.
    depth = np.zeros(256, np.int32)
    durations = np.arange(256, dtype=np.int64)
    durations[70] = -5
    _, off, longest, rc, cov = block_sums(native, depth, None, durations, None, 64)
    assert longest.tolist() == [63, -1, 191, 255] and off.tolist() == [0, 1, 1, 2, 3]
    assert (rc >> 32).tolist() == [0, 0, 0] and cov.tolist() == [
        sum(range(64)), sum(range(128, 192)), sum(range(192, 256))]
    rows = np.arange(256, dtype=np.int64)
    rows[200] = 256
    assert block_sums(native, depth, rows, durations, None, 64)[2][3] == -1
    out = [np.empty(5, np.int64), np.empty(4, np.int64), np.empty(64, np.int64),
           np.empty(64, np.int64)]
    for bad in ((depth, None, durations[:10], 64, *out), (depth, rows[:5], durations, 64, *out),
                (depth, None, durations, 0, *out), (depth, None, durations, 64, *out, (1, 2)),
                (depth, None, durations, 64, out[0][:4], *out[1:]),
                (depth, None, durations, 64, *out[:2], out[2][:63], out[3])):
        with pytest.raises((ValueError, TypeError)):
            native.block_sums(*bad)
    with pytest.raises(TypeError):
        native.block_sums(depth.astype(np.int16), None, durations, 64, *out)
    with pytest.raises((ValueError, TypeError, BufferError)):  # a read-only output
        native.block_sums(depth, None, durations, 64, np.frombuffer(bytes(40), np.int64),
                          *out[1:])

@compiled_only("_trace_layout")
def test_the_compiled_window_pass_reads_narrow_columns_and_refuses_bad_ones() -> None:
    """Table rows and rows of 4 or 8 bytes give the same cells; positions, rows or table rows
    out of range, columns of other lengths or item sizes: one clear error, no crash."""
    native = ti.compiled_layout()
    assert native is not None
    table = _many_per_column()
    plan = plan_tracks(table)
    events = TrackTable(table, plan, TrackOrder.sorted(table, plan))
    keys, ev_row = events.order.keys, events._table_rows
    assert keys is not None and ev_row is not None
    ids = events._event_tracks(None)
    a = events.offsets[ids].astype(np.int64)
    b = events.offsets[ids + 1].astype(np.int64)
    rows = np.array([events.tracks[t].rows for t in ids.tolist()], np.int64)
    inner = ti.window_bounds(0, events.span_ns, 9)[1:-1].copy()
    no_before, before_off = np.zeros(0, np.int64), np.zeros(len(ids) + 1, np.int64)
    dur = np.asarray(table.duration_ns, np.int64)

    def cells(**change: Any) -> tuple[bytes, bytes]:
        args = dict(key=keys, depth=events.depth, ev_row=ev_row, dur=dur, ids=ids,
                    a=a, b=b, rows=rows, before=no_before, before_off=before_off, inner=inner,
                    bits=events.bits, w=9, span=events.span_ns, origin=None)
        args.update(change)
        return native.window_cells(*args.values())

    wide, agg = cells()
    assert len(wide) and len(agg)
    assert cells(ev_row=ev_row.astype(np.int32),
                 depth=events.depth.astype(np.int64)) == (wide, agg)
    assert cells(span=-1)[0] == b""  # nothing a pixel wide
    for bad in (dict(rows=rows - 1), dict(b=b + 1), dict(before=np.array([-1], np.int64),
                                                         before_off=np.r_[0, 1, 1, 1]),
                dict(ev_row=np.full(len(keys), len(table), np.int64)),
                dict(inner=inner[:-1]), dict(a=a[:1]), dict(bits=63)):
        with pytest.raises(ValueError):
            cells(**bad)
    with pytest.raises(TypeError):
        cells(depth=events.depth.astype(np.int16))
    # Block sums: the same cells with them; sums of other lengths or not rising, one error.
    sums = block_sums(native, events.depth, ev_row, dur, None, 64)
    assert cells(pieces=None, sums=sums) == (wide, agg)
    block, off, longest, rc, cov = sums
    falling = off.copy()
    falling[1], falling[2] = falling[2], falling[1] - 1
    for bad_sums in ((block, off[:-1], longest, rc, cov), (block, off, longest, rc[:-1], cov),
                     (32, off, longest, rc, cov), (block, falling, longest, rc, cov),
                     (0, off, longest, rc, cov)):
        with pytest.raises(ValueError):
            cells(pieces=None, sums=bad_sums)
    for bad_type in ((block, off), (block, off, longest, rc, cov.astype(np.int32)), "sums"):
        with pytest.raises(TypeError):
            cells(pieces=None, sums=bad_type)
    with pytest.raises(TypeError):
        cells(key=keys.astype(np.int32))
    # The table's own starts read through the rows: the same cells; a row outside the
    # starts, or starts not the table's length, one clear error.
    starts = np.asarray(table.start_ns, np.int64)
    assert cells(key=starts, origin=events.origin_ns) == (wide, agg)
    far = ev_row.copy()
    far[int(a[0]) + 3] = len(table)
    with pytest.raises(ValueError):
        cells(key=starts, origin=events.origin_ns, ev_row=far)
    with pytest.raises(ValueError):
        cells(key=starts[:-1], origin=events.origin_ns)
    with pytest.raises(ValueError):  # positions past the table where they are its rows
        cells(key=starts[:-5], origin=events.origin_ns, ev_row=None, dur=dur[:-5])


def test_window_flows_are_those_with_an_end_in_the_window(stepscope_profile: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A window's flows (found from the blocks of flows whose latest end reaches into it) are
    every flow with an end in it (or spanning it), as a pass over all of them finds; where
    too many to draw, their count (found from the ends' sorted times) is theirs."""
    monkeypatch.setattr(ti, "FLOW_BLOCK", 3)
    checked = 0
    for table in _profiles(stepscope_profile):
        events = TrackTable(table, plan_tracks(table))
        if len(events.flow_src) < 10:
            continue
        times = table.start_ns[np.r_[events.flow_src, events.flow_dst]] - events.origin_ns
        src_t, dst_t = times[:len(events.flow_src)], times[len(events.flow_src):]
        lo, hi = np.minimum(src_t, dst_t), np.maximum(src_t, dst_t)
        for most in (10**9, 3):
            monkeypatch.setattr(ti, "MAX_FLOWS", most)
            for a, b, _ in _windows(events.span_ns, 3):
                answer = events.query(a, b, 10)
                inside = np.flatnonzero((lo < b) & (hi >= a))
                assert answer["flows_in_window"] == len(inside)
                if len(inside) > most:
                    assert answer["flows"] == []
                    continue
                assert [f["from"]["id"] for f in answer["flows"]] == \
                    events.flow_src[inside].tolist()
                assert [f["to"]["id"] for f in answer["flows"]] == \
                    events.flow_dst[inside].tolist()
        # The full index takes the table's flows by time over (made once) and answers alike.
        index = build(table)
        index.share_flow_times(events)
        assert index._flow_times is events.flow_times()
        for a, b, _ in _windows(events.span_ns, 4)[:12]:
            assert index.query(a, b, 10) == events.query(a, b, 10)
        checked += 1
    assert checked
    # No flows: none by time either, and none taken over.
    one = synthetic_table(np.array([5]), np.array([10]), np.array([0]))
    alone = TrackTable(one, plan_tracks(one))
    assert all(len(column) == 0 for column in alone.flow_times())
    other = build(one)
    other.share_flow_times(TrackTable(one, plan_tracks(one)))
    assert other._flow_times is None


def test_a_window_does_not_wait_for_flows_being_sorted(stepscope_profile: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """While another thread sorts the flows by time (a server after its first window), a
    window that needs them is answered at once without them, marked ``flows_pending``; the
    whole trace's window counts them without; once sorted, every window equals a table's
    that never waited."""
    from stepscope.web.trace import _make_flow_times

    checked = 0
    for table in _profiles(stepscope_profile):
        plan = plan_tracks(table)
        waiting, plain = TrackTable(table, plan), TrackTable(table, plan)
        if len(waiting.flow_src) < 10:
            continue
        waiting.flow_times_coming = True
        # Few flows: sorted there and then (a few ms), as with nothing coming.
        monkeypatch.setattr(ti, "FLOW_TIMES_AT_ONCE", len(waiting.flow_src))
        a, b, _ = _windows(waiting.span_ns, 5)[0]
        assert waiting.query(a, b, 10) == plain.query(a, b, 10)
        waiting._flow_times = None
        monkeypatch.setattr(ti, "FLOW_TIMES_AT_ONCE", 0)
        monkeypatch.setattr(ti, "MAX_FLOWS", 3)
        whole = waiting.query(0, waiting.span_ns, 10)
        assert "flows_pending" not in whole
        assert whole["flows_in_window"] == len(waiting.flow_src)
        windows = [(a, b) for a, b, _ in _windows(waiting.span_ns, 6)
                   if a > 0 or b < waiting.span_ns]
        monkeypatch.setattr(ti, "MAX_FLOWS", 10**9)
        for a, b in windows:
            early = waiting.query(a, b, 10)
            assert early["flows_pending"] is True
            assert early["flows"] == [] and early["flows_in_window"] == 0
            exact = plain.query(a, b, 10)
            assert {k: v for k, v in early.items() if "flow" not in k} == \
                {k: v for k, v in exact.items() if "flow" not in k}
        assert waiting._flow_times is None  # the windows did not sort them
        _make_flow_times(waiting)
        assert not waiting.flow_times_coming and waiting._flow_times is not None
        for a, b in windows:
            assert waiting.query(a, b, 10) == plain.query(a, b, 10)
        checked += 1
    assert checked


def _same_as_sorted(table: EventTable, pieces: int, in_table: bool) -> None:
    """``TrackOrder.of`` takes ``table``'s runs of rows as ``pieces`` pieces (in table order
    or not) and answers as the sorted order: offsets, order, starts, durations, searches,
    positions, and the per-track table's rows, windows and places."""
    rng = np.random.default_rng(len(table))
    plan = plan_tracks(table)
    own, kept = TrackOrder.of(table, plan), TrackOrder.sorted(table, plan)
    assert own.keys is None and own.pieces is not None and kept.keys is not None
    assert len(own.pieces.row) == pieces and own.in_table == in_table
    assert np.array_equal(own.order(), kept.order())
    assert np.array_equal(own.offsets, kept.offsets)
    n = len(table)
    pos = rng.integers(0, n, 500)
    assert np.array_equal(own.starts(pos), kept.starts(pos))
    assert np.array_equal(own.durations_at(pos), kept.durations_at(pos))
    assert np.array_equal(own.durations_between(7, n - 3), kept.durations_between(7, n - 3))
    rows = np.asarray(kept.order(), np.int64)[pos]
    assert np.array_equal(own.positions(rows), pos)
    ids = np.arange(len(plan.track_line), dtype=np.int64)[::-1].copy()
    times = np.sort(rng.integers(0, plan.span + 1, (len(ids), 40)), axis=1)
    times[:, 0] = 0
    assert np.array_equal(own.search(ids, times), kept.search(ids, times))
    assert np.array_equal(own.search(ids, times[:, 5]), kept.search(ids, times[:, 5]))
    mine, theirs = TrackTable(table, plan, own), TrackTable(table, plan, kept)
    assert np.array_equal(mine.depth, theirs.depth)
    assert np.array_equal(mine.block_end, theirs.block_end)
    for a, b, w in _windows(plan.span, 3)[:25]:
        assert mine.query(a, b, w) == theirs.query(a, b, w), (a, b, w)
    some = rng.integers(0, n, 200)
    for x, y in zip(mine.where(some), theirs.where(some), strict=True):
        assert np.array_equal(x, y)


@compiled_only("_trace_layout")
def test_the_tables_runs_are_the_order_where_they_make_it(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A table whose lines' runs of rows are each in start order (those starting together
    longer first), a track's runs one after another in time, is its own order in pieces (no
    keys kept; no rows either where the pieces are in table order): the sorted order's
    answers, through the compiled passes too. Out of order anywhere (a later start first,
    across a block's edge too; a shorter event first of two starting together; a track's
    runs overlapping in time), or with rows not drawn, it is sorted."""
    from stepscope.analysis.trace import track_order

    monkeypatch.setattr(track_order, "CHECK_EVENTS", 1000)
    rng = np.random.default_rng(3)
    n = 12_000
    line = rng.choice([0, 1, 3], n)
    start = rng.integers(0, 2_000_000, n)
    start[::7] = start[1::7]  # events starting together
    dur = (10 ** rng.uniform(0, 4, n)).astype(np.int64)
    dur[::13] = 0
    by = np.lexsort((-np.maximum(dur, 1), start, line))
    table = synthetic_table(start[by], dur[by], line[by])
    _same_as_sorted(table, 3, in_table=True)
    # The lines' runs in another order than the tracks'.
    runs = np.lexsort((np.arange(n), -table.line))
    by_line_down = dataclasses.replace(table, line=table.line[runs].copy(),
                                       start_ns=table.start_ns[runs].copy(),
                                       duration_ns=table.duration_ns[runs].copy())
    _same_as_sorted(by_line_down, 3, in_table=False)
    # A line in two runs far apart in the table, one after the other in time.
    zero = np.flatnonzero(table.line == 0)
    half = zero[len(zero) // 2]
    late_first = np.r_[zero[zero >= half], np.flatnonzero(table.line != 0), zero[zero < half]]
    assert table.start_ns[half] > table.start_ns[half - 1]
    split = dataclasses.replace(table, line=table.line[late_first].copy(),
                                start_ns=table.start_ns[late_first].copy(),
                                duration_ns=table.duration_ns[late_first].copy())
    _same_as_sorted(split, 4, in_table=False)

    def sorted_instead(changed: EventTable) -> bool:
        return TrackOrder.of(changed, plan_tracks(changed)).keys is not None

    later = table.start_ns.copy()
    edge = 1000 + int(np.flatnonzero(table.line[1000:] == table.line[999])[0])
    assert table.line[edge] == table.line[edge - 1]
    later[edge - 1] = later[edge] + 1  # a later start just before a block's edge
    assert sorted_instead(dataclasses.replace(table, start_ns=later))
    tie = np.flatnonzero((table.start_ns[1:] == table.start_ns[:-1])
                         & (table.line[1:] == table.line[:-1])
                         & (np.maximum(table.duration_ns[1:], 1)
                            < np.maximum(table.duration_ns[:-1], 1)))[0]
    shorter_first = table.duration_ns.copy()
    shorter_first[[tie, tie + 1]] = shorter_first[[tie + 1, tie]]
    assert sorted_instead(dataclasses.replace(table, duration_ns=shorter_first))
    overlapping = split.start_ns.copy()
    overlapping[-1] = overlapping[0]  # the late run's start: the line's runs overlap
    assert sorted_instead(dataclasses.replace(split, start_ns=overlapping))
    not_drawn = plan_tracks(table)
    not_drawn.included[5] = False
    assert track_order.line_pieces(table, not_drawn) is None


@compiled_only("_trace_layout")
def test_the_compiled_passes_read_rows_through_pieces_and_refuse_bad_ones() -> None:
    """The compiled passes given the order's pieces read the table rows a column of them
    gives (rows, latest ends, window cells, sums), and refuse pieces that do not rise, reach
    outside the table, do not cover the positions, or come beside a column of rows."""
    from stepscope.analysis.trace.trace_overview import SUM_BLOCK, TraceOverview

    native = ti.compiled_layout()
    assert native is not None
    rng = np.random.default_rng(8)
    n = 9_000
    line = rng.choice([0, 1, 2, 5], n)
    start = rng.integers(0, 900_000, n)
    dur = (10 ** rng.uniform(0, 4, n)).astype(np.int64)
    by = np.lexsort((-np.maximum(dur, 1), start, -line))  # runs in the lines' reverse order
    table = synthetic_table(start[by], dur[by], line[by])
    plan = plan_tracks(table)
    order = TrackOrder.of(table, plan)
    pieces = order.compiled_pieces()
    assert pieces is not None and order.keys is None
    rows = np.asarray(order.order(), np.int64)
    starts, durations = np.asarray(table.start_ns, np.int64), np.asarray(table.duration_ns)

    def table_rows(rows_: Any, pieces_: Any) -> tuple[np.ndarray, np.ndarray]:
        depth = np.empty(n, np.int32)
        block_end = np.empty(-(-n // 256), np.int64)
        native.table_rows(starts, plan.bits, durations, rows_, order.offsets, depth, block_end,
                          256, plan.origin, pieces_)
        return depth, block_end

    by_rows = table_rows(rows, None)
    assert all(np.array_equal(a, b) for a, b in zip(table_rows(None, pieces), by_rows,
                                                    strict=True))
    events = TrackTable(table, plan, order)
    ids = events._event_tracks(None)
    a, b = order.offsets[ids], order.offsets[ids + 1]
    track_rows = np.array([events.tracks[t].rows for t in ids.tolist()], np.int64)
    inner = ti.window_bounds(0, events.span_ns, 40)[1:-1].copy()
    before, before_off = np.array([3, 4000], np.int64), np.r_[0, 2, 2, 2, 2].astype(np.int64)

    def cells(rows_: Any, pieces_: Any) -> tuple[bytes, bytes]:
        return native.window_cells(starts, events.depth, rows_, durations, ids, a, b,
                                   track_rows, before, before_off, inner, plan.bits, 40,
                                   events.span_ns, plan.origin, pieces_)

    assert cells(None, pieces) == cells(rows, None)
    overview = TraceOverview(table, plan, order)
    at = np.r_[0, 1, 17, n // 2, n - 1, n].astype(np.int64)
    sums_pieces, sums_rows = np.empty(len(at), np.int64), np.empty(len(at), np.int64)
    native.sums_before(durations, None, overview.block_cum, SUM_BLOCK, at, sums_pieces, pieces)
    native.sums_before(durations, rows, overview.block_cum, SUM_BLOCK, at, sums_rows)
    assert np.array_equal(sums_pieces, sums_rows)
    pos, row = pieces
    bad = [(pos[::-1].copy(), row), (pos, row + n), (pos[:-1], row[:-1]), (pos, -row - 1),
           (pos + 1, row)]
    for broken in bad:
        with pytest.raises(ValueError):
            table_rows(None, broken)
        with pytest.raises(ValueError):
            cells(None, broken)
    with pytest.raises(ValueError):
        table_rows(rows, pieces)
    with pytest.raises(ValueError):
        cells(rows, pieces)
    with pytest.raises(TypeError):
        table_rows(None, (pos,))
    with pytest.raises(TypeError):
        cells(None, (pos.astype(np.int32), row))
