"""Which host events belong to a step by causality, as TensorFlow's event grouping has it.

XProf counts a host event towards a step only when the event is *grouped* into that step:
nested under the step's marker on its thread, or reached from there through a
producer → consumer context link (the ``_pt``/``_p`` stats of the producer matching the
``_ct``/``_c`` stats of the consumer: a ``tf.function`` call and the executor threads that
run its ops; and, without a context stat, the executor and the ``IteratorGetNext`` op it
runs on tf.data's thread, by the executor's step id and iteration), or nested under such a
consumer on its own thread. A thread pool's
``ThreadpoolListener::StartRegion`` (the consumer of the scheduling
``ThreadpoolListener::Record``) is grouped, but it lasts no time, so nothing on its thread
nests under it: as in XProf, the pool's work (the XLA CPU client's thunks) is not the step's
(the zero-length start itself still counts, see ``overview_page.instant_ends``). Work on
other threads that nothing links to the step (a ``tf.data`` background thread filling a
prefetch buffer) is not the step's, even when it runs at the same time.

Grouping needs the context stats; profiles without them (Kineto traces, stepscope's own
traces) have ``has_links`` false and callers keep their time-based grouping.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model.steps import StepCodes
from stepscope.model.events import EventTable, codes_of, distinct, rows_where
from stepscope.model.stat_kinds import KIND_INT64, KIND_UINT64

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
Keys = tuple[I32, NDArray[np.signedinteger[Any]], I64]  # links: (event rows, type, id)

PRODUCER_TYPE, PRODUCER_ID = "_pt", "_p"
CONSUMER_TYPE, CONSUMER_ID = "_ct", "_c"
_MAX_ROUNDS = 16  # chains of links are short (call → executor → nested call)
# TensorFlow's executor reaches the ``IteratorGetNext`` op it runs on tf.data's own thread
# through the executor's step id (the ``id`` stat) and loop iteration, not a context stat.
EXECUTOR = "ExecutorState::Process"
GET_NEXT_OPS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
STEP_ID, ITER_NUM = "id", "iter_num"
_EXECUTOR_LINK = -1  # the context type given to those links (TensorFlow's types are >= 0)


def has_links(table: EventTable) -> bool:
    """Whether ``table`` carries producer/consumer context stats."""
    names = table.stats.stat_names
    return all(s in names for s in (PRODUCER_TYPE, PRODUCER_ID, CONSUMER_TYPE, CONSUMER_ID))


def _int_stat(table: EventTable, stat: str) -> tuple[I32, I64]:
    """``table.int_stat(stat)`` with the event rows as the stat table keeps them (int32),
    not widened to int64: a link's rows are held through the grouping."""
    st = table.stats
    try:
        code = st.stat_names.index(stat)
    except ValueError:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    rows = rows_where(st.name == code)
    kind = st.kind[rows]  # only the stat's own rows: far fewer than every stat's
    rows = rows[(kind == KIND_INT64) | (kind == KIND_UINT64)]
    return np.asarray(st.event[rows], np.int32), np.asarray(st.value[rows], np.int64)


def _narrow(values: I64) -> I32 | I64:
    """``values`` as int32 where every one fits (a context's type: a few small numbers)."""
    if len(values) and int(values.min()) >= _INT32.min and int(values.max()) <= _INT32.max:
        return values.astype(np.int32)
    return values


_INT32 = np.iinfo(np.int32)


def _keys(table: EventTable, type_stat: str, id_stat: str) -> Keys:
    """Events carrying both stats: (rows, context type, context id); the rows int32, the
    types too where they fit (codes are made of them, whatever their width)."""
    t_rows, wide = _int_stat(table, type_stat)
    t_val = _narrow(wide)
    del wide
    i_rows, i_val = _int_stat(table, id_stat)
    # Joined by a search over the type stat's rows (the last one where an event has two),
    # not through a column of every event (8 B an event). The stat table lists stats by event,
    # so the rows come ascending: sorted only where they do not.
    if bool(np.any(t_rows[1:] < t_rows[:-1])):
        order = np.argsort(t_rows, kind="stable")
        t_rows, t_val = t_rows[order], t_val[order]
        del order
    at = np.searchsorted(t_rows, i_rows, side="right")
    at -= 1  # (in place: no second int64 column)
    both = at >= 0
    if both.all():  # every search found a row before it: no copies of the rows to compare
        both = t_rows[at] == i_rows
    else:
        both[both] = t_rows[at[both]] == i_rows[both]
    if both.all():  # (the usual case: every event with one has both) no copies of the rows
        return i_rows, t_val[at], i_val
    return i_rows[both], t_val[at[both]], i_val[both]


def _joined(first: Keys, second: Keys) -> Keys:
    """The links of ``first`` then ``second``, column by column, each column of ``first`` let
    go once joined (not all held beside their copies); ``first`` as it is where ``second``
    is empty."""
    if not len(second[0]):
        return first
    columns: list[Any] = list(first)
    del first
    for i, more in enumerate(second):
        columns[i] = np.concatenate([columns[i], more])
    return columns[0], columns[1], columns[2]


