"""The skim of a big XSpace file (``formats.xspace_skim``) and the trace viewer's first picture
made from it: on real profiles, the skim's lines, time span, counts per span of time, long
events, their table rows and names equal what the decoded table holds, on one thread and on
two cut anywhere; its preview answers with the exact index's tracks and long events; a fresh
server answers the trace viewer from it while the table is still being read; and truncated,
random or absurd input is one clear error."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.trace import trace_preview
from stepscope.analysis.trace.trace_index import plan_tracks
from stepscope.analysis.trace.trace_preview import PreviewTooCoarse, TracePreview
from stepscope.analysis.trace.track_table import TrackTable
from stepscope.errors import ProfileFormatError
from stepscope.formats import xspace_columns as xc
from stepscope.formats.xplane_proto import XEvent, XEventMetadata, XLine, XPlane
from stepscope.formats.xspace_skim import skim_xspace
from stepscope.formats.xspace_to_tables import load_xspace
from stepscope.model.trace_skim import TraceSkim
from stepscope.web import skim_ahead
from waiting import final_api, until

from conftest import FIXTURES
from workloads import make_stepscope_run

pytestmark = pytest.mark.skipif(xc.compiled_decoder() is None,
                                reason="the skim needs the compiled decoder")

H200 = Path(__file__).parent / "data" / "h200"
FILES = [FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
         FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb",
         FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb",
         H200 / "torch_bridge.xplane.pb", H200 / "jax_bridge.xplane.pb",
         H200 / "cupy_bridge.xplane.pb"]
# One thread; two cut at the first byte of the lines, and at 5 kB; few long events kept.
WAYS = [{"threads": 1}, {"threads": 2, "split_bytes": 1}, {"threads": 2, "split_bytes": 5000},
        {"threads": 2, "split_bytes": 1, "max_wide": 3}]


def _check_against_table(skim: TraceSkim, path: Path) -> None:
    table = load_xspace(path)
    plan = plan_tracks(table)
    assert (skim.origin, skim.span) == (plan.origin, plan.span)
    line = np.asarray(table.line, np.int64)
    assert np.array_equal(skim.line_events, np.bincount(line, minlength=len(table.line_name)))
    assert skim.line_name == list(table.line_name)
    assert sorted(skim.counter_lines.tolist()) == np.flatnonzero(plan.counter_line).tolist()
    on = np.isin(line, skim.drawn)
    start = np.asarray(table.start_ns, np.int64)
    dur = np.maximum(np.asarray(table.duration_ns, np.int64), 0)
    # Every event of a drawn line in the span holding its start, its duration summed there.
    span = (start[on] - skim.origin - skim.bin_origin) // skim.bin_ns
    assert span.min(initial=0) >= 0 and span.max(initial=0) < skim.count.shape[1]
    row = np.full(len(table.line_name), -1)
    row[skim.drawn] = np.arange(len(skim.drawn))
    count = np.zeros(skim.count.shape, np.int64)
    covered = np.zeros(skim.count.shape, np.int64)
    np.add.at(count, (row[line[on]], span), 1)
    np.add.at(covered, (row[line[on]], span), dur[on])
    assert np.array_equal(count, skim.count) and np.array_equal(covered, skim.covered)
    # Every event at least wide_ns long, by its table row, start, duration and name.
    wide = np.flatnonzero(on & (dur >= skim.wide_ns))
    assert np.array_equal(np.sort(skim.wide_row), wide)
    assert np.array_equal(start[skim.wide_row] - skim.origin, skim.wide_start)
    assert np.array_equal(dur[skim.wide_row], skim.wide_dur)
    assert [table.names[c] for c in np.asarray(table.name)[skim.wide_row]] == \
        [skim.names[c] for c in skim.wide_name]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_skim_counts_what_the_table_holds(path: Path) -> None:
    for way in WAYS:
        skim = skim_xspace(path, **way)
        assert skim is not None
        _check_against_table(skim, path)
    assert len(skim_xspace(path, max_wide=3).wide_row) <= 6  # the threshold rose


def _exact(path: Path) -> TrackTable:
    table = load_xspace(path)
    return TrackTable(table, plan_tracks(table))


def _events(window: dict[str, Any]) -> list[tuple[int, ...]]:
    ev = window["events"]
    return sorted(zip(ev["id"], ev["track"], ev["start"], ev["dur"], strict=True))


def _names(window: dict[str, Any]) -> dict[int, str]:
    """Each drawn event's name, by its id."""
    names = {int(k): v for k, v in window["names"].items()}
    return {i: names[c] for i, c in zip(window["events"]["id"], window["events"]["name"],
                                        strict=True)}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_preview_answers_with_the_index_s_tracks_and_long_events(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool data is the exact index's; a window whose pixels are at least the skim's
    long events' least duration draws exactly the exact index's events, from the counts and
    long events alone (no block read)."""
    skim = skim_xspace(path)
    assert skim is not None
    preview, exact = TracePreview.of_skim(skim), _exact(path)
    monkeypatch.setattr(trace_preview, "MAX_WINDOW_EVENTS", 0)  # (the blocks: below)
    got, want = preview.meta(), exact.meta()
    keys = ("id", "section", "name", "kind", "events")
    assert [[t[k] for k in keys] for t in got["tracks"]] == \
        [[t[k] for k in keys] for t in want["tracks"]]
    assert (got["sections"], got["origin_ns"], got["span_ns"]) == \
        (want["sections"], want["origin_ns"], want["span_ns"])
    span = want["span_ns"]
    compared = 0
    for start, end, width in ((-span // 2, span + span // 2, 3000), (0, span + 1, 1000),
                              (span // 3, span // 3 + span // 4, 800),
                              (span // 2, span // 2 + span // 40, 500)):
        a, b = preview.query(start, end, width), exact.query(start, end, width)
        assert a["coarse"] and not b.get("coarse") and "events_coming" not in a
        if (end - start) // width < preview.wide_ns:
            continue  # (shorter events a pixel wide are counted, not drawn)
        compared += 1
        # The same events drawn, each once: as an event, not also in the counts; the
        # others counted.
        assert _events(a) == _events(b)
        assert _names(a) == _names(b)
        assert sum(a["aggregates"]["count"]) <= sum(b["aggregates"]["count"]) + \
            len(a["events"]["id"])
    assert compared
    preview.skim = None  # without the skim's blocks: too fine a window waits for the index
    with pytest.raises(PreviewTooCoarse):
        preview.query(0, 2, 2)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_skim_s_blocks_give_every_event_of_a_window(path: Path) -> None:
    """The blocks overlapping a window, read back, give each event of the drawn lines that
    overlaps it, with its table row, start and duration, however the skim was cut."""
    table = load_xspace(path)
    start = np.asarray(table.start_ns, np.int64)
    stop = start + np.maximum(np.asarray(table.duration_ns, np.int64), 1)
    dur = np.maximum(np.asarray(table.duration_ns, np.int64), 0)
    line = np.asarray(table.line, np.int64)
    rng = np.random.default_rng(3)
    for way in WAYS:
        skim = skim_xspace(path, **way)
        assert skim is not None
        drawn = np.isin(line, skim.block_line)  # every line of a drawn plane (counters too)
        assert set(line[np.isin(line, skim.drawn)].tolist()) <= set(skim.block_line.tolist())
        assert int(skim.block_events.sum()) == int(drawn.sum())
        for _ in range(6):
            t0 = int(rng.integers(-skim.span // 4, skim.span))
            t1 = t0 + int(rng.integers(1, skim.span // 3 + 2))
            which = np.flatnonzero((skim.block_lo < t1) & (skim.block_hi > t0))
            got = skim.read_blocks(which, t0, t1, 1 << 30)
            assert got is not None
            ids = skim.block_row[got[:, 0]] + got[:, 1]
            a, b = t0 + skim.origin, t1 + skim.origin
            want = np.flatnonzero(drawn & (start < b) & (stop > a))
            assert np.array_equal(np.sort(ids), want)
            assert np.array_equal(got[:, 2], start[ids] - skim.origin)
            assert np.array_equal(got[:, 3], dur[ids])
            if len(want) > 1:
                assert skim.read_blocks(which, t0, t1, len(want) - 1) is None  # bounded


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_line_s_depth_is_the_most_of_its_events_open_at_once(path: Path) -> None:
    """Per drawn line in start order (in the file), the most of its events open at once
    (laid out at least 1 ns long); -1 for a line out of order; on two threads, the cut line
    at most that."""
    import heapq

    table = load_xspace(path)
    start = np.asarray(table.start_ns, np.int64)
    stop = start + np.maximum(np.asarray(table.duration_ns, np.int64), 1)
    line = np.asarray(table.line, np.int64)
    one = skim_xspace(path, threads=1)
    assert one is not None
    want = np.zeros(len(table.line_name), np.int64)
    for li in set(one.block_line.tolist()):
        at = np.flatnonzero(line == li)  # in the file's order
        if np.any(np.diff(start[at]) < 0):
            want[li] = -1
            continue
        ends: list[int] = []
        for a, b in zip(start[at].tolist(), stop[at].tolist(), strict=True):
            while ends and ends[0] <= a:
                heapq.heappop(ends)
            heapq.heappush(ends, b)
            want[li] = max(want[li], len(ends))
    assert np.array_equal(one.line_depth, want)
    for way in WAYS[1:]:
        cut = skim_xspace(path, **way)
        assert cut is not None
        assert np.all((cut.line_depth == want) | ((cut.line_depth >= 1)
                                                  & (cut.line_depth <= want)))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_zoomed_window_before_the_table_shows_its_real_events(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window the skim's blocks hold (a zoom) is answered with real events before the
    table: each one drawn is the exact index's, with its name, start and duration, and every
    event of the window is drawn or counted once."""
    skim = skim_xspace(path)
    assert skim is not None
    preview, exact = TracePreview.of_skim(skim), _exact(path)
    span = exact.meta()["span_ns"]
    drawn_any = 0
    for start, end, width in ((0, span + 1, 1000), (span // 3, span // 3 + span // 40, 800),
                              (span // 2, span // 2 + span // 400, 500), (0, 2, 2)):
        a, b = preview.query(start, end, width), exact.query(start, end, width)
        assert a["coarse"] and not b.get("coarse")
        # Drawn: the index's own events (deeper rows than the track has yet are counted).
        assert set(_events(a)) <= set(_events(b))
        want_names = _names(b)
        assert all(want_names[i] == n for i, n in _names(a).items())
        total = lambda w: sum(w["aggregates"]["count"]) + len(w["events"]["id"])  # noqa: E731
        assert total(a) == total(b)
        rows = {t["id"]: t["rows"] for t in preview.meta()["tracks"]}
        assert all(r < rows[t] for t, r in zip(a["events"]["track"], a["events"]["row"],
                                                strict=True))
        assert all(r < rows[t] for t, r in zip(a["aggregates"]["track"],
                                                a["aggregates"]["row"], strict=True))
        drawn_any += len(a["events"]["id"])
    assert drawn_any
    # More events than a window reads from the blocks: the counts at once (the skim's
    # spans, however much wider than the window's pixels), nothing read beside.
    monkeypatch.setattr(trace_preview, "MAX_WINDOW_EVENTS", 0)
    k = int(np.flatnonzero(np.isin(skim.block_line, skim.drawn))[0])
    at = int(skim.block_lo[k])
    coarse = preview.query(at, at + 2, 2)
    assert coarse["coarse"] and _total(coarse) >= 1 and "events_coming" not in coarse
    assert not preview._reading


def _total(window: dict[str, Any]) -> int:
    return sum(window["aggregates"]["count"]) + len(window["events"]["id"])


@pytest.mark.parametrize("path", FILES[:4], ids=lambda p: p.name)
def test_a_zoom_with_many_events_answers_at_once_and_its_events_next(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zoom whose blocks hold more events than are read at once: the skim's counts answer
    at once (spans wider than the window's pixels drawn as they are, each holding its
    events), the window's events are read beside, and the page's next ask of the same
    window has them, as a zoom with fewer events would have had them at once."""
    skim = skim_xspace(path)
    assert skim is not None
    fast = TracePreview.of_skim(skim)
    span = fast.span_ns
    zoom = (span // 3, span // 3 + span // 40, 800)
    want = fast.query(*zoom)
    monkeypatch.setattr(trace_preview, "FAST_WINDOW_EVENTS", 0)
    preview = TracePreview.of_skim(skim)
    first = preview.query(*zoom)
    # The counts, not a read: only the skim's long events drawn, every cell in the window.
    assert first["coarse"] and all(d >= skim.wide_ns for d in first["events"]["dur"])
    assert first["events_coming"] and "events_coming" not in want
    agg = first["aggregates"]
    assert all(zoom[0] <= a < b <= zoom[1] for a, b in zip(agg["start"], agg["end"],
                                                           strict=True))
    assert _total(first) > 0 or _total(want) == 0

    def read(window: tuple[int, int, int], expected: dict[str, Any]) -> Any:
        return until(lambda: preview.query(*window) == expected or None,
                     "the events read beside", 0.01)

    read(zoom, want)
    # Another window is read in its turn (one kept), and the first again when asked again.
    other = (span // 2, span // 2 + span // 40, 800)
    read(other, fast.query(*other))
    read(zoom, want)


@pytest.mark.parametrize("path", FILES[:2], ids=lambda p: p.name)
def test_a_window_asked_again_while_it_is_read_is_read_once(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page asks a window again and again while its events are read beside: they are
    read once (a read asked for again was made twice, the second one for nothing)."""
    skim = skim_xspace(path)
    assert skim is not None
    monkeypatch.setattr(trace_preview, "FAST_WINDOW_EVENTS", 0)
    preview = TracePreview.of_skim(skim)
    reads, gate = [], threading.Event()
    real = preview._block_window

    def held(*args: Any) -> Any:
        reads.append(args[1:3])
        gate.wait(60)
        return real(*args)

    monkeypatch.setattr(preview, "_block_window", held)
    zoom = (preview.span_ns // 3, preview.span_ns // 3 + preview.span_ns // 40, 800)
    try:
        for _ in range(5):
            assert preview.query(*zoom)["events_coming"]
    finally:
        gate.set()
    until(lambda: "events_coming" not in preview.query(*zoom) or None, "the events", 0.01)
    assert reads == [zoom[:2]]


@pytest.mark.parametrize("mode", ["beside", "first"])
def test_a_fresh_server_answers_from_the_skim_while_the_table_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """A big file (every file, here) not in the cache: the trace viewer's tool data and full
    window come from the skim's preview while the host's table is still being read, then the
    exact answers as before."""
    from stepscope.model.logdir import list_runs
    from stepscope.web import trace
    from stepscope.web.api import Api

    monkeypatch.setenv("STEPSCOPE_NO_CACHE", "1")  # no cached table or preview to answer
    make_stepscope_run(tmp_path / "logs")
    run = next(iter(list_runs(tmp_path / "logs")))
    first: dict[str, Any] = final_api(
        lambda: Api(tmp_path / "logs").data(run, None, "trace_viewer", {}), "the index")[1]

    # Gated only from here (the first read ran): the decode, not the skim that may come
    # first inside the table's read.
    from stepscope.web import store

    gate = threading.Event()
    real_load = store.load_file
    monkeypatch.setattr(store, "load_file",
                        lambda *a, **k: (gate.wait(60), real_load(*a, **k))[1])
    # And the per-track table (the exact answers) held once the overview is made.
    overview_made, table_gate = threading.Event(), threading.Event()
    real_table = trace.TrackTable

    def held_table(*args: Any, **kwargs: Any) -> Any:
        overview_made.set()
        table_gate.wait(60)
        return real_table(*args, **kwargs)

    monkeypatch.setattr(trace, "TrackTable", held_table)
    monkeypatch.setattr(trace, "WAIT_EVENTS", 10)  # every trace counts as large
    monkeypatch.setattr(skim_ahead, "SKIM_BYTES", 0)  # and every file as big
    monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", mode)
    try:
        api = Api(tmp_path / "logs")
        code, meta = until(lambda: (lambda a: a if a[0] == 200 else None)(
            api.data(run, None, "trace_viewer", {})), "the skim's preview", 0.02)
        assert code == 200 and meta["coarse"] and meta["events"] == first["events"]
        assert [t["name"] for t in meta["tracks"]] == [t["name"] for t in first["tracks"]]
        query = {"run": run, "start_ns": "0", "end_ns": str(meta["span_ns"]), "width": "300"}
        code, window = api.trace("window", query)
        assert code == 200 and window["coarse"]
        drawn = len(window["events"]["id"])
        assert drawn  # the steps, at least: the skim's long events (no overview has them)
        assert sum(window["aggregates"]["count"]) + drawn == meta["events"]
        # A zoom, before the table: its real events, from the skim's blocks.
        span = meta["span_ns"]
        zoom = {**query, "start_ns": str(span // 3), "end_ns": str(span // 3 + span // 20)}
        code, early = api.trace("window", zoom)
        assert code == 200 and early["coarse"] and early["events"]["id"]
        # The table read and its overview made: the skim's zooms answer on (the overview's
        # have no events) until the exact answers.
        gate.set()
        assert overview_made.wait(60)
        code, between = api.trace("window", zoom)
        assert code == 200 and between["coarse"] and between == early
    finally:
        gate.set()
        table_gate.set()
    assert final_api(lambda: api.data(run, None, "trace_viewer", {}),
                     "the index")[1]["tracks"] == first["tracks"]
    late = final_api(lambda: api.trace("window", zoom), "the exact zoom")[1]
    assert set(early["events"]["id"]) <= set(late["events"]["id"])
    assert sum(early["aggregates"]["count"]) + len(early["events"]["id"]) == \
        sum(late["aggregates"]["count"]) + len(late["events"]["id"])


def _ask_data(api: Any, run: str, replies: list[tuple[int, dict[str, Any]]]) -> None:
    """The trace viewer's tool data, asked again while the run is not yet open
    ("loading")."""
    while (reply := api.data(run, None, "trace_viewer", {}))[1].get("status") == "loading":
        time.sleep(0.01)
    replies.append(reply)


def test_a_coarse_request_waits_for_the_preview_being_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a skim's preview is being made, the trace viewer's tool data is not answered
    202 after WAIT_S (its page would ask again only after a pause): it waits for the
    preview, up to PREVIEW_WAIT_S from the skim's start, then reports progress as before."""
    from stepscope.formats import xspace_skim
    from stepscope.model.logdir import list_runs
    from stepscope.web import store, trace
    from stepscope.web.api import Api

    monkeypatch.setenv("STEPSCOPE_NO_CACHE", "1")
    make_stepscope_run(tmp_path / "logs")
    run = next(iter(list_runs(tmp_path / "logs")))
    monkeypatch.setattr(skim_ahead, "SKIM_BYTES", 0)
    monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", "first")
    monkeypatch.setattr(trace, "WAIT_S", 0.05)
    monkeypatch.setattr(trace, "WAIT_EVENTS", 10)  # the preview answers at once
    skim_gate, decode_gate, skimming = threading.Event(), threading.Event(), threading.Event()
    real_skim, real_load = xspace_skim.skim_xspace, store.load_file

    def held_skim(*args: Any, **kwargs: Any) -> Any:
        skimming.set()
        skim_gate.wait(60)
        return real_skim(*args, **kwargs)

    monkeypatch.setattr(xspace_skim, "skim_xspace", held_skim)
    monkeypatch.setattr(store, "load_file",
                        lambda *a, **k: (decode_gate.wait(60), real_load(*a, **k))[1])
    for preview_wait, answer in ((60.0, 200), (0.1, 202)):
        monkeypatch.setattr(trace, "PREVIEW_WAIT_S", preview_wait)
        for gate in (skim_gate, decode_gate, skimming):
            gate.clear()
        api = Api(tmp_path / "logs")
        replies: list[tuple[int, dict[str, Any]]] = []

        asking = threading.Thread(target=_ask_data, args=(api, run, replies))
        try:
            asking.start()
            assert skimming.wait(60)
            # Waiting for the preview: still so at ten times WAIT_S; else a 202 on its own.
            asking.join(0.5 if answer == 200 else 60)
            assert asking.is_alive() == (answer == 200)
            skim_gate.set()
            asking.join(60)
            code, body = replies[0]
            assert code == answer
            assert body["coarse"] if answer == 200 else body["status"] == "indexing"
        finally:
            skim_gate.set()
            decode_gate.set()
            asking.join(60)
            api.store.close()


def test_a_skim_that_fails_first_never_costs_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A skim made before the decode that breaks (a bug, memory): the table is read and the
    trace viewer answers exactly, as without the skim."""
    from stepscope.formats import xspace_skim
    from stepscope.model.logdir import list_runs
    from stepscope.web.api import Api

    monkeypatch.setenv("STEPSCOPE_NO_CACHE", "1")
    make_stepscope_run(tmp_path / "logs")
    run = next(iter(list_runs(tmp_path / "logs")))
    monkeypatch.setattr(skim_ahead, "SKIM_BYTES", 0)
    monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", "first")
    called = []

    def broken(*args: Any, **kwargs: Any) -> None:
        called.append(1)
        raise MemoryError("no room for the skim")

    monkeypatch.setattr(xspace_skim, "skim_xspace", broken)
    api = Api(tmp_path / "logs")
    meta = final_api(lambda: api.data(run, None, "trace_viewer", {}), "the index")[1]
    assert called and not meta.get("coarse") and meta["events"] > 0


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_skimmed_tracks_rows_are_the_tables_where_its_events_nest(path: Path) -> None:
    """Before the table, each track has the rows it will have once the table comes (the page's
    tracks do not change height then), wherever the skim knows how many of its events are
    open at once and its long events fit in that; a track whose events also overlap without
    nesting may have one row more (its counts' row)."""
    skim = skim_xspace(path)
    assert skim is not None
    preview = TracePreview.of_skim(skim)
    table = load_xspace(path)
    exact = {(t.section, t.name): t.rows for t in TrackTable(table, plan_tracks(table)).tracks}
    line_of_track = {int(track): line
                     for line, track in enumerate(preview._track_of_line[:-1]) if track >= 0}
    checked = 0
    for t in preview.meta()["tracks"]:
        want = exact.get((t["section"], t["name"]))
        if want is None or t["kind"] != "events":
            continue
        checked += 1
        depth = int(skim.line_depth[line_of_track[t["id"]]])
        assert t["rows"] == want or (t["rows"] == want + 1 and depth < want), (t, depth)
    assert checked


def _same_skims(a: TraceSkim | None, b: TraceSkim | None) -> None:
    assert a is not None and b is not None
    for name in ("count", "covered", "wide_start", "wide_dur", "wide_name", "line_name"):
        assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name


def test_a_servers_first_file_is_skimmed_ahead_once_and_handed_to_the_trace_viewer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``skim_ahead.start`` (a server's first step) makes the pass over the newest run's file
    in a thread; the trace viewer's first picture takes it, and the file is read by one skim
    only; a pass is taken once, and not where the file changed since."""
    from stepscope.formats import xspace_skim, xspace_skim_pass
    from stepscope.model.logdir import list_runs, resolve
    from stepscope.web.api import Api

    monkeypatch.setenv("STEPSCOPE_NO_CACHE", "1")
    monkeypatch.setattr(skim_ahead, "SKIM_BYTES", 0)
    monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", "first")
    make_stepscope_run(tmp_path / "old")
    make_stepscope_run(tmp_path / "logs")
    (file,) = resolve(next(reversed(list_runs(tmp_path / "logs").values())))[2]
    want = skim_xspace(file)
    passes = []
    real_pass = xspace_skim_pass.skim_pass

    def counted(path: Path, **kwargs: Any) -> Any:
        passes.append(path)
        return real_pass(path, **kwargs)

    monkeypatch.setattr(xspace_skim_pass, "skim_pass", counted)
    monkeypatch.setattr(xspace_skim, "skim_pass", counted)
    skim_ahead.start(tmp_path / "logs", use_cache=False)
    ahead = skim_ahead.take(file)
    assert ahead is not None and skim_ahead.take(file) is None  # taken once
    _same_skims(xspace_skim.skim_of(ahead.result(timeout=60)), want)
    assert passes == [file]
    # Through the server's own path: the trace viewer's first picture is the pass made ahead.
    skim_ahead.start(tmp_path / "logs", use_cache=False)
    run = next(reversed(list_runs(tmp_path / "logs")))
    api = Api(tmp_path / "logs")
    meta = final_api(lambda: api.data(run, None, "trace_viewer", {}), "the index")[1]
    assert meta["events"] > 0 and passes == [file, file]
    assert skim_ahead.take(file) is None
    # A file changed after its pass began: skimmed again, not taken from the pass.
    skim_ahead.start(tmp_path / "logs", use_cache=False)
    skim_ahead._found.wait(10)
    os.utime(file, ns=(1, 1))
    assert skim_ahead.take(file) is None


def test_skims_ahead_of_what_is_not_one_big_local_file_are_not_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No logdir, an empty one, a run of two files, a small file, skims off, a cached table:
    no pass. A file that does not parse: its pass raises the reader's one clear error, for
    the trace viewer to leave the file to the table's read (which reports it)."""
    from stepscope.model import cache_format

    monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", "first")
    run_dir = make_stepscope_run(tmp_path / "logs")
    (file,) = run_dir.glob("*.xplane.pb")
    skim_ahead.start(tmp_path / "logs", use_cache=False)  # the file is under SKIM_BYTES
    assert skim_ahead.take(file) is None
    monkeypatch.setattr(skim_ahead, "SKIM_BYTES", 0)
    (tmp_path / "empty").mkdir()
    (tmp_path / "a file").write_bytes(b"not a logdir")
    for nothing in (tmp_path / "missing", tmp_path / "empty", tmp_path / "a file"):
        skim_ahead.start(nothing, use_cache=False)
        assert skim_ahead.take(file) is None and not skim_ahead._passes
    monkeypatch.setattr(cache_format, "has_table", lambda source: True)
    skim_ahead.start(tmp_path / "logs", use_cache=True)  # its table is in the cache
    assert skim_ahead.take(file) is None
    monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", "off")
    skim_ahead.start(tmp_path / "logs", use_cache=False)
    assert skim_ahead.take(file) is None
    monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", "first")
    second = run_dir / ("other" + file.name)
    second.write_bytes(file.read_bytes())
    skim_ahead.start(tmp_path / "logs", use_cache=False)  # two hosts: the store's turn
    assert skim_ahead.take(file) is None and skim_ahead.take(second) is None
    second.unlink()
    file.write_bytes(b"\x0a\xff\xff\xff garbage")
    skim_ahead.start(tmp_path / "logs", use_cache=False)
    ahead = skim_ahead.take(file)
    assert ahead is not None
    with pytest.raises(ProfileFormatError, match="not a readable XSpace"):
        ahead.result(timeout=60)


def test_the_skim_runs_beside_the_decode_where_cores_are_spare_else_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for value, mode in (("0", "off"), ("off", "off"), ("1", "beside"), ("beside", "beside"),
                        ("first", "first"), (" First ", "first")):
        monkeypatch.setenv("STEPSCOPE_TRACE_SKIM", value)
        assert skim_ahead.skim_mode() == mode
    monkeypatch.delenv("STEPSCOPE_TRACE_SKIM")
    for cores, mode in ((1, "first"), (2, "first"), (4, "beside"), (64, "beside")):
        monkeypatch.setattr(skim_ahead, "usable_cores", lambda c=cores: c)
        assert skim_ahead.skim_mode() == mode
    monkeypatch.undo()
    assert 1 <= skim_ahead.usable_cores() <= (os.cpu_count() or 1)


# -- hostile input ---------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _space(line: bytes) -> bytes:
    plane = XPlane(id=1, name="/host:CPU")
    plane.event_metadata[1].CopyFrom(XEventMetadata(id=1, name="op"))
    return _field(1, plane.SerializeToString() + _field(3, line))


def test_a_line_whose_timestamp_follows_its_events_is_left_to_the_table(tmp_path: Path) -> None:
    events = XLine(id=1, name="t", events=[XEvent(metadata_id=1, offset_ps=5000,
                                                  duration_ps=9000)]).SerializeToString()
    path = tmp_path / "late.xplane.pb"
    path.write_bytes(_space(events + _varint(3 << 3) + _varint(1_000_000)))
    assert load_xspace(path).start_ns.tolist() == [1_000_005]
    assert skim_xspace(path) is None
    path.write_bytes(_space(XLine(id=1, name="t", timestamp_ns=1_000_000,
                                  events=[XEvent(metadata_id=1, offset_ps=5000,
                                                 duration_ps=9000)]).SerializeToString()))
    skim = skim_xspace(path)
    assert skim is not None and skim.origin == 1_000_005 and skim.wide_dur.tolist() == [9]


def _number(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value & ((1 << 64) - 1))  # (negatives: 10 bytes)


def _event(rng: np.random.Generator, offset: int) -> bytes:
    """One event's bytes, laid out one of the ways a writer may: the usual order (metadata
    id, offset, duration, stats), with no duration, or stats longer than 127 bytes, and
    those no writer we know of uses (fields out of order, repeated, an unknown one, none at
    all, a negative duration, varints padded to 9 bytes)."""
    md, dur = int(rng.integers(1, 4)), int(rng.integers(0, 5_000_000))
    stat = _field(4, _number(1, 1) + _number(4, int(rng.integers(0, 1 << 40))))
    way = int(rng.integers(0, 9))
    if way == 0:
        return _number(1, md) + _number(2, offset) + _number(3, dur) + stat
    if way == 1:
        return _number(1, md) + _number(2, offset) + stat + stat
    if way == 2:
        return _number(1, md) + _number(2, offset) + _number(3, dur) + _field(
            4, _number(1, 1) + _field(5, b"x" * int(rng.integers(120, 300))))
    if way == 3:
        return _number(3, dur) + _number(2, offset) + _number(1, md)
    if way == 4:
        return _number(1, md) + _number(2, offset + 7000) + _number(2, offset) + _number(3, dur)
    if way == 5:
        return _number(1, md) + _number(2, offset) + _number(5, 3) + _number(3, dur)
    if way == 6:
        return b"" if rng.integers(0, 4) == 0 else _number(1, md) + _number(2, offset)
    if way == 7:
        return _number(1, md) + _number(2, offset) + _number(3, -dur)
    # A varint padded with bytes of no value (as long as a varint may be: still its value).
    padded = bytes([(offset >> 7 * i & 0x7F) | 0x80 for i in range(8)]) + bytes([offset >> 56])
    return _number(1, md) + _varint(2 << 3) + padded + _number(3, dur)


def test_events_laid_out_any_way_are_skimmed_as_the_table_reads_them(tmp_path: Path) -> None:
    """The skim reads an event in the usual layout in one quick pass and any other by the
    general rule: 60,000 events on two lines in random layouts (the runs of each cut by the
    skim's reads of the file), on one thread and two, give what the table holds."""
    rng = np.random.default_rng(11)
    plane = XPlane(id=1, name="/host:CPU")
    for i in (1, 2, 3):
        plane.event_metadata[i].CopyFrom(XEventMetadata(id=i, name=f"op{i}"))
    lines = b""
    for j in (1, 2):
        offsets = np.cumsum(rng.integers(0, 3_000_000, 30_000)) + 10**12
        events = b"".join(_field(4, _event(rng, int(o))) for o in offsets)
        lines += _field(3, _number(1, j) + _field(2, f"t{j}".encode()) +
                        _number(3, 1_700_000_000 * 10**9) + events)
    path = tmp_path / "layouts.xplane.pb"
    path.write_bytes(_field(1, plane.SerializeToString() + lines))
    assert path.stat().st_size > 1 << 20
    for way in WAYS:
        skim = skim_xspace(path, **way)
        assert skim is not None and int(skim.line_events.sum()) == 60_000
        _check_against_table(skim, path)


@pytest.mark.parametrize("data", [b"", b"\x0a", b"\x0a\x05\x1a\x03\x22", b"\xff" * 64,
                                  bytes(np.random.default_rng(3).integers(0, 256, 4096,
                                                                          dtype=np.uint8))])
def test_truncated_empty_and_random_files_are_one_clear_error(tmp_path: Path,
                                                              data: bytes) -> None:
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(data)
    try:
        skim = skim_xspace(path)
    except ProfileFormatError as err:
        assert "not a readable XSpace profile" in str(err) and "\n" not in str(err)
    else:  # nothing to draw is an answer too
        assert skim is not None and not len(skim.drawn)


@pytest.mark.parametrize("bad", [
    _number(1, 1) + b"\x10\xff\xff",  # its offset's varint runs past the event's end
    _number(1, 1) + _number(2, 5) + b"\x22\x30\x08",  # its stats' length past its end
    _number(1, 1) + _number(2, 5) + b"\x22\xff",  # that length's varint cut by its end
    _number(1, 1) + b"\x10" + b"\xff" * 10 + b"\x01",  # a varint longer than 10 bytes
    _number(1, 1) + b"\x17",  # a field of no wire type
])
def test_an_event_wrong_among_good_ones_is_one_clear_error(tmp_path: Path, bad: bytes) -> None:
    """An event whose bytes are wrong, amid well-formed events (which are read in the
    skim's quick pass): the skim says so in one line, as the table does."""
    good = b"".join(_field(4, _number(1, 1) + _number(2, i * 10**6) + _number(3, 5000))
                    for i in range(500))
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(_space(_number(1, 1) + _number(3, 10**15) + good + _field(4, bad) + good))
    for way in WAYS[:2]:
        with pytest.raises(ProfileFormatError, match="not a readable XSpace") as err:
            skim_xspace(path, **way)
        assert "\n" not in str(err.value)
    with pytest.raises(ProfileFormatError):
        load_xspace(path)


def test_a_real_file_cut_anywhere_is_one_clear_error(tmp_path: Path) -> None:
    data = FILES[0].read_bytes()
    path = tmp_path / "cut.xplane.pb"
    for cut in (len(data) // 3, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(ProfileFormatError, match="not a readable XSpace profile"):
            skim_xspace(path, threads=2, split_bytes=1)
    with pytest.raises(ProfileFormatError, match="Cannot read"):
        skim_xspace(tmp_path / "missing.xplane.pb")


def test_absurd_arguments_to_the_compiled_skim_are_refused(tmp_path: Path) -> None:
    decoder = xc.compiled_decoder()
    data = FILES[3].read_bytes()
    plane, start, end = decoder.skim_plan(data)
    n = len(plane) // 4
    row = np.arange(n, dtype=np.int32).tobytes()
    ids = np.full(8, -1, np.int64).tobytes()
    ok = decoder.skim(data, plane, start, end, row, ids, 64, 10, 2, 1)
    assert sum(np.frombuffer(ok["events"], np.int64)) > 0
    past = np.frombuffer(end, np.int64).copy()
    past[0] = len(data) + 10
    backwards = np.frombuffer(start, np.int64).copy()
    backwards[0] = past[0] + 1
    for args, what in (((start, past.tobytes(), row, ids, 64, 10, 2), "past the end"),
                       ((backwards.tobytes(), past.tobytes(), row, ids, 64, 10, 2),
                        "out of order"),
                       ((start, end[:-8], row, ids, 64, 10, 2), "differ in length"),
                       ((start, end, row, ids, 1, 10, 2), "bins"),
                       ((start, end, row, ids, 1 << 30, 10, 2), "bins"),
                       ((start, end, row, ids, 64, 0, 2), "max_wide"),
                       ((start, end, np.full(n, 1 << 20, np.int32).tobytes(), ids, 1 << 10,
                         10, 2), "too many")):
        with pytest.raises(ValueError, match=what):
            decoder.skim(data, plane, *args)
    # A line's bytes that are not a line: an error, not a crash.
    shifted = (np.frombuffer(start, np.int64) + 1).tobytes()
    with pytest.raises(ValueError):
        decoder.skim(data, plane, shifted, end, row, ids, 64, 10, 2, 1)
    # A window's blocks: outside the file, of other lengths, or not events: refused.
    blocks = np.frombuffer(ok["blocks"], np.int64).reshape(-1, 7)
    spans = np.stack([blocks[:, 1], blocks[:, 2], np.frombuffer(end, np.int64)[blocks[:, 0]]],
                     axis=1)
    stamps = np.frombuffer(ok["timestamp"], np.int64)[blocks[:, 0]]
    got = decoder.skim_window(data, spans.tobytes(), stamps.tobytes(), -(1 << 62), 1 << 62,
                              1 << 30)
    assert got is not None and len(memoryview(got)) // 40 == int(blocks[:, 4].sum())
    for bad_spans, bad_stamps, what in (
            (spans + len(data), stamps, "outside"), (spans[:, ::-1], stamps, "outside"),
            (spans, stamps[:-1], "differ"), (spans[:, :2], stamps, "differ")):
        with pytest.raises(ValueError, match=what):
            decoder.skim_window(data, np.ascontiguousarray(bad_spans).tobytes(),
                                bad_stamps.tobytes(), 0, 1, 10)
    with pytest.raises(ValueError, match="differ"):
        decoder.skim_window(data, spans.tobytes(), stamps.tobytes(), 0, 1, -1)
    inside = spans.copy()
    inside[:, 0] += 1  # a key that is not one: an error, not a crash
    with pytest.raises(ValueError):
        decoder.skim_window(data, inside.tobytes(), stamps.tobytes(), -(1 << 62), 1 << 62, 9)


def test_a_file_of_too_many_lines_is_left_to_the_table(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    from stepscope.formats import xspace_skim_pass

    monkeypatch.setattr(xspace_skim_pass, "MAX_LINES", 2)  # the counts' memory is bounded
    assert skim_xspace(FILES[3]) is None


@pytest.mark.parametrize("timestamp, offsets", [
    ((1 << 63) - 1, [0, (1 << 63) - 1, 5]),  # times past int64 (wrapping, as the decoder's)
    (0, [-1, 0, (1 << 63) - 1, -(1 << 62)]),  # absurd offsets
    (1 << 62, [0, 1, 2]),
])
def test_absurd_times_stay_inside_the_grid(tmp_path: Path, timestamp: int,
                                           offsets: list[int]) -> None:
    line = XLine(id=1, name="t", timestamp_ns=timestamp,
                 events=[XEvent(metadata_id=1, offset_ps=o, duration_ps=7000) for o in offsets])
    path = tmp_path / "absurd.xplane.pb"
    path.write_bytes(_space(line.SerializeToString()))
    for way in WAYS:
        skim = skim_xspace(path, **way)
        assert skim is not None and int(skim.count.sum()) == len(offsets)
        TracePreview.of_skim(skim).meta()


@pytest.mark.parametrize("max_wide", [1, 2, 5])
def test_the_long_events_kept_are_bounded_and_every_one_above_the_threshold(
        tmp_path: Path, max_wide: int) -> None:
    """Durations from none to absurd (past a quarter of int64 in ps) on one line, more long
    ones than may be kept: at most ``max_wide`` kept, each at least the threshold, and every
    event at least that long among them."""
    durations = [0, 1, 7000, 10**9, 10**12, 10**15, (1 << 62), (1 << 63) - 1, 3, 10**12]
    line = XLine(id=1, name="t", timestamp_ns=0,
                 events=[XEvent(metadata_id=1, offset_ps=1000 * i, duration_ps=d)
                         for i, d in enumerate(durations)])
    path = tmp_path / "long.xplane.pb"
    path.write_bytes(_space(line.SerializeToString()))
    skim = skim_xspace(path, threads=1, max_wide=max_wide)
    assert skim is not None
    dur = np.asarray(load_xspace(path).duration_ns, np.int64)  # (as the table reads them)
    assert len(skim.wide_row) <= max_wide
    assert sorted(skim.wide_row.tolist()) == np.flatnonzero(dur >= skim.wide_ns).tolist()
    TracePreview.of_skim(skim).query(0, skim.span, 100)


def test_names_are_coded_by_line_and_metadata_whatever_the_ids() -> None:
    from stepscope.model.trace_skim import coded_pairs as _coded

    line = np.array([3, 1, 3, 1, 2], np.int64)
    for md in (np.array([7, 7, 7, 9, 0], np.int64),  # the one-key path
               np.array([-5, 1 << 40, -5, -(1 << 62), 0], np.int64)):  # absurd ids
        keys, code = _coded(line, md)
        assert [keys[c] for c in code.tolist()] == list(zip(line.tolist(), md.tolist(),
                                                            strict=True))
        assert len(keys) == len(set(keys))
    keys, code = _coded(line[:0], line[:0])
    assert keys == [] and len(code) == 0


@pytest.mark.parametrize("open_at_once, depth", [(3, 3), (256, 256), (257, -1), (5000, -1)])
def test_a_line_s_depth_is_counted_up_to_a_bound(tmp_path: Path, open_at_once: int,
                                                 depth: int) -> None:
    """Events overlapping without nesting, each ending after all before it (the worst case
    of the sorted ends): counted up to 256 open at once, unknown (-1) beyond; the window's
    events are still read, their rows the index's."""
    n = open_at_once
    line = XLine(id=1, name="t", timestamp_ns=1000, events=[
        XEvent(metadata_id=1, offset_ps=i * 1000, duration_ps=(n + i) * 1000)
        for i in range(n)])
    path = tmp_path / "overlap.xplane.pb"
    path.write_bytes(_space(line.SerializeToString()))
    skim = skim_xspace(path, threads=1)
    assert skim is not None and skim.line_depth.tolist() == [depth]
    preview, exact = TracePreview.of_skim(skim), _exact(path)
    a, b = preview.query(0, 3 * n * 1000, 100), exact.query(0, 3 * n * 1000, 100)
    assert set(_events(a)) <= set(_events(b))
    assert sum(a["aggregates"]["count"]) + len(a["events"]["id"]) == n


@pytest.mark.parametrize("beside", [False, True], ids=["at once", "beside"])
def test_a_file_cut_after_its_skim_leaves_its_zooms_to_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beside: bool) -> None:
    """The file changed under the skim (cut short, or emptied): a zoom is not read from its
    blocks (no crash, no other file's events), whether read at once or beside; it waits for
    the table, whose read reports what the file holds now."""
    if beside:
        monkeypatch.setattr(trace_preview, "FAST_WINDOW_EVENTS", 0)
    path = tmp_path / "cut.xplane.pb"
    data = FILES[3].read_bytes()
    for size in (len(data) // 2, 0):
        path.write_bytes(data)
        skim = skim_xspace(path)
        assert skim is not None
        preview = TracePreview.of_skim(skim)
        span = preview.span_ns
        zoom = (span // 3, span // 3 + span // 1000, 500)
        assert preview.query(*zoom)["coarse"]
        path.write_bytes(data[:size])
        other = (zoom[0] + 1, *zoom[1:])  # (beside: not the window read already)

        def waits(preview: TracePreview = preview,
                  other: tuple[int, int, int] = other) -> bool | None:
            try:
                preview.query(*other)
            except PreviewTooCoarse:
                return True
            return None

        until(waits, "the zoom waiting for the table", 0.01)
        assert preview.skim is None


def test_events_read_in_start_order_are_not_sorted_again() -> None:
    """The blocks' events come grouped by track and by start where their lines are in start
    order: their groups' bounds, no sort; any other order (a start going back, the shorter
    first of two starting together, a track coming back) is sorted."""
    ordered = trace_preview._start_ordered
    a = np.array
    track, start, dur = a([2, 2, 2, 0, 0]), a([5, 5, 9, 1, 3]), a([4, 2, 1, 1, 1])
    assert ordered(track, start, dur).tolist() == [0, 3, 5]
    assert ordered(a([7]), a([1]), a([1])).tolist() == [0, 1]
    assert ordered(a([], np.int64), a([], np.int64), a([], np.int64)).tolist() == [0, 0]
    assert ordered(track, a([5, 5, 4, 1, 3]), dur) is None
    assert ordered(track, start, a([2, 4, 1, 1, 1])) is None
    assert ordered(a([2, 2, 0, 0, 2]), a([1, 2, 1, 2, 3]), a([1] * 5)) is None
