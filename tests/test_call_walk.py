"""The Python tracer's call tree and per-step Python time by a walk of the calls a block at a
time (``call_walk``) equal those of the whole-column nesting, on real tracer captures (calls
nested across many blocks, recursion, generators, threads), for any block size and window."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.run_model import call_walk
from stepscope.analysis.run_model import python_views as pv
from stepscope.analysis.run_model.steps import find_steps
from stepscope.formats.run_reader import load
from stepscope.model.events import rows_where
from test_python_views import KNOWN_COSTS, THREADS, _run


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Tables of two real tracer runs: steps of nested, recursive and generator calls, and
    three threads."""
    known = _run(tmp_path_factory.mktemp("known"), KNOWN_COSTS, 1, 0, 2_000, 8)
    threads = _run(tmp_path_factory.mktemp("threads"), THREADS, 1, 0, 2_000)
    return [next(iter(load(path, use_cache=False).hosts.values())) for path in (known, threads)]


def _tracer_rows(table: Any) -> Any:
    plane = table.plane_index(pv.SOURCES[pv.TRACER])
    return rows_where((table.line_plane == plane)[table.line])


def _whole(monkeypatch: pytest.MonkeyPatch, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` by the whole-column nesting (the walk refused)."""
    with monkeypatch.context() as m:
        m.setattr(call_walk, "walkable", lambda *a: False)
        return fn(*args)


def _same_tree(a: Any, b: Any) -> None:
    assert a[0].to_dict() == b[0].to_dict()
    assert a[1] == b[1] and a[2] == b[2]


@pytest.mark.parametrize("block", [1, 7, 500, call_walk.WALK_BLOCK])
def test_walked_tree_and_steps_equal_the_whole_nesting(
        captures: list[Any], block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_walk, "walk", functools.partial(call_walk.walk, block=block))
    for table in captures:
        rows = _tracer_rows(table)
        assert len(rows) > 200 and call_walk.walkable(table, rows)
        t0 = int(table.start_ns[rows].min())
        t1 = int((table.start_ns[rows] + table.duration_ns[rows]).max()) + 1
        thirds = [t0 + (t1 - t0) * i // 3 for i in range(4)]
        for lo, hi in ((t0, t1), (thirds[1], thirds[2]), (thirds[0], thirds[1])):
            walked = pv._tracer_tree(table, rows, lo, hi)
            _same_tree(walked, _whole(monkeypatch, pv._tracer_tree, table, rows, lo, hi))
        steps = find_steps(table)
        summary = pv.python_summary(table, steps)
        assert summary == _whole(monkeypatch, pv.python_summary, table, steps)
    # The known-costs run has steps, and Python time in each.
    summary = pv.python_summary(captures[0], find_steps(captures[0]))
    assert summary is not None and len(summary["step_num"]) == 8
    assert all(ns > 0 for ns in summary["step_python_ns"])


def test_blocks_carry_the_open_calls(captures: list[Any]) -> None:
    """Small blocks: the calls still open after a block (ending after its last start) are
    the next block's first items, and every call is one block's own exactly once."""
    table = captures[0]
    rows = _tracer_rows(table)
    t0, t1 = int(table.start_ns[rows].min()), int(table.start_ns[rows].max()) + 10**12
    own: list[int] = []
    deepest = 0
    before = None
    for block in call_walk.walk(table, rows, t0, t1, block=5):
        own += block.rows[block.carried:].tolist()
        deepest = max(deepest, block.carried)
        if before is not None and block.line == before.line:
            assert block.rows[:block.carried].tolist() == before.rows[before.carry].tolist()
            assert (before.end[before.carry] > before.start[-1]).all()
        before = block
    assert sorted(own) == sorted(rows.tolist())
    assert deepest >= 3  # steps, their calls and deeper calls stay open across blocks


def test_rows_that_cannot_be_walked(captures: list[Any]) -> None:
    table = captures[1]  # three threads
    rows = _tracer_rows(table)
    assert call_walk.walkable(table, rows)
    assert not call_walk.walkable(table, rows[::-1].copy())  # starts go back
    lines = table.line[rows]
    first, second = np.flatnonzero(lines == lines[0]), np.flatnonzero(lines != lines[0])
    mixed = np.concatenate([rows[first[:10]], rows[second[:10]], rows[first[10:20]]])
    assert not call_walk.walkable(table, mixed)  # a line's rows come back after another's
    assert call_walk.walkable(table, rows[:0])


def test_a_tree_of_unwalkable_rows_is_the_whole_nestings(captures: list[Any]) -> None:
    """Rows out of start order fall back to the whole-column nesting: same answer as in
    order."""
    table = captures[1]
    rows = _tracer_rows(table)
    t0, t1 = int(table.start_ns[rows].min()), int(table.start_ns[rows].max()) + 10**12
    shuffled = np.random.default_rng(0).permutation(rows).astype(rows.dtype)
    ordered = pv._tracer_tree(table, rows, t0, t1)
    mixed = pv._tracer_tree(table, shuffled, t0, t1)
    assert ordered[0].to_dict() == mixed[0].to_dict()
    assert sorted(zip(*ordered[1].values(), strict=True)) == \
        sorted(zip(*mixed[1].values(), strict=True))



def test_empty_and_out_of_window_rows(captures: list[Any]) -> None:
    """No rows, or a window no call overlaps: no block with calls, an empty tree."""
    table = captures[0]
    rows = _tracer_rows(table)
    assert list(call_walk.walk(table, rows[:0], 0, 10)) == []
    end = int((table.start_ns[rows] + table.duration_ns[rows]).max())
    blocks = list(call_walk.walk(table, rows, end + 10, end + 20))
    assert all(len(b.rows) == 0 for b in blocks)
    tree, threads, n, _ = pv._tracer_tree(table, rows, end + 10, end + 20)
    assert len(tree) == 0 and n == 0 and threads["count"] == []
