"""The trace viewer's cached preview: on real profiles, the same tool data as the coarse
overview and per track the same events counted over the whole trace; kept in and read from
the cache; and a fresh server on a warm cache answering the trace viewer from it before the
host's table is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stepscope.analysis.trace.trace_overview import TraceOverview
from stepscope.analysis.trace.trace_preview import PreviewTooCoarse, TracePreview
from stepscope.model.events import EventTable
from stepscope.run.storage import cached_preview, save_preview
from test_trace_index import _profiles
from test_trace_overview import _overviews
from waiting import final_api, until

from workloads import make_stepscope_run


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[EventTable]:
    return _profiles(make_stepscope_run(tmp_path_factory.mktemp("trace_preview")))


def _per_track(answer: dict[str, Any]) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    agg = answer["aggregates"]
    for t, n, cov in zip(agg["track"], agg["count"], agg["covered"], strict=True):
        a, b = out.get(t, (0, 0))
        out[t] = (a + n, b + cov)
    return out


def test_preview_counts_what_the_overview_counts(tables: list[EventTable]) -> None:
    for overview in (o for t in tables for o in _overviews(t)):
        preview = TracePreview.of(overview)
        assert preview.meta() == overview.meta()
        span = overview.span_ns
        for start, end, width in ((0, span + 1, 1000), (-span // 2, span + span // 2, 2800),
                                  (0, span + 1, 1)):
            if (end - start) // width < preview.bin_ns:
                continue
            got, want = preview.query(start, end, width), overview.query(start, end, width)
            assert got["coarse"] and got["counters"] == want["counters"]
            assert _per_track(got) == _per_track(want)
            assert sum(got["aggregates"]["count"]) == overview.events
        with pytest.raises(PreviewTooCoarse):
            preview.query(0, preview.bin_ns, 2)


def test_preview_round_trips_through_the_cache(tables: list[EventTable], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "host.xplane.pb"
    source.write_bytes(b"x")
    assert cached_preview(source) is None
    preview = TracePreview.of(TraceOverview(tables[0]))
    save_preview(source, preview)
    back = cached_preview(source)
    assert back is not None and back.meta() == preview.meta()
    span = preview.span_ns
    assert back.query(0, span + 1, 500) == preview.query(0, span + 1, 500)
    source.write_bytes(b"changed")  # a changed source never sees the old entry
    assert cached_preview(source) is None


def test_a_second_server_answers_from_the_preview(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  request: pytest.FixtureRequest) -> None:
    """A profile opened before: a fresh server on the same cache answers the trace viewer's
    tool data and full window from the preview while the host's table is still unread."""
    from stepscope.model.logdir import list_runs
    from stepscope.web import trace
    from stepscope.web.api import Api

    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    make_stepscope_run(tmp_path / "logs")
    run = next(iter(list_runs(tmp_path / "logs")))

    def full(api: Api) -> dict[str, Any]:
        meta: dict[str, Any] = final_api(lambda: api.data(run, None, "trace_viewer", {}),
                                         "the index")[1]
        return meta

    first = full(Api(tmp_path / "logs"))
    gate = request.getfixturevalue("table_gate")  # gated only from here: the first read ran
    monkeypatch.setattr(trace, "WAIT_EVENTS", 10)  # every trace counts as large
    api = Api(tmp_path / "logs")
    # The table cannot load (gated): the first 200 is the cached preview's coarse answer.
    code, meta = until(lambda: (lambda a: a if a[0] == 200 else None)(
        api.data(run, None, "trace_viewer", {})), "the preview", 0.02)
    assert code == 200 and meta["coarse"] and meta["events"] == first["events"]
    query = {"run": run, "start_ns": "0", "end_ns": str(meta["span_ns"]), "width": "300"}
    code, window = api.trace("window", query)
    assert code == 200 and window["coarse"]
    assert sum(window["aggregates"]["count"]) == meta["events"]
    tiny = {**query, "end_ns": "3"}
    assert api.trace("window", tiny)[0] == 202  # finer than the preview: wait for the index
    gate.set()
    assert full(api) == first
