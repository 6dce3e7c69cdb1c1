"""Event durations are int32 where every one fits, int64 otherwise: written so by the decoder
(widened once, at the first that does not fit), kept so by the cache, and read by every tool
and the trace viewer with the answers the int64 column gives."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from stepscope.formats import xspace_to_tables as x2t
from stepscope.formats.run_reader import reader_of
from stepscope.formats.xplane_proto import XSpace
from stepscope.model import cache
from stepscope.model.events import EventTable, narrow_durations
from stepscope.model.run_tables import RunTables
from stepscope.run.run import Run
from stepscope.run.tools import TOOLS
from test_xspace_decode_threads import both_ways
from test_xspace_table_decoder import _twin, assert_same_table

from conftest import FIXTURES

INT32_MAX = int(np.iinfo(np.int32).max)
LONG_NS = 5_000_000_000  # 5 s: past int32 nanoseconds (a whole session, a long step)


def test_narrow_durations_keeps_int32_where_every_one_fits() -> None:
    fits = np.array([0, -7, INT32_MAX, np.iinfo(np.int32).min], np.int64)
    narrow = narrow_durations(fits)
    assert narrow.dtype == np.int32 and narrow.tolist() == fits.tolist()  # negatives kept
    for value in (INT32_MAX + 1, np.iinfo(np.int32).min - 1):
        wide = narrow_durations(np.array([1, value], np.int64))
        assert wide.dtype == np.int64 and wide.tolist() == [1, value]
    assert narrow_durations(np.zeros(0, np.int64)).dtype == np.int32
    same = np.array([3], np.int32)
    assert narrow_durations(same) is same


def _space(long_at: list[int], events: int = 3000, planes: int = 2, lines: int = 3) -> bytes:
    """Planes of lines of events (one negative duration in each line); the events at the
    global indices ``long_at`` last LONG_NS."""
    space = XSpace()
    space.hostnames.append("host")
    at = 0
    for p in range(planes):
        plane = space.planes.add(id=p + 1, name=f"/device:GPU:{p}")
        plane.event_metadata[1].name = "op"
        for n in range(lines):
            line = plane.lines.add(id=n, name=f"stream {n}", timestamp_ns=1_000 * (n + 1))
            for i in range(events):
                ps = LONG_NS * 1000 if at in long_at else 1_499 + 1_000 * (i % 50)
                line.events.add(metadata_id=1, offset_ps=i * 10_000,
                                duration_ps=-2_000 if i == 7 else ps)
                at += 1
    return space.SerializeToString()


@pytest.mark.parametrize("long_at", [[], [0], [9_000], [17_999], [3, 16_000]],
                         ids=["none", "first", "middle", "last", "both-halves"])
def test_the_decoder_widens_once_at_the_first_duration_past_int32(
        monkeypatch: pytest.MonkeyPatch, long_at: list[int]) -> None:
    data = _space(long_at)
    table = x2t.from_source(data)
    assert table.duration_ns.dtype == (np.int64 if long_at else np.int32)
    expected = np.array([(0 if i % 3000 == 7 else LONG_NS if i in long_at else
                          (1_499 + 1_000 * (i % 3000 % 50) + 500) // 1000)
                         for i in range(len(table))], np.int64)
    np.testing.assert_array_equal(table.duration_ns, expected)
    assert table.planes[0].stats["stepscope_negative_durations"] == 3
    assert_same_table(table, _twin(data))  # the pure-Python reader gives the same dtype
    # Two halves (each widening on its own, or not) give the one walk's bytes at every cut.
    decoder = both_ways(monkeypatch, data, points=12)
    assert not decoder.errors and decoder.raised is None
    assert len(decoder.cuts - {-1}) >= 4


@pytest.mark.parametrize("ns,dtype", [(INT32_MAX, np.int32), (INT32_MAX + 1, np.int64)])
def test_the_edge_of_int32_matches_the_twin(ns: int, dtype: type) -> None:
    space = XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[1].name = "op"
    line = plane.lines.add(id=1, name="main", timestamp_ns=10)
    for i, ps in enumerate((1_000, ns * 1000 - 499, 2_000)):  # rounds half up to ns
        line.events.add(metadata_id=1, offset_ps=i * 1000, duration_ps=ps)
    data = space.SerializeToString()
    table = x2t.from_source(data)
    assert table.duration_ns.dtype == dtype
    assert table.duration_ns.tolist() == [1, ns, 2]
    assert_same_table(table, _twin(data))


@pytest.mark.parametrize("long_at", [[], [5]], ids=["int32", "int64"])
def test_the_cache_keeps_the_durations_as_they_are(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   long_at: list[int]) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "host.xplane.pb"
    source.write_bytes(_space(long_at, events=200))
    table = x2t.load_xspace(source)
    cache.save_table(source, table)
    back = cache.load_table(source)
    assert back is not None
    assert back.duration_ns.dtype == table.duration_ns.dtype
    assert_same_table(back, table)


def test_a_truncated_file_is_still_one_clear_error(tmp_path: Path) -> None:
    data = _space([100], events=500)
    for cut in (len(data) // 3, len(data) - 5):
        path = tmp_path / f"cut{cut}.xplane.pb"
        path.write_bytes(data[:cut])
        with pytest.raises(Exception) as info:
            x2t.load_xspace(path)
        assert "\n" not in str(info.value) and str(info.value)


def _answers(table: EventTable, path: Path) -> dict[str, str]:
    """Every tool's JSON (default parameters; the trace's window, search and summary over
    everything) for a run of the one table."""
    run = Run(RunTables(run="r", path=path, hosts={"host": table}, sources={"host": path}),
              use_cache=False)
    params: dict[str, dict[str, object]] = {
        "trace_window": {"start_ns": 0, "end_ns": 10**13, "width": 997},
        "trace_summary": {"start_ns": 0, "end_ns": 10**13}, "trace_search": {"q": "a"}}
    out = {}
    for name in TOOLS:
        if name in ("diff", "memory_viewer", "graph_viewer"):
            continue
        try:
            out[name] = run.tool(name, None, **params.get(name, {})).to_json()
        except Exception as err:  # noqa: BLE001 - a tool a profile lacks: the same both ways
            out[name] = f"{type(err).__name__}: {err}"
    return out


@pytest.mark.parametrize("name", [
    "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb",
    "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
], ids=["gpu", "tpu", "kineto"])
def test_every_tool_answers_int32_durations_as_int64_ones(name: str) -> None:
    """Durations close to int32's limit (their sums, products and ends pass it), zero and
    negative ones, as int32 and as int64: every answer the same."""
    path = FIXTURES / name
    table = reader_of(path)(path)
    dur = np.minimum(table.duration_ns, INT32_MAX).astype(np.int64)  # every one fits
    rows = np.arange(len(dur))
    dur[rows % 5 == 1] = INT32_MAX - rows[rows % 5 == 1] % 1000
    dur[rows % 11 == 3] = -3
    dur[rows % 13 == 4] = 0
    wide = dataclasses.replace(table, duration_ns=dur)
    narrow = dataclasses.replace(table, duration_ns=narrow_durations(dur))
    assert narrow.duration_ns.dtype == np.int32
    a, b = _answers(wide, path), _answers(narrow, path)
    assert a.keys() == b.keys()
    for tool in a:
        assert a[tool] == b[tool], tool
    assert json.loads(a["trace_window"])  # the trace viewer answered, with events
    assert not a["trace_window"].startswith(("TypeError", "ValueError"))


def test_a_long_event_reads_back_from_file_and_cache(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A duration past int32 goes through the decoder, the cache and the trace viewer with
    its value."""
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_space([5], events=40, planes=1, lines=1))
    table = x2t.load_xspace(path)
    total = int(np.sum(table.duration_ns))
    assert total > LONG_NS
    for _ in range(2):  # read from the file (and cached), then from the cache
        run = Run.open(path)
        found = json.loads(run.tool("trace_search", None, q="op").to_json())["matches"]
        assert found["dur"] == table.duration_ns.tolist()
        assert found["dur"][5] == LONG_NS and found["dur"][7] == 0
        summary = json.loads(run.tool("trace_summary", None, start_ns=0,
                                      end_ns=10**11).to_json())
        assert summary["rows"][0]["total_ns"] == total
        window = json.loads(run.tool("trace_window", None, start_ns=0, end_ns=10**11,
                                     width=500).to_json())
        assert LONG_NS in window["events"]["dur"]
    back = cache.load_table(path)
    assert back is not None and back.duration_ns.dtype == np.int64
    assert int(back.duration_ns.max()) == LONG_NS


