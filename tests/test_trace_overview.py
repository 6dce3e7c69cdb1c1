"""The trace viewer's coarse overview against the full index on real profiles: the same
tracks, and per track and pixel column the same events counted; and the index built from the
overview's event order is the index built without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.trace import trace_index as ti
from stepscope.analysis.trace.trace_index import TraceIndex, TraceQueryError, build, window_bounds
from stepscope.analysis.trace.trace_overview import SUM_BLOCK, TraceOverview
from stepscope.analysis.trace.track_order import TrackOrder
from stepscope.model.events import EventTable
from test_trace_index import _profiles
from waiting import final_api, until

from twins import built
from workloads import make_stepscope_run


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[EventTable]:
    return _profiles(make_stepscope_run(tmp_path_factory.mktemp("trace_overview")))


def _windows(span: int, seed: int) -> list[tuple[int, int, int]]:
    """The whole trace (as the page asks: half a span of margin either side), and zooms."""
    rng = np.random.default_rng(seed)
    out = [(0, span, 1000), (-span // 2, span + span // 2, 2800), (0, span, 1)]
    for _ in range(12):
        length = max(int(span * 10 ** rng.uniform(-4, 0)), 1)
        a = int(rng.integers(-length // 4, max(span - length, 1)))
        out.append((a, a + length, int(rng.integers(1, 3000))))
    return out


def _cells(answer: dict[str, Any]) -> dict[tuple[int, int], tuple[int, int]]:
    """(track, first column) → (count, covered) of an answer's blocks."""
    agg, bnd = answer["aggregates"], window_bounds(answer["start_ns"], answer["end_ns"],
                                                   answer["width"])
    cols = np.searchsorted(bnd, np.asarray(agg["start"], np.int64), side="right") - 1
    return {(t, int(c)): (n, cov) for t, c, n, cov in
            zip(agg["track"], cols.tolist(), agg["count"], agg["covered"], strict=True)}


