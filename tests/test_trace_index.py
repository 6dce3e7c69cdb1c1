"""The trace viewer's index: layout, the level-of-detail query against brute force, details,
selection, search, flows and the on-disk cache, on real profiles."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np
import pytest

from stepscope.analysis.trace.trace_index import TraceIndex, TraceQueryError, build
from stepscope.errors import NotFoundError
from stepscope.formats.run_reader import load
from stepscope.model import cache
from stepscope.model.events import MISSING, TYPED_STATS, EventTable, Plane, no_stats
from stepscope.run.storage import index_for

from conftest import FIXTURES
from workloads import EVIL_OP, make_stepscope_run
from xprof_reference import xprof_pids

GPU_FIXTURE = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
KINETO_FIXTURE = FIXTURES / "HolisticTraceAnalysis/tests/data/ns_resolution_trace/" \
    "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def synthetic_table(start: np.ndarray, dur: np.ndarray, line: np.ndarray) -> EventTable:
    """A host table with one plane, ``line.max() + 1`` lines and the given events."""
    n = len(start)
    n_lines = int(line.max()) + 1
    empty = no_stats()
    return EventTable(
        planes=[Plane(0, "/host:CPU")], line_plane=np.zeros(n_lines, np.int32),
        line_id=np.arange(n_lines, dtype=np.int64),
        line_name=[f"thread {i}" for i in range(n_lines)],
        line=line.astype(np.int32),
        name=(np.arange(n) % 3).astype(np.int32), start_ns=start.astype(np.int64),
        duration_ns=dur.astype(np.int64),
        typed={k: np.full(n, MISSING, np.int64) for k in TYPED_STATS},
        names=["a", "b", "c"], stats=empty, hostnames=["synthetic"])


@pytest.fixture(scope="module")
def stepscope_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_stepscope_run(tmp_path_factory.mktemp("trace_index"))


def _profiles(stepscope_profile: Path) -> list[EventTable]:
    tables = [next(iter(load(p, use_cache=False).hosts.values()))
              for p in (GPU_FIXTURE, KINETO_FIXTURE, stepscope_profile)]
    rng = np.random.default_rng(7)
    # Partly overlapping events of wildly different lengths: the layout must stack them.
    n = 3000
    start = 1_000_000 + rng.integers(0, 5_000_000, n)
    dur = (10 ** rng.uniform(0, 6, n)).astype(np.int64)
    dur[::50] = 0
    tables.append(synthetic_table(start, dur, rng.integers(0, 3, n)))
    return tables


def _brute(ix: TraceIndex) -> tuple[np.ndarray, ...]:
    """Every indexed event's row, track, row-in-track, start (relative) and duration."""
    rows = np.flatnonzero(ix.pos_of_row >= 0)
    track, depth, start = ix.where(rows)
    assert np.array_equal(start, ix.table.start_ns[rows] - ix.origin_ns)
    return rows, track, depth, start, ix.table.duration_ns[rows].astype(np.int64)


def test_rows_never_overlap_and_nesting_is_depth(stepscope_profile: Path) -> None:
    for table in _profiles(stepscope_profile):
        ix = build(table)
        rows, track, depth, start, dur = _brute(ix)
        end = start + np.maximum(dur, 1)
        order = np.lexsort((start, depth, track))
        t, d, s, e = track[order], depth[order], start[order], end[order]
        same = (t[1:] == t[:-1]) & (d[1:] == d[:-1])
        assert not np.any(same & (s[1:] < e[:-1])), "two events overlap on one row"
    # stepscope's Trace events nest: train at row 0, its children at row 1.
    ix = build(next(iter(load(stepscope_profile, use_cache=False).hosts.values())))
    rows, track, depth, _, _ = _brute(ix)
    names = np.array([ix.table.names[c] for c in ix.table.name[rows]])
    assert set(depth[names == "train"]) == {0}
    assert set(depth[np.isin(names, ["load_batch", "matmul", EVIL_OP])]) == {1}