def _executor_keys(table: EventTable) -> tuple[Keys, Keys]:
    """Executor → ``IteratorGetNext`` links as (rows, type, id) of producers and consumers."""
    # (int32 rows and types, as ``_keys`` gives them: joined with those, nothing is widened)
    none = (np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int64))
    parent = table.name_code(EXECUTOR)
    children = [c for c in (table.name_code(n) for n in GET_NEXT_OPS) if c is not None]
    if parent is None or not children or STEP_ID not in table.stats.stat_names \
            or ITER_NUM not in table.stats.stat_names:
        return none, none
    rows, step_id, iter_num = _keys(table, ITER_NUM, STEP_ID)
    is_parent = table.name[rows] == parent
    is_child = np.isin(table.name[rows], children)
    keep = is_parent | is_child
    rows, step_id, iter_num, is_parent = rows[keep], step_id[keep], iter_num[keep], is_parent[keep]
    if len(rows) == 0:
        return none, none
    # One key per (step id, iteration) pair (only equal pairs' keys need be equal): sorted
    # distinct values and searches, not a sort of rows of two (a fifth of a second here).
    key = codes_of(step_id)[1]
    iterations, iteration = codes_of(iter_num)
    key *= np.int64(len(iterations))
    key += iteration
    del iteration
    key = codes_of(key)[1]
    kind = np.full(len(rows), _EXECUTOR_LINK, dtype=np.int32)
    return ((rows[is_parent], kind[is_parent], key[is_parent]),
            (rows[~is_parent], kind[~is_parent], key[~is_parent]))


_INDEX_CHUNK = 1 << 18  # values _index_in searches at a time (its int64 answers: 2 MB)


def _index_in(values: NDArray[np.integer[Any]], found: NDArray[np.integer[Any]]) -> I32:
    """Each value's index among ``found`` (the distinct values, ascending: ``codes_of``'s
    codes) as int32, searched a chunk at a time: not int64 indices of every value."""
    out = np.empty(len(values), dtype=np.int32)
    for at in range(0, len(values), _INDEX_CHUNK):
        out[at:at + _INDEX_CHUNK] = np.searchsorted(found, values[at:at + _INDEX_CHUNK])
    return out


_ORDER_CHUNK = 1 << 20  # events a time in _in_line_start_order: its flags stay ~1 MB


def _in_line_start_order(table: EventTable) -> bool:
    """Whether the table's rows are in (line, start) order (``lexsort`` would keep them)."""
    line, start = table.line, table.start_ns
    for i in range(0, max(len(line) - 1, 0), _ORDER_CHUNK):
        a, s = line[i:i + _ORDER_CHUNK + 1], start[i:i + _ORDER_CHUNK + 1]
        if not bool(np.all((a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (s[1:] >= s[:-1])))):
            return False
    return True


_DESCENDANTS_CHUNK = 1 << 20  # descendants made at a time (each one's root and row: 16 B)


def _spans(table: EventTable, order: I64 | None, line_start: I64,
           roots: NDArray[np.integer[Any]]) -> tuple[I64, I64]:
    """Per root, the stretch [lo, hi) of the (line, start) order holding the events nested
    under it on its own line. ``order``: that order, None where the table's rows are in it."""
    line = table.line[roots].astype(np.int64)
    starts = table.start_ns if order is None else table.start_ns[order]
    lo_line = line_start[line]
    # Within the line's stretch of ``order`` (sorted by start), the events starting inside
    # the root's span; events on one thread nest, so those are its descendants.
    lo = lo_line + _search(starts, line_start, line, table.start_ns[roots], "left")
    end = table.start_ns[roots] + table.duration_ns[roots]  # the roots' only: no column
    hi = lo_line + _search(starts, line_start, line, end, "left")
    return lo, np.maximum(hi, lo)


def _descendants(order: I64 | None, lo: I64, hi: I64) -> Iterator[tuple[I64, I64]]:
    """The events nested under roots (their stretches ``lo``, ``hi``: see ``_spans``), as
    (root index, row) pairs, in parts of about ``_DESCENDANTS_CHUNK``, roots in order (a
    root's own events in one part): not a root and a row of every descendant at once."""
    count = hi - lo
    ends = np.cumsum(count)
    at = 0
    while at < len(lo):
        # Roots up to the one that passes the chunk's size (at least one root a part).
        stop = max(int(np.searchsorted(ends, (ends[at - 1] if at else 0) + _DESCENDANTS_CHUNK,
                                       side="right")), at + 1)
        part = count[at:stop]
        total = int(part.sum())
        if total:
            owner = np.repeat(np.arange(at, stop, dtype=np.int64), part)
            first = np.repeat(lo[at:stop] - np.concatenate([[0], np.cumsum(part)[:-1]]), part)
            pos = first + np.arange(total, dtype=np.int64)
            del first
            yield owner, pos if order is None else order[pos]
        at = stop