def _from_index(ix: TraceIndex, start_ns: int, end_ns: int, width: int
                ) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (track, column), the events the full index places on that track overlapping the
    window, by the column they start in (before the window: the first), and their time."""
    rows = np.flatnonzero(ix.pos_of_row >= 0)
    track, _, start = ix.where(rows)
    dur = ix.table.duration_ns[rows].astype(np.int64)
    t0, t1 = max(start_ns, 0), min(end_ns, int(ix.mask))
    live = (start < t1) & (start + np.maximum(dur, 1) > t0)
    bnd = window_bounds(start_ns, end_ns, width)
    col = np.clip(np.searchsorted(bnd, start[live], side="right") - 1, 0, width - 1)
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for t, c, d in zip(track[live].tolist(), col.tolist(), dur[live].tolist(), strict=True):
        n, cov = out.get((t, c), (0, 0))
        out[(t, c)] = (n + 1, cov + d)
    return out


def _overviews(table: EventTable) -> list[TraceOverview]:
    """The overview with its order as ``TrackOrder.of`` gives it, and sorted into columns."""
    plan = ti.plan_tracks(table)
    return [TraceOverview(table, plan), TraceOverview(table, plan, TrackOrder.sorted(table, plan))]


def test_overview_counts_what_the_index_shows(tables: list[EventTable]) -> None:
    own_order = []
    for k, table in enumerate(tables):
        ix = build(table)
        for ov in _overviews(table):
            own_order.append(ov.order.in_table)
            _counts_as_index(ix, ov, k)
    assert any(own_order) and not all(own_order)  # both forms of the order checked


def _counts_as_index(ix: TraceIndex, ov: TraceOverview, k: int) -> None:
    """The overview's counts per track and pixel column are the full index's."""
    full, coarse = ix.meta(), ov.meta()
    assert coarse["coarse"] and "coarse" not in full
    for key in ("origin_ns", "span_ns", "events", "counter_samples", "sections"):
        assert coarse[key] == full[key], key
    for a, b in zip(coarse["tracks"], full["tracks"], strict=True):
        assert {**a, "rows": b["rows"]} == b
        assert a["rows"] == (0 if a["kind"] == "counter" else 1)
    for start, end, width in _windows(ix.span_ns, k):
        answer = ov.query(start, end, width)
        assert answer["coarse"] and not answer["events"]["id"]
        assert set(answer["aggregates"]["row"]) <= {0}
        expected = _from_index(ix, start, end, width)
        assert _cells(answer) == expected
        # The full answer: its events and blocks on every row of a track, together.
        shown = ix.query(start, end, width)
        per_track: dict[int, int] = {}
        for t in shown["events"]["track"]:
            per_track[t] = per_track.get(t, 0) + 1
        for t, n in zip(shown["aggregates"]["track"], shown["aggregates"]["count"],
                        strict=True):
            per_track[t] = per_track.get(t, 0) + n
        coarse_track: dict[int, int] = {}
        for (t, _), (n, _) in expected.items():
            coarse_track[t] = coarse_track.get(t, 0) + n
        assert per_track == coarse_track
        assert answer["counters"] == shown["counters"]


def test_only_some_tracks_and_bad_windows(tables: list[EventTable]) -> None:
    table = tables[0]
    ov = TraceOverview(table)
    some = [t.id for t in ov.tracks if t.kind == "events"][:3]
    answer = ov.query(0, ov.span_ns, 500, some)
    assert set(answer["aggregates"]["track"]) <= set(some) and answer["aggregates"]["track"]
    assert ov.query(ov.span_ns + 10, ov.span_ns + 20, 5)["aggregates"]["count"] == []
    with pytest.raises(TraceQueryError):
        ov.query(10, 10, 100)
    with pytest.raises(TraceQueryError):
        ov.query(0, 10, 0)


def test_index_from_the_overview_order_is_the_same_index(tables: list[EventTable]) -> None:
    """The refined answers (the index built from the overview's plan and event order) are the
    answers of the index built on its own."""
    for table in tables:
        alone = build(table)
        for ov in _overviews(table):
            handed = build(table, plan=ov.plan, by_start=ov.order.order())
            assert handed.header == alone.header
            assert handed.arrays.keys() == alone.arrays.keys()
            for name, array in alone.arrays.items():
                assert np.array_equal(handed.arrays[name], array), name
            for start, end, width in _windows(alone.span_ns, 3)[:5]:
                assert handed.query(start, end, width) == alone.query(start, end, width)


def test_a_large_trace_answers_coarsely_through_the_api(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """While the index builds, the tool data and windows come from the overview (a large
    trace's at once); the event view waits (202); then everything comes from the index."""
    import threading

    from stepscope.model.logdir import list_runs
    from stepscope.run import storage
    from stepscope.web import trace
    from stepscope.web.api import Api

    gate = threading.Event()

    def slow_index(table: Any, source: Any, **kwargs: Any) -> ti.TraceIndex:
        assert gate.wait(60)
        return storage.index_for(table, source, **kwargs)

    real_table = trace.TrackTable

    def slow_table(*args: Any) -> Any:  # the exact per-track table comes after the overview
        assert gate.wait(60)
        return real_table(*args)

    monkeypatch.setattr(trace, "index_for", slow_index)
    monkeypatch.setattr(trace, "TrackTable", slow_table)
    monkeypatch.setattr(trace, "WAIT_EVENTS", 10)  # every trace counts as large
    make_stepscope_run(tmp_path)
    api = Api(tmp_path, use_cache=False)
    run = next(iter(list_runs(tmp_path)))
    # The index cannot finish (gated): the first 200 is the coarse overview, however long it
    # takes to come on a busy machine.
    code, meta = until(lambda: (lambda a: a if a[0] == 200 else None)(
        api.data(run, None, "trace_viewer", {})), "the coarse overview", 0.02)
    assert code == 200 and meta["coarse"]
    query = {"run": run, "start_ns": "0", "end_ns": str(meta["span_ns"]), "width": "300"}
    code, window = api.trace("window", query)
    assert code == 200 and window["coarse"] and sum(window["aggregates"]["count"]) == \
        meta["events"]
    assert api.trace("event", {"run": run, "id": "0"})[0] == 202
    gate.set()
    code, window = final_api(lambda: api.trace("window", query), "the indexed window")
    assert "coarse" not in window and window["events"]["id"]
    assert "coarse" not in api.data(run, None, "trace_viewer", {})[1]


def _keyed_events(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(track, start, end as laid out) of events as a profile gives them: lines of events in
    time order (some out of order, some starting together, longer and shorter), a track one
    line or a few, the lines in file order not in track order."""
    rng = np.random.default_rng(seed)
    lines = int(rng.integers(1, 14))
    per_line = rng.integers(0, 400, lines)
    track_of_line = rng.integers(0, max(lines // 2, 1), lines)
    parts = []
    for li in range(lines):
        start = np.sort(rng.integers(0, 300, per_line[li]))
        if per_line[li] > 4 and rng.random() < 0.4:  # a few out of order
            hit = rng.integers(0, per_line[li], 3)
            start[hit] = rng.integers(0, 300, 3)
        parts.append((np.full(per_line[li], track_of_line[li]), start))
    track = np.concatenate([p[0] for p in parts]).astype(np.int64)
    start = np.concatenate([p[1] for p in parts]).astype(np.int64)
    end = start + np.maximum(rng.integers(-1, 6, len(start)), 1)
    return track, start, end


@pytest.mark.parametrize("seed", range(60))
def test_the_merged_runs_order_is_the_sorted_order(seed: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled merge of the keys' ascending runs gives the general sort's order: by
    (track, start), the longer first of events starting together, then by table row."""
    if not built("_trace_layout"):
        pytest.skip("_trace_layout is not built")
    track, start, end = _keyed_events(seed)
    merged = ti.sorted_by_track_and_start(track, start, end, 9)
    monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
    sorted_ = ti.sorted_by_track_and_start(track, start, end, 9)
    expected = np.lexsort((np.arange(len(track)), -end, start, track))
    for got in (merged, sorted_):
        assert np.array_equal(got[0], expected)
        assert np.array_equal(got[1], (track[expected] << 9) | start[expected])


def test_the_merge_hands_many_runs_to_the_sort_and_refuses_bad_columns() -> None:
    """Keys in no order (more runs than the merge takes) are sorted instead (-1: nothing
    written); columns of other lengths or item sizes are one clear error."""
    if not built("_trace_layout"):
        pytest.skip("_trace_layout is not built")
    from stepscope.analysis.trace import _trace_layout

    key = np.random.default_rng(3).integers(0, 1000, 5000).astype(np.int64)
    order, out = np.zeros(5000, np.int64), np.zeros(5000, np.int64)
    assert _trace_layout.order_by_key(key, key + 1, order, out, 10) == -1
    assert not order.any()
    assert _trace_layout.order_by_key(key, key + 1, order, None, 5000) == -2
    assert not order.any()
    assert _trace_layout.order_by_key(key, key + 1, order, out, 5000) > 10
    assert np.array_equal(out, np.sort(key))
    # Keys in order already (ties among them): one run, the keys their own sorted copy.
    ordered = np.sort(key)
    assert _trace_layout.order_by_key(ordered, -ordered, order, None, 5000) == 1
    assert np.array_equal(order, np.lexsort((np.arange(5000), ordered, ordered)))
    got = ti.sorted_by_track_and_start(np.zeros(5000, np.int64), key, key + 1, 11)
    assert np.array_equal(got[1], np.sort(key))
    empty = np.zeros(0, np.int64)
    assert _trace_layout.order_by_key(empty, empty, empty, empty, 1) == 0
    with pytest.raises(ValueError, match="as long"):
        _trace_layout.order_by_key(key, key[:10], order, out, 5000)
    with pytest.raises(TypeError, match="8-byte"):
        _trace_layout.order_by_key(key.astype(np.int32), key, order, out, 5000)


def test_sums_before_any_position_equal_a_running_sum(tables: list[EventTable],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The overview keeps its durations summed per block only; the sum before any position
    (the compiled pass and its NumPy twin) is the running sum's, and bad positions are one
    clear error."""
    for table in tables:
        for overview in _overviews(table):
            order = np.asarray(overview.order.order(), np.int64)
            running = np.r_[0, np.cumsum(np.maximum(overview.order.durations[order], 0))]
            pos = np.r_[np.arange(len(order) + 1), len(order), 0, 7 % (len(order) + 1)]
            assert np.array_equal(overview.summed_before(pos), running[pos])
            grid = pos[: (len(pos) // 3) * 3].reshape(3, -1)
            assert np.array_equal(overview.summed_before(grid), running[grid])
            monkeypatch.setenv("STEPSCOPE_PURE_PYTHON", "1")
            assert np.array_equal(overview.summed_before(pos), running[pos])
            monkeypatch.delenv("STEPSCOPE_PURE_PYTHON")
    native = ti.compiled_layout()
    if native is None:
        return
    out = np.empty(1, np.int64)
    for overview in _overviews(tables[0]):
        n, durations, by_start = overview.order.n, overview.order.durations, \
            overview.order.by_start
        for bad in (-1, n + 1):
            with pytest.raises(ValueError):
                native.sums_before(durations, by_start, overview.block_cum, SUM_BLOCK,
                                   np.array([bad], np.int64), out)
        with pytest.raises(ValueError):
            native.sums_before(durations, by_start, overview.block_cum[:-1], SUM_BLOCK,
                               np.array([0], np.int64), out)