def _permuted(table: EventTable, perm: np.ndarray) -> EventTable:
    """``table`` with its events in the order ``perm`` (no stats)."""
    return synthetic_table(table.start_ns[perm], table.duration_ns[perm], table.line[perm])


def test_layout_does_not_depend_on_event_order(stepscope_profile: Path) -> None:
    rng = np.random.default_rng(3)
    for table in _profiles(stepscope_profile)[2:]:
        plain = _permuted(table, np.arange(len(table)))
        perm = rng.permutation(len(table))
        a, b = build(plain), build(_permuted(table, perm))
        ta, da, sa = a.where(np.arange(len(table)))
        tb, db, sb = b.where(np.argsort(perm))  # the same events, found where they went
        assert np.array_equal(ta, tb) and np.array_equal(da, db) and np.array_equal(sa, sb)


def test_events_starting_together_nest_longest_first() -> None:
    # A child listed before its parent, starting on the same nanosecond: the parent (longer)
    # takes row 0 and the child row 1; a sibling after the child shares the child's row.
    start = np.array([100, 100, 100, 150])
    dur = np.array([40, 200, 10, 20])
    ix = build(synthetic_table(start, dur, np.zeros(4, np.int64)))
    _, depth, _ = ix.where(np.arange(4))
    assert depth.tolist() == [1, 0, 2, 1]


def test_overlapping_events_take_the_lowest_free_row() -> None:
    # A [0,100) and B [50,150) overlap without nesting: B goes to row 1. C [60,80) sits
    # inside B (and A, but B started later): below B, row 2. D [120,140) inside B after A
    # ended: row 0 is free but above its parent, so the lowest free row below B, 2 again.
    # E [160,170) is inside nothing: row 0. F [165,300) overlaps E: row 1; G [200,210)
    # inside F once E ended: row 2 (just below F).
    start = np.array([0, 50, 60, 120, 160, 165, 200])
    dur = np.array([100, 100, 20, 20, 10, 135, 10])
    ix = build(synthetic_table(start, dur, np.zeros(7, np.int64)))
    _, depth, _ = ix.where(np.arange(7))
    assert depth.tolist() == [0, 1, 2, 2, 0, 1, 2]