def _search(starts: I64, line_start: I64, line: I64, value: I64, side: str) -> I64:
    """searchsorted of each ``value`` within its line's slice of ``starts`` (``line_start``
    bounds each line's; the answer is offset from the slice's start). A search a line, the
    lines found by np.unique: not a set of Python (lo, hi) pairs made from a list of every
    value's bounds (tens of MB over hundreds of thousands of roots)."""
    out = np.empty(len(value), dtype=np.int64)
    for ln in np.unique(line).tolist():
        pick = line == ln
        lo, hi = int(line_start[ln]), int(line_start[ln + 1])
        out[pick] = np.searchsorted(starts[lo:hi], value[pick],
                                    side="left" if side == "left" else "right")
    return out


def grouped_step(table: EventTable, seed_step: StepCodes) -> StepCodes:
    """Per event: the step it is grouped into (-1: none), starting from ``seed_step`` (the
    step of the events on the steps' own threads) and following context links and nesting.
    ``seed_step`` (int16 or int32, as the steps' event column) is filled in and returned (no
    second column of every event)."""
    out = seed_step if seed_step.dtype in (np.int16, np.int32) \
        else np.asarray(seed_step, dtype=np.int32)
    if not has_links(table) or not (out >= 0).any():
        return out
    (ep_rows, ep_type, ep_id), (ec_rows, ec_type, ec_id) = _executor_keys(table)
    p_rows, p_type, p_id = _joined(_keys(table, PRODUCER_TYPE, PRODUCER_ID),
                                   (ep_rows, ep_type, ep_id))
    del ep_rows, ep_type, ep_id
    c_rows, c_type, c_id = _joined(_keys(table, CONSUMER_TYPE, CONSUMER_ID),
                                   (ec_rows, ec_type, ec_id))
    del ec_rows, ec_type, ec_id
    if len(p_rows) == 0 or len(c_rows) == 0:
        return out
    # One code per (type, id) pair, shared by producers and consumers (any numbering: only
    # equal pairs' codes need be equal). By distinct values and searches of them, each column
    # let go once used: a sort of the pairs held several columns as long as every link at
    # once, most of the grouping's peak.
    ids = np.concatenate([p_id, c_id])
    del p_id, c_id
    code: NDArray[np.signedinteger[Any]] = _index_in(ids, distinct(ids))
    del ids
    kinds = np.concatenate([p_type, c_type])
    del p_type, c_type
    distinct_kinds = distinct(kinds)
    kind_code = _index_in(kinds, distinct_kinds)
    del kinds
    if (int(code.max()) + 1) * len(distinct_kinds) > _INT32.max:
        code = code.astype(np.int64)  # the pairs' keys past int32
    code *= len(distinct_kinds)
    code += kind_code
    del kind_code
    code = _index_in(code, distinct(code))
    p_code, c_code = code[:len(p_rows)], code[len(p_rows):]
    # The events by (line, start): None where the table holds them so already (a decoded
    # file's lines in order, each one's events in time order), and then no order and no
    # starts in that order (8 bytes an event each) are made.
    order = None if _in_line_start_order(table) else \
        np.asarray(np.lexsort((table.start_ns, table.line)), np.int64)
    lines = table.line if order is None else table.line[order]
    bounds = np.arange(len(table.line_name) + 1)
    if bounds[-1] <= np.iinfo(lines.dtype).max:
        # As narrow as the lines: a search of int64 values would cast an int64 copy of them
        # (8 B an event).
        bounds = bounds.astype(lines.dtype)
    line_start = np.searchsorted(lines, bounds).astype(np.int64)
    del lines, bounds
    for _ in range(_MAX_ROUNDS):
        linked = out[p_rows] >= 0
        if not linked.any():
            break
        step_of_code = np.full(int(code.max()) + 1, -1, dtype=out.dtype)
        # A context used in several steps keeps the earliest (as a first-come grouping).
        codes, steps = p_code[linked], out[p_rows[linked]]
        first = np.lexsort((steps, codes))
        codes, steps = codes[first], steps[first]
        keep = np.concatenate([[True], codes[1:] != codes[:-1]])
        step_of_code[codes[keep]] = steps[keep]
        got = step_of_code[c_code]
        new = (got >= 0) & (out[c_rows] < 0)
        if not new.any():
            break
        roots = c_rows[new]
        out[roots] = got[new]
        # Each root's step to the events nested under it that have none yet; where several
        # roots hold one, the last root's (as one assignment of every pair would give).
        free = out < 0
        lo, hi = _spans(table, order, line_start, roots)
        for owner, rows in _descendants(order, lo, hi):
            take = free[rows]
            out[rows[take]] = out[roots[owner[take]]]
    return out


__all__ = ["grouped_step", "has_links"]