def test_the_trace_structures_read_int32_durations_as_int64_ones() -> None:
    """The compiled passes (track plan, overview order and sums, per-track rows and window
    cells) read 4-byte durations in place: the same structures and windows as from int64."""
    from stepscope.analysis.trace.trace_index import build, plan_tracks
    from stepscope.analysis.trace.trace_overview import TraceOverview
    from stepscope.analysis.trace.track_table import TrackTable, flows_of

    path = FIXTURES / "xprof/demo/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
    table = reader_of(path)(path)
    dur = np.minimum(table.duration_ns, INT32_MAX).astype(np.int64)
    rows = np.arange(len(dur))
    dur[rows % 3 == 1] = INT32_MAX - rows[rows % 3 == 1] % 997  # sums of a block pass 2**31
    dur[rows % 17 == 2] = 0

    def structures(durations: np.ndarray) -> list[object]:
        t = dataclasses.replace(table, duration_ns=durations)
        plan = plan_tracks(t)
        ov = TraceOverview(t, plan)
        every = np.arange(ov.order.n)
        out: list[object] = [plan.span, ov.order.starts(every).tolist(),
                             ov.order.order().tolist(), ov.longest.tolist(),
                             ov.summed_before(np.arange(ov.order.n + 1)).tolist(),
                             json.dumps(ov.query(0, ov.span_ns, 700))]
        tt = TrackTable(t, plan, ov.order, flows_of(t, plan))
        out += [tt.depth.tolist(), tt.block_end.tolist()]
        index = build(t)  # the full index, as the server builds it after the first window
        for k in range(4):
            width = max(tt.span_ns // 10**k, 1)
            for a in (0, tt.span_ns // 3):
                out.append(json.dumps(tt.query(a, a + width, 1500), default=str))
                out.append(json.dumps(index.query(a, a + width, 1500), default=str))
        out.append(json.dumps(index.search("a"), default=str))
        return out

    narrow = narrow_durations(dur)
    assert narrow.dtype == np.int32
    assert structures(narrow) == structures(dur)