def test_overlapping_rows_never_overlap_and_nested_events_stay_below() -> None:
    # A staircase of 2,000 events per thread on 3 threads, each overlapping the next few
    # without containing them, every one with two children and a grandchild inside it: each
    # event's row must hold nothing it overlaps, and each child sit below its parent.
    rng = np.random.default_rng(11)
    m, threads = 2000, 3
    p_start = np.tile(np.arange(m, dtype=np.int64) * 100, threads) \
        + rng.integers(0, 50, m * threads)
    p_dur = rng.integers(300, 2000, m * threads)
    c1 = p_start + 10
    c2 = p_start + 10 + p_dur // 2
    g = c1 + 5
    start = np.concatenate([p_start, c1, c2, g])
    dur = np.concatenate([p_dur, p_dur // 3, p_dur // 3, p_dur // 10])
    line = np.tile(np.repeat(np.arange(threads), m), 4)
    perm = rng.permutation(len(start))
    ix = build(synthetic_table(start[perm], dur[perm], line[perm]))
    track, depth, rel = ix.where(np.argsort(perm))  # back in the order built above
    end = rel + np.maximum(dur, 1)
    assert int(depth.max()) > 8  # the staircase really does stack
    order = np.lexsort((rel, depth, track))
    t, d, s, e = track[order], depth[order], rel[order], end[order]
    same = (t[1:] == t[:-1]) & (d[1:] == d[:-1])
    assert not np.any(same & (s[1:] < e[:-1]))
    n = m * threads
    parent, child1, child2, grand = (depth[i * n:(i + 1) * n] for i in range(4))
    assert np.all(child1 > parent) and np.all(child2 > parent) and np.all(grand > child1)
    # Rows are used from the top: every row below 0 holds an event overlapping one above.
    rows_per_track = [int(depth[track == tr].max()) + 1 for tr in range(threads)]
    assert [tr.rows for tr in ix.tracks] == rows_per_track


def test_query_matches_brute_force(stepscope_profile: Path) -> None:
    rng = np.random.default_rng(1)
    for table in _profiles(stepscope_profile):
        ix = build(table)
        rows, track, depth, start, dur = _brute(ix)
        end = start + np.maximum(dur, 1)
        windows = [(0, ix.span_ns, 2000), (-50, ix.span_ns + 50, 7)]
        for _ in range(25):
            a, b = sorted(rng.integers(-1000, ix.span_ns + 1000, 2).tolist())
            if rng.random() < 0.5:  # zoomed far in
                b = a + int(rng.integers(1, max(ix.span_ns // 1000, 2)))
            windows.append((a, max(b, a + 1), int(rng.choice([1, 3, 100, 2000, 4000]))))
        for t0, t1, width in windows:
            q = ix.query(t0, t1, width)
            span = t1 - t0
            inside = (start < t1) & (end > t0)
            wide = inside & (dur * width >= span)
            ev = q["events"]
            assert sorted(ev["id"]) == sorted(rows[wide].tolist()), (t0, t1, width)
            got = dict(zip(ev["id"], zip(ev["track"], ev["row"], ev["start"], ev["dur"],
                                         strict=True), strict=True))
            for r, tr, de, st, du in zip(rows[wide], track[wide], depth[wide], start[wide],
                                         dur[wide], strict=True):
                assert got[int(r)] == (tr, de, st, du)
            narrow = inside & ~wide
            agg = q["aggregates"]
            assert sum(agg["count"]) == int(narrow.sum())
            assert sum(agg["covered"]) == int(dur[narrow].sum())
            # Each narrow event lies in a block of its own track and row.
            blocks: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
            for tr, de, s, e, c in zip(agg["track"], agg["row"], agg["start"], agg["end"],
                                       agg["count"], strict=True):
                assert s < e and c > 0
                blocks.setdefault((tr, de), []).append((s, e, c))
            for key, spans in blocks.items():
                mine = narrow & (track == key[0]) & (depth == key[1])
                at = np.maximum(start[mine], t0)
                assert sum(c for _, _, c in spans) == int(mine.sum())
                covered = np.zeros(len(at), bool)
                for s, e, _ in spans:
                    covered |= (at >= s) & (at < e)
                assert covered.all()
            assert set(blocks) == set(zip(track[narrow].tolist(), depth[narrow].tolist(),
                                          strict=True))


@pytest.mark.parametrize("in_place", [True, False])
def test_the_order_by_level_is_by_segment_level_and_start(in_place: bool) -> None:
    """``_by_level`` (the position keys sorted in place, or a stable argsort where they do
    not fit) gives the order of (segment, duration level, start) that a lexsort gives."""
    from stepscope.analysis.trace.trace_index import _by_level

    rng = np.random.default_rng(7)
    bits, m = 40, 50_000
    seg_of = np.sort(rng.integers(0, 300, m))  # the index's order: segments ascending,
    start = np.empty(m, np.int64)  # starts ascending within each, unique
    for s in np.unique(seg_of):
        at = np.flatnonzero(seg_of == s)
        start[at] = np.sort(rng.choice(1 << 30, len(at), replace=False))
    level = rng.integers(0, 40, m).astype(np.int8)
    skey = (seg_of << bits) | start
    lkey, lpos = _by_level(seg_of << bits, level, skey, bits, 300, m, in_place=in_place)
    want = np.lexsort((start, level, seg_of))
    assert np.array_equal(lpos, want) and lpos.dtype == np.int32
    assert np.array_equal(lkey, (((seg_of << 6) | level) << bits | start)[want])
    empty = np.zeros(0, np.int64)
    lkey, lpos = _by_level(empty.copy(), np.zeros(0, np.int8), empty, bits, 0, 0,
                           in_place=in_place)
    assert len(lkey) == len(lpos) == 0


def test_query_is_bounded_by_pixels() -> None:
    n = 200_000
    start = np.arange(n, dtype=np.int64) * 10
    table = synthetic_table(start, np.full(n, 5), np.zeros(n, np.int64))
    q = build(table).query(0, n * 10, 1000)
    assert q["events"]["id"] == []
    assert len(q["aggregates"]["count"]) <= 1000
    assert sum(q["aggregates"]["count"]) == n


def test_bad_queries_are_refused(stepscope_profile: Path) -> None:
    ix = build(next(iter(load(stepscope_profile, use_cache=False).hosts.values())))
    with pytest.raises(TraceQueryError):
        ix.query(0, 100, 0)
    with pytest.raises(TraceQueryError):
        ix.query(100, 100, 10)
    with pytest.raises(TraceQueryError):
        ix.event(-1)
    with pytest.raises(NotFoundError, match="No event"):  # the API's 404
        ix.event(len(ix.table))
    with pytest.raises(TraceQueryError):
        ix.search("")


def test_sections_tracks_flows_and_details_on_the_v100_profile() -> None:
    table = next(iter(load(GPU_FIXTURE, use_cache=False).hosts.values()))
    ix = build(table)
    meta = ix.meta()
    sections = [s["name"] for s in meta["sections"]]
    assert sections[:3] == ["/device:GPU:1", "/device:GPU:4", "/device:GPU:6"]
    assert "Host Threads" in sections
    gpu4 = [ix.tracks[i].name for i in meta["sections"][1]["tracks"]]
    assert gpu4[:2] == ["Steps", "TensorFlow Ops"]
    assert "Stream #134(Compute)" in gpu4
    # Launch flows join a host event to a device event with the same correlation id.
    launches = np.flatnonzero(ix.flow_kind == 0)
    assert len(launches) > 1000
    src, dst = ix.flow_src[launches], ix.flow_dst[launches]
    corr = table.typed["correlation_id"]
    assert np.array_equal(corr[src], corr[dst])
    assert all(table.planes[p].name == "/host:CPU" for p in table.plane[src][:50])
    assert all(table.planes[p].name.startswith("/device:GPU:") for p in table.plane[dst][:50])
    detail = ix.event(int(dst[0]))
    assert detail["stats"]["correlation_id"] == int(corr[dst[0]])
    assert "kernel_details" in detail["stats"] or "memcpy_details" in detail["stats"]
    assert any(f["from"]["id"] == int(src[0]) for f in detail["flows"])
    assert detail["section"].startswith("/device:GPU:")


def test_search_and_selection_match_brute_force(stepscope_profile: Path) -> None:
    table = next(iter(load(stepscope_profile, use_cache=False).hosts.values()))
    ix = build(table)
    found = ix.search("MATMUL")
    names = np.array(table.names)[table.name]
    assert found["total"] == int((names == "matmul").sum()) == 8
    assert found["matches"]["start"] == sorted(found["matches"]["start"])
    track = ix.tracks[found["matches"]["track"][0]]
    assert track.section == "Host Threads"
    assert ix.search(EVIL_OP)["total"] == 8
    assert ix.search("no such op anywhere")["total"] == 0
    # The selection of the whole host thread, summed by name.
    sel = ix.selection(0, ix.span_ns, [track.id])
    by_name = {r["name"]: r for r in sel["rows"]}
    assert by_name["train"]["count"] == 8
    train = table.duration_ns[names == "train"]
    assert by_name["train"]["total_ns"] == int(train.sum())
    assert by_name["train"]["average_ns"] == pytest.approx(train.mean())


def test_counters_are_counter_tracks(tmp_path: Path) -> None:
    import stepscope

    options = stepscope.ProfilerOptions(counter_interval_ms=5)
    with stepscope.Profile(tmp_path, options=options), \
            stepscope.Trace("work", step_num=0, _r=1):
        sum(i for i in range(300_000))
    ix = build(next(iter(load(tmp_path, use_cache=False).hosts.values())))
    counters = [t for t in ix.tracks if t.kind == "counter"]
    assert counters and all(t.section == "Counters" for t in counters)
    q = ix.query(0, ix.span_ns, 500)
    got = {c["track"]: c for c in q["counters"]}
    off = ix.arrays["counter_off"]
    for i, track in enumerate(ix.arrays["counter_track"].tolist()):
        c, t = got[track], next(t for t in counters if t.id == track)
        # The full view: every sample of this track, and only this track's (issue 30: the
        # values ran one past the timestamps into the next track's first sample).
        assert len(c["time"]) == len(c["value"]) == t.events
        assert c["value"] == ix.arrays["counter_value"][off[i]:off[i + 1]].tolist()
        if "CPU (%)" in t.name:
            # A percentage of one core, at most every core's, not the next bytes.
            assert max(c["value"]) <= 100.0 * (os.cpu_count() or 1)
    # A zoomed view agrees with the full view on the samples they share.
    mid = ix.span_ns // 2
    zoom = {c["track"]: c for c in ix.query(mid, ix.span_ns, 500)["counters"]}
    for track, c in zoom.items():
        assert len(c["time"]) == len(c["value"])
        full = dict(zip(got[track]["time"], got[track]["value"], strict=True))
        assert all(full[ts] == v for ts, v in zip(c["time"], c["value"], strict=True))


def test_api_full_view_counters_are_each_tracks_own(tmp_path: Path) -> None:
    # Issue 30, through the web API's window answer (the page's first, full view): each
    # counter track has as many values as timestamps, and only its own samples.
    import stepscope
    from stepscope.model.logdir import list_runs
    from stepscope.web.api import Api

    options = stepscope.ProfilerOptions(counter_interval_ms=5)
    with stepscope.Profile(tmp_path, options=options), \
            stepscope.Trace("work", step_num=0, _r=1):
        sum(i for i in range(300_000))
    api = Api(tmp_path, use_cache=False)
    run = next(iter(list_runs(tmp_path)))
    code, meta = 202, {}
    for _ in range(600):
        code, meta = api.data(run, None, "trace_viewer", {})
        if code == 200 and not meta.get("coarse"):
            break
        time.sleep(0.02)
    assert code == 200
    query = {"run": run, "start_ns": "0", "end_ns": str(meta["span_ns"]), "width": "800"}
    code, window = api.trace("window", query)
    assert code == 200 and window["counters"]
    names = {t["id"]: t["name"] for t in meta["tracks"]}
    for c in window["counters"]:
        assert len(c["time"]) == len(c["value"]) >= 1, names[c["track"]]
        if "CPU (%)" in names[c["track"]]:
            # A percentage of one core, at most every core's, not the next bytes.
            assert max(c["value"]) <= 100.0 * (os.cpu_count() or 1), c


@pytest.mark.parametrize("mapped", [False, True], ids=["read", "mapped"])
def test_index_is_cached_on_disk(mapped: bool, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    # Every entry, however small, comes back mapped; or none, however large, does.
    monkeypatch.setattr(cache, "MAP_FROM", 0 if mapped else 1 << 62)
    table = next(iter(load(GPU_FIXTURE, use_cache=False).hosts.values()))
    built = build(table)
    assert built.skey.flags.writeable
    window = built.query(0, built.span_ns, 800)
    # Built into a private file in the cache directory, column by column, and held mapped
    # from there (whatever MAP_FROM says: that is about reading entries), then written.
    first = index_for(table, GPU_FIXTURE)
    assert not first.skey.flags.writeable
    assert cache._is_mapped(first.skey) and cache._is_mapped(first.lpos)
    assert first.query(0, first.span_ns, 800) == window
    assert first.meta() == built.meta()
    for name, array in built.arrays.items():
        assert array.dtype == first.arrays[name].dtype, name
        assert np.array_equal(array, first.arrays[name]), name
    # Read from its entry: what is held is the entry's, mapped from a large one.
    again = index_for(table, GPU_FIXTURE)
    assert cache._is_mapped(again.skey) == mapped
    assert again.query(0, again.span_ns, 800) == window
    # A damaged file is a miss, rebuilt (and written again).
    (entry,) = (tmp_path / "cache").glob("*.trace_index.*.cache")
    size = entry.stat().st_size
    entry.write_bytes(entry.read_bytes()[:100])
    rebuilt = index_for(table, GPU_FIXTURE)
    assert rebuilt.query(0, rebuilt.span_ns, 800) == window
    assert entry.stat().st_size == size
    # The cache off: built and held.
    assert index_for(table, GPU_FIXTURE, use_cache=False).skey.flags.writeable


@pytest.mark.parametrize("path", [
    GPU_FIXTURE,
    FIXTURES / "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb",
    FIXTURES / "TraceLens/tests/traces/mi300/jax_conv_minimal_08/tw003.xplane.pb",
    None,  # a profile stepscope records (Python tracer and counters: sections XProf lacks)
], ids=["tf-gpu", "tpu", "jax-gpu", "stepscope"])
def test_section_pids_are_xprofs(path: Path | None, stepscope_profile: Path,
                                 tmp_path: Path) -> None:
    if path is None:
        (path,) = stepscope_profile.glob("*.xplane.pb")
    theirs = xprof_pids(path, tmp_path)
    table = next(iter(load(path, use_cache=False).hosts.values()))
    sections = build(table).meta()["sections"]
    ours = {("/host:CPU" if s["name"] == "Host Threads" else s["name"]): s["pid"]
            for s in sections}
    shown = {name: pid for name, pid in ours.items() if name in theirs}
    assert shown == {name: theirs[name] for name in shown}
    # Every device section and the host's threads are XProf processes, with XProf's pid.
    assert set(shown) == {name for name in ours
                          if name.startswith("/device:") or name == "/host:CPU"}
    # Sections XProf does not show get pids of their own, after the host's.
    pids = [s["pid"] for s in sections]
    assert len(set(pids)) == len(pids)
    assert all(pid > 701 for name, pid in ours.items() if name not in theirs)


def test_keys_made_a_block_at_a_time_are_the_same(stepscope_profile: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The index's keys, running sums and positions, made a block of events at a time (here
    blocks of 7 events: many, and a short last one), are those of one block; the rows and
    positions are int32 where they fit."""
    from stepscope.analysis.trace import trace_index as ti

    for table in _profiles(stepscope_profile):
        whole = build(table)
        monkeypatch.setattr(ti, "_KEY_BLOCK", 7)
        blocks = build(table)
        monkeypatch.undo()
        assert blocks.header == whole.header
        for key, array in whole.arrays.items():
            assert blocks.arrays[key].dtype == array.dtype, key
            assert np.array_equal(blocks.arrays[key], array), key
        for key in ("ev_row", "lpos", "pos_of_row"):
            assert whole.arrays[key].dtype == np.int32, key


def test_event_details_find_their_stats_in_any_order() -> None:
    """An event's details list its stats alike whether the stat rows come by event (as a
    decoded file's do: none are sorted) or shuffled (sorted once, by event)."""
    table = next(iter(load(GPU_FIXTURE, use_cache=False).hosts.values()))
    st = table.stats
    assert len(st.event) > 1000 and bool(np.all(st.event[1:] >= st.event[:-1]))
    shuffle = np.random.default_rng(2).permutation(len(st.event))
    shuffled = dataclasses.replace(table, stats=dataclasses.replace(
        st, event=st.event[shuffle], name=st.name[shuffle], kind=st.kind[shuffle],
        value=st.value[shuffle]))
    in_order, out_of_order = build(table), build(shuffled)
    rows = np.unique(st.event)[::97].tolist()
    assert len(rows) > 10
    for row in rows:
        details = in_order.event(row)
        assert details["stats"] and details == out_of_order.event(row)
