"""The run model's lean columns: chunked row searches, bit-packed category masks, narrow step
codes and the context-link join give what the plain whole-column forms give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stepscope.analysis.run_model import intervals, step_groups
from stepscope.analysis.run_model import steps as steps_mod
from stepscope.analysis.run_model.overview_page import CategoryMasks
from stepscope.formats import xspace_to_tables as x2t
from stepscope.model import events as me
from stepscope.native import compiled

from conftest import FIXTURES
from twins import compiled_only

XPLANE_FIXTURES = sorted(FIXTURES.rglob("*.xplane.pb"))


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_rows_where_is_flatnonzero_in_int32(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(me, "_ROW_CHUNK", chunk)
    rng = np.random.default_rng(1)
    for n in (0, 1, 6, 7, 8, 100):
        mask = rng.random(n) < 0.4
        rows = me.rows_where(mask)
        assert rows.dtype == np.int32
        assert np.array_equal(rows, np.flatnonzero(mask))
    assert np.array_equal(me.rows_where(np.ones(50, bool)), np.arange(50))


def test_category_masks_give_back_each_mask() -> None:
    rng = np.random.default_rng(2)
    n = 1001
    kept = {f"c{i}": rng.random(n) < 0.3 for i in range(14)}  # two bytes' worth, and more
    kept["none"] = np.zeros(n, bool)
    kept["all"] = np.ones(n, bool)
    masks = CategoryMasks(n)
    for name, mask in kept.items():
        if name == "none":
            masks.add_none(name)  # kept without a mask made
        else:
            masks.add(name, mask)
    assert list(masks) == list(kept) and len(masks) == len(kept)
    for name, mask in kept.items():
        got = masks[name]
        assert got.dtype == np.bool_ and np.array_equal(got, mask)
        assert np.array_equal(~got, ~mask)  # every byte 0 or 1: negation is right
        assert int(got.sum()) == int(mask.sum())
    with pytest.raises(ValueError):
        masks.add("c0", kept["c0"])
    with pytest.raises(ValueError):
        masks.add_none("none")
    with pytest.raises(KeyError):
        masks["absent"]


def _nested(rng: np.random.Generator, n: int) -> tuple[Any, Any, Any]:
    """Intervals on a few groups, nested and overlapping, zero-length ones included."""
    group = rng.integers(0, 4, n).astype(np.int16)
    start = rng.integers(0, 1000, n).astype(np.int64)
    length = rng.integers(0, 200, n).astype(np.int64)
    length[rng.random(n) < 0.15] = 0
    return group, start, start + length


@pytest.mark.parametrize("seed", range(5))
def test_parents_by_chunks_match_one_pass(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    group, start, end = _nested(np.random.default_rng(seed), 3000)
    whole, whole_self = intervals.parents(group, start, end), intervals.self_times(
        group, start, end)
    monkeypatch.setattr(intervals, "_CHUNK", 37)
    assert np.array_equal(intervals.parents(group, start, end), whole)
    assert np.array_equal(intervals.self_times(group, start, end), whole_self)


def test_parents_of_a_known_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intervals, "_CHUNK", 2)
    group = np.zeros(6, np.int32)
    start = np.array([0, 1, 2, 5, 5, 20], np.int64)
    end = np.array([10, 4, 3, 5, 9, 30], np.int64)
    # 1 in 0, 2 in 1, 4 in 0, the instant 3 at 4's start inside 4 (the longer opens
    # first), 5 alone.
    assert intervals.parents(group, start, end).tolist() == [-1, 0, 1, 4, 0, -1]


class _Steps:
    def __init__(self, start: Any, end: Any) -> None:
        self.start_ns, self.end_ns = start, end

    def __len__(self) -> int:
        return len(self.start_ns)


@pytest.mark.parametrize("n_steps", [0, 3, 40_000])
def test_step_of_each_start_by_chunks(monkeypatch: pytest.MonkeyPatch, n_steps: int) -> None:
    monkeypatch.setattr(steps_mod, "_CHUNK", 11)
    rng = np.random.default_rng(3)
    lo = np.sort(rng.choice(10 * max(n_steps, 1), n_steps, replace=False)).astype(np.int64) * 10
    hi = lo + rng.integers(1, 15, n_steps)
    starts = rng.integers(-5, int(hi.max(initial=10)) + 5, 500).astype(np.int64)
    got = steps_mod._by_time(starts, _Steps(lo, hi))  # type: ignore[arg-type]
    index = np.searchsorted(lo, starts, side="right") - 1
    inside = (index >= 0) & (starts < hi[np.maximum(index, 0)]) if n_steps else index >= 0
    assert got.dtype == (np.int16 if n_steps < 32_767 else np.int32)
    assert got.tolist() == np.where(inside, index, -1).tolist()


def _keys_through_a_column(table: Any, type_stat: str, id_stat: str) -> tuple[Any, Any, Any]:
    """The join as it was: through a column of every event, the last type stat winning."""
    t_rows, t_val = table.int_stat(type_stat)
    i_rows, i_val = table.int_stat(id_stat)
    by_type = np.full(len(table), np.iinfo(np.int64).min, dtype=np.int64)
    by_type[t_rows] = t_val
    both = by_type[i_rows] != np.iinfo(np.int64).min
    rows = i_rows[both]
    return rows, by_type[rows], i_val[both]


@pytest.mark.parametrize("path", XPLANE_FIXTURES, ids=lambda p: p.name)
def test_context_keys_match_the_column_join(path: Path) -> None:
    table = x2t.load_xspace(path)
    if not step_groups.has_links(table):
        pytest.skip("no producer/consumer stats")
    for type_stat, id_stat in ((step_groups.PRODUCER_TYPE, step_groups.PRODUCER_ID),
                               (step_groups.CONSUMER_TYPE, step_groups.CONSUMER_ID),
                               (step_groups.ITER_NUM, step_groups.STEP_ID)):
        got = step_groups._keys(table, type_stat, id_stat)
        want = _keys_through_a_column(table, type_stat, id_stat)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)


def _stack_parents(group: Any, start: Any, end: Any) -> list[int]:
    """Direct parents of properly nested intervals (none of zero length), one group at a
    time with a stack."""
    out = [-1] * len(start)
    for g in set(group.tolist()):
        rows = [i for i in range(len(start)) if group[i] == g]
        rows.sort(key=lambda i: (int(start[i]), -int(end[i]), i))
        stack: list[int] = []
        for i in rows:
            while stack and int(end[stack[-1]]) <= int(start[i]):  # closed before i opens
                stack.pop()
            out[i] = stack[-1] if stack else -1
            stack.append(i)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_parents_of_nested_intervals_match_a_stack(seed: int) -> None:
    rng = np.random.default_rng(10 + seed)
    starts: list[int] = []
    ends: list[int] = []
    groups: list[int] = []

    def nest(lo: int, hi: int, depth: int, g: int) -> None:
        at = lo
        while at < hi and depth < 6:
            a = int(rng.integers(at, hi))
            b = int(rng.integers(a + 1, hi + 1))
            starts.append(a)
            ends.append(b)
            groups.append(g)
            nest(a, b, depth + 1, g)
            at = b
    for g in range(3):
        nest(0, 10_000, 0, g)
    group = np.array(groups, np.int16)
    start, end = np.array(starts, np.int64), np.array(ends, np.int64)
    assert intervals.parents(group, start, end).tolist() == _stack_parents(group, start, end)


def _random_intervals(rng: np.random.Generator, n: int) -> tuple[Any, Any, Any]:
    """Nested, partly overlapping, zero-length and negative intervals, ties, a few groups of
    an integer width drawn at random, times near int64's ends or not."""
    dtype = [np.int8, np.int16, np.int32, np.int64][int(rng.integers(0, 4))]
    group = rng.integers(0, int(rng.integers(1, 5)), n).astype(dtype)
    span = int(rng.choice([4, 30, 2000]))
    base = int(rng.choice([0, 0, 2**62, -2**62]))
    start = base + rng.integers(0, span, n).astype(np.int64)
    length = rng.integers(-3, span // 2 + 2, n).astype(np.int64)
    length[rng.random(n) < 0.2] = 0
    return group, start, start + length


def _both_twins(monkeypatch: pytest.MonkeyPatch, group: Any, start: Any, end: Any
                ) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """(parents, self times) by the compiled walk, then by the NumPy twin."""
    ours = intervals.parents(group, start, end), intervals.self_times(group, start, end)
    with monkeypatch.context() as m:
        m.setenv("STEPSCOPE_PURE_PYTHON", "1")
        twin = intervals.parents(group, start, end), intervals.self_times(group, start, end)
    return ours, twin


@compiled_only("_intervals")
@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_nesting_is_its_numpy_twin(monkeypatch: pytest.MonkeyPatch,
                                               seed: int) -> None:
    # Random intervals (_random_intervals), in nesting order or not.
    rng = np.random.default_rng(1000 + seed)
    for _ in range(60):
        group, start, end = _random_intervals(rng, int(rng.integers(0, 80)))
        if rng.random() < 0.5:
            order = np.lexsort((-np.maximum(end, start), start, group))
            group, start, end = group[order], start[order], end[order]
        ours, twin = _both_twins(monkeypatch, group, start, end)
        assert ours[0].dtype == twin[0].dtype == np.int64
        assert np.array_equal(ours[0], twin[0]) and np.array_equal(ours[1], twin[1])
    # Deep nesting: the heap and the levels grow.
    depth = 5000
    start = np.arange(depth, dtype=np.int64)
    end = 2 * depth - start
    ours, twin = _both_twins(monkeypatch, np.zeros(depth, np.int16), start, end)
    assert ours[0].tolist() == [-1, *range(depth - 1)] == twin[0].tolist()
    assert np.array_equal(ours[1], twin[1])


@compiled_only("_intervals")
def test_the_compiled_nesting_refuses_bad_columns() -> None:
    module = compiled("stepscope.analysis.run_model._intervals")
    assert module is not None
    z = np.zeros(3, np.int64)
    with pytest.raises(ValueError):
        module.nest(z, z, np.zeros(2, np.int64), None, None, None)
    with pytest.raises(ValueError):
        module.nest(z, z, z, np.array([0, 1, 7], np.int64), np.empty(3, np.int64), None)
    with pytest.raises(TypeError):
        module.nest(z, z.astype(np.int32), z, None, None, None)
    with pytest.raises(TypeError):
        module.nest(z, z, z, None, np.empty(3, np.float64), None)
    assert module.nest(z, z, z, None, None, None) is True
    assert module.nest(np.array([1, 0], np.int8), z[:2], z[:2], None, None, None) is False


@compiled_only("_intervals")
@pytest.mark.parametrize("seed", range(20))
def test_the_compiled_union_is_its_numpy_twin(seed: int) -> None:
    # Random intervals (_random_intervals): the same segments, in the same order and dtypes.
    rng = np.random.default_rng(2000 + seed)
    for _ in range(80):
        group, start, end = _random_intervals(rng, int(rng.integers(0, 100)))
        ours, twin = intervals.merged(group, start, end), intervals._merged_numpy(group, start,
                                                                                  end)
        for a, b in zip(ours, twin, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    module = compiled("stepscope.analysis.run_model._intervals")
    assert module is not None
    z = np.zeros(2, np.int64)
    with pytest.raises(ValueError):  # a position out of range
        module.merge(z, z, z + 1, np.array([0, 5], np.int64), None, None, None)
    with pytest.raises(ValueError):  # more segments than the columns hold
        module.merge(np.array([0, 1], np.int64), z, z + 1, np.array([0, 1], np.int64),
                     np.empty(1, np.int64), np.empty(1, np.int64), np.empty(1, np.int64))


@pytest.mark.parametrize("path", XPLANE_FIXTURES, ids=lambda p: p.name)
def test_step_groups_without_an_order_are_those_with_one(path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A decoded file's rows are in (line, start) order: the grouping then makes no order of
    # its own. Made anyway (as for a table that is not), it groups every event the same, and
    # so it does with the descendants made a few at a time.
    from stepscope.analysis.run_model.steps import find_steps
    table = x2t.load_xspace(path)
    steps = find_steps(table)
    if not step_groups.has_links(table) or not len(steps):
        pytest.skip("no producer/consumer stats or no steps")
    assert step_groups._in_line_start_order(table)
    seed = steps.event_step.copy()
    ours = step_groups.grouped_step(table, seed.copy())
    monkeypatch.setattr(step_groups, "_in_line_start_order", lambda t: False)
    assert np.array_equal(step_groups.grouped_step(table, seed.copy()), ours)
    # Descendants made a few at a time (roots' events split across parts): the same.
    monkeypatch.setattr(step_groups, "_DESCENDANTS_CHUNK", 3)
    assert np.array_equal(step_groups.grouped_step(table, seed.copy()), ours)
    assert (ours >= 0).sum() > (seed >= 0).sum()


def test_line_start_order_is_checked_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace
    monkeypatch.setattr(step_groups, "_ORDER_CHUNK", 3)
    line = np.array([0, 0, 0, 1, 1, 1, 1, 2], np.int16)
    start = np.array([1, 2, 2, 0, 5, 6, 9, 3], np.int64)
    ordered = SimpleNamespace(line=line, start_ns=start)
    assert step_groups._in_line_start_order(ordered)
    for at in range(1, len(line)):  # a step back anywhere, a chunk's edge included
        swapped = start.copy()
        swapped[at - 1], swapped[at] = start[at], start[at - 1]
        want = bool(np.array_equal(np.lexsort((swapped, line)), np.arange(len(line))))
        assert step_groups._in_line_start_order(SimpleNamespace(line=line,
                                                                start_ns=swapped)) == want
    assert not step_groups._in_line_start_order(SimpleNamespace(line=line[::-1].copy(),
                                                                start_ns=start))
    assert step_groups._in_line_start_order(SimpleNamespace(line=line[:1], start_ns=start[:1]))


def test_a_host_only_profile_s_masks_skip_the_device_columns(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without device work (stepscope's own capture of a loop) the device's categories are
    kept empty, without their columns: every mask is what the path that makes them gives."""
    from stepscope.analysis.run_model import overview_page as op
    from stepscope.analysis.run_model.framework_op_stats import classify
    from stepscope.formats.run_reader import load

    from workloads import make_stepscope_run

    path = make_stepscope_run(tmp_path / "logs")
    table = next(iter(load(path, use_cache=False).hosts.values()))
    steps, events = steps_mod.find_steps(table), classify(table)
    lean = op._category_masks(table, steps, events)
    monkeypatch.setattr(op, "_any_device_work", lambda mask: True)
    full = op._category_masks(table, steps, events)
    assert list(lean) == list(full)
    for name in full:
        assert np.array_equal(lean[name], full[name]), name
    assert not lean["device_compute"].any() and lean["host_compute"].any()


@pytest.mark.parametrize("path", [*XPLANE_FIXTURES[:4], Path(__file__).parent / "data" / "h200"
                                  / "torch_bridge.pt.trace.json.gz"], ids=lambda p: p.name)
def test_a_host_s_json_made_a_part_at_a_time_is_the_whole_dict_s(path: Path) -> None:
    import json

    from stepscope.analysis.run_model import build_host, host_json, host_to_dict
    from stepscope.formats.run_reader import load

    name, table = next(iter(load(path, use_cache=False).hosts.items()))
    model = build_host(name, table)
    assert host_json(model) == json.dumps(host_to_dict(model), separators=(",", ":"))
