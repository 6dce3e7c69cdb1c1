"""Where the Python time goes: top functions and the call tree (flame graph) of one host.

Two sources give the same views. The Python tracer's plane holds every call (one event per
call, nested per thread): a call's inclusive time is its event's, its self time what its
direct children leave. The Python sampler's plane holds samples (one event per thread and
tick, spanning the time it stands for, its stack an interned stat): a frame's time is the
summed spans of the samples it is in (inclusive) or innermost in (self).

Both become one call tree, merged by call path over the threads chosen: a node per distinct
path (root first), with its self and inclusive time and its calls (tracer) or samples
(sampler). Top functions sum the nodes of each function; a function's inclusive time counts
only its outermost nodes, so recursion is counted once. Everything is columns: the tracer's
events are grouped by path one nesting level at a time, never one event at a time.

A window (``start_ns``, ``end_ns``: a step or a selection) clips events and samples to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.csv_table import csv_text
from stepscope.analysis.run_model import call_walk
from stepscope.analysis.run_model.intervals import parents_and_self_times, self_times
from stepscope.analysis.run_model.steps import Steps
from stepscope.errors import NotFoundError, StepscopeError
from stepscope.model import schema
from stepscope.model.events import EventTable, is_in, rows_where
from stepscope.native import compiled

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
Rows = NDArray[np.int32] | I64  # event rows: int32 where they fit (rows_where)

TRACER, SAMPLER = "tracer", "sampler"
SOURCES = {TRACER: schema.PYTHON_TRACER_PLANE, SAMPLER: schema.PYTHON_SAMPLER_PLANE}
SORT_KEYS = ("self", "total", "count", "name")
# ``$<file>:<line> <function>`` (Python code); anything else is a C function's ``$module.name``.
_PY_FRAME = re.compile(r"^\$(?P<file>.*):(?P<line>\d+) (?P<function>.*)$", re.S)


class PythonDataError(NotFoundError):
    """The host recorded no Python calls or samples (or not of the source asked for)."""


@dataclass(frozen=True)
class CallTree:
    """Call paths merged over threads: node ``i``'s parent (-1: a root), its function (an
    index into ``names``), self and inclusive time (ns), and its calls or samples. Parents
    come before their children."""

    parent: I64
    name: I64
    self_ns: I64
    total_ns: I64
    count: I64
    names: list[str]

    def __len__(self) -> int:
        return len(self.parent)

    def to_dict(self) -> dict[str, Any]:
        return {"names": self.names, "parent": self.parent.tolist(),
                "name": self.name.tolist(), "self_ns": self.self_ns.tolist(),
                "total_ns": self.total_ns.tolist(), "count": self.count.tolist()}

    def paths(self) -> list[list[int]]:
        """Each node's path of function indices, root first."""
        out: list[list[int]] = []
        for i, (p, n) in enumerate(zip(self.parent.tolist(), self.name.tolist(), strict=True)):
            out.append((out[p] if p >= 0 else []) + [n])
            del i
        return out


def split_frame(name: str) -> tuple[str, int, str]:
    """(file, first line, function) of a frame name; a C function has no file ("", 0)."""
    m = _PY_FRAME.match(name)
    if m:
        return m["file"], int(m["line"]), m["function"]
    return "", 0, name.removeprefix("$")


@dataclass(frozen=True)
class PythonViews:
    """One host's Python time by function and by call path, for a window and threads."""

    host: str
    source: str  # "tracer" (count = calls) or "sampler" (count = samples)
    start_ns: int
    end_ns: int
    step: int | None
    thread: str | None  # the thread chosen (its name or line id), None: all
    threads: dict[str, list[Any]]  # line_id, name, total_ns, count (per thread)
    tree: CallTree
    samples: int  # samples in the window (sampler), else calls
    hz: float  # the sampling rate got (samples per second per thread), 0 for the tracer

    @property
    def total_ns(self) -> int:
        """Python time in the window, summed over the threads chosen."""
        return int(self.tree.self_ns.sum())

    def functions(self, sort: str = "self", filter_text: str = "",
                  limit: int | None = None) -> dict[str, list[Any]]:
        """Top functions as columns: name, file, line, function, self and inclusive time,
        their shares of ``total_ns``, calls or samples (``count``) and, for samples, the
        self share's standard error. ``sort`` by self, total, count or name; ``filter_text``
        keeps names that contain it (case-insensitive)."""
        if sort not in SORT_KEYS:
            raise StepscopeError(f"Cannot sort Python functions by {sort!r}; use one of "
                                 f"{', '.join(SORT_KEYS)}.")
        t = self.tree
        n = len(t.names)
        self_ns = np.bincount(t.name, weights=t.self_ns, minlength=n).astype(np.int64)
        outer = _outermost(t.parent, t.name)
        total_ns = np.bincount(t.name[outer], weights=t.total_ns[outer],
                               minlength=n).astype(np.int64)
        count = np.bincount(t.name[outer], weights=t.count[outer], minlength=n).astype(np.int64)
        if self.source == TRACER:  # every call, recursive ones too
            count = np.bincount(t.name, weights=t.count, minlength=n).astype(np.int64)
        rows = np.flatnonzero((total_ns > 0) | (count > 0)) if n else np.zeros(0, np.int64)
        if filter_text:
            needle = filter_text.lower()
            rows = np.array([r for r in rows.tolist() if needle in t.names[r].lower()],
                            dtype=np.int64)
        if sort == "name":
            rows = rows[np.argsort([t.names[r] for r in rows.tolist()], kind="stable")]
        else:
            key = {"self": self_ns, "total": total_ns, "count": count}[sort]
            rows = rows[np.lexsort((-total_ns[rows], -key[rows]))]
        if limit is not None:
            rows = rows[:limit]
        whole = max(self.total_ns, 1)
        self_share = self_ns[rows] / whole
        parts = [split_frame(t.names[r]) for r in rows.tolist()]
        out: dict[str, list[Any]] = {
            "name": [t.names[r] for r in rows.tolist()],
            "file": [p[0] for p in parts], "line": [p[1] for p in parts],
            "function": [p[2] for p in parts],
            "self_ns": self_ns[rows].tolist(), "total_ns": total_ns[rows].tolist(),
            "self_share": self_share.tolist(), "total_share": (total_ns[rows] / whole).tolist(),
            "count": count[rows].tolist(),
        }
        if self.source == SAMPLER:
            n_samples = max(self.samples, 1)
            out["self_share_error"] = np.sqrt(self_share * (1 - self_share)
                                              / n_samples).tolist()
        return out

    def table(self) -> dict[str, list[Any]]:
        """The top functions by self time (every function)."""
        return self.functions()

    def to_dict(self, sort: str = "self", filter_text: str = "",
                limit: int | None = None) -> dict[str, Any]:
        return {"host": self.host, "source": self.source,
                "count_kind": "calls" if self.source == TRACER else "samples",
                "start_ns": self.start_ns, "end_ns": self.end_ns, "step": self.step,
                "thread": self.thread, "total_ns": self.total_ns, "samples": self.samples,
                "hz": self.hz, "threads": self.threads,
                "functions": self.functions(sort, filter_text, limit),
                "tree": self.tree.to_dict()}

    def csv(self, sort: str = "self", filter_text: str = "") -> str:
        """The top functions as CSV."""
        f = self.functions(sort, filter_text)
        cols = ["function", "file", "line", "self_ns", "total_ns", "self_share",
                "total_share", "count"]
        header = [*cols[:-1], "calls" if self.source == TRACER else "samples"]
        return csv_text(header, zip(*(f[c] for c in cols), strict=True))

    def collapsed(self) -> str:
        """Collapsed stacks (``root;…;leaf self``), one a path with self time: nanoseconds
        for the tracer, samples for the sampler (what flame-graph scripts expect)."""
        t = self.tree
        clean = [n.replace(";", ",").replace("\n", " ") for n in t.names]
        lines = []
        weight = t.self_ns if self.source == TRACER else _self_counts(t)
        for path, w in zip(t.paths(), weight.tolist(), strict=True):
            if w > 0:
                lines.append(";".join(clean[i] for i in path) + f" {int(w)}")
        return "\n".join(lines) + ("\n" if lines else "")

    def speedscope(self, run: str = "") -> dict[str, Any]:
        """The speedscope file format (one "sampled" profile: each call path with its self
        time as its weight, in nanoseconds)."""
        t = self.tree
        frames = []
        for name in t.names:
            file, line, function = split_frame(name)
            frame: dict[str, Any] = {"name": function}
            if file:
                frame.update(file=file, line=line)
            frames.append(frame)
        samples, weights = [], []
        for path, w in zip(t.paths(), t.self_ns.tolist(), strict=True):
            if w > 0:
                samples.append(path)
                weights.append(int(w))
        label = f"{run} {self.host} python {self.source}".strip()
        return {"$schema": "https://www.speedscope.app/file-format-schema.json",
                "shared": {"frames": frames},
                "profiles": [{"type": "sampled", "name": label, "unit": "nanoseconds",
                              "startValue": 0, "endValue": int(sum(weights)),
                              "samples": samples, "weights": weights}],
                "name": label, "exporter": "stepscope"}

    def speedscope_json(self, run: str = "") -> str:
        return json.dumps(self.speedscope(run), separators=(",", ":"))


def _self_counts(t: CallTree) -> I64:
    """Per node, the samples innermost there (count less the children's)."""
    out = t.count.copy()
    kids = np.flatnonzero(t.parent >= 0)
    np.subtract.at(out, t.parent[kids], t.count[kids])
    return out


def _outermost(parent: I64, name: I64) -> NDArray[np.bool_]:
    """Per node: no ancestor is the same function (its time is not counted twice)."""
    n = len(parent)
    inner = np.zeros(n, dtype=bool)
    anc = parent.copy()
    live = np.flatnonzero(anc >= 0)
    while len(live):
        up = anc[live]
        inner[live[name[up] == name[live]]] = True
        anc[live] = parent[up]
        live = live[anc[live] >= 0]
    return ~inner


def sources_of(table: EventTable) -> list[str]:
    """The Python sources a host recorded (tracer, sampler), those with events."""
    out = []
    for source, plane in SOURCES.items():
        index = table.plane_index(plane)
        if index is not None and bool(np.any(table.line_plane[table.line] == index)):
            out.append(source)
    return out


def _rows_of(table: EventTable, plane: int, thread: str | None) -> tuple[I64, str | None]:
    """The plane's events (of one thread, named or by line id), and that thread's label."""
    lines = np.flatnonzero(table.line_plane == plane)
    if thread is not None:
        by_name = [i for i in lines.tolist() if table.line_name[i] == thread
                   or str(int(table.line_id[i])) == thread]
        if not by_name:
            names = sorted({table.line_name[i] or str(int(table.line_id[i]))
                            for i in lines.tolist()})
            raise NotFoundError(f"No thread {thread!r} has Python data on this host (threads: "
                                f"{', '.join(names) or 'none'}); pass one of those.")
        lines = np.asarray(by_name, dtype=np.int64)
    rows = np.flatnonzero(is_in(table.line, lines))
    return rows.astype(np.int64), thread


_THREADS_CHUNK = 1 << 18  # rows a time in _threads and _clip: their temporaries stay ~2 MB


def _threads(table: EventTable, line: NDArray[np.integer[Any]], weight: I64,
             counted: NDArray[np.bool_] | None = None) -> dict[str, list[Any]]:
    """Per line: its id, name, time and count (of rows), the busiest first. A row's time is
    its ``weight``, where ``counted`` (None: every row's)."""
    size = len(table.line_id)
    total = np.zeros(size, np.int64)
    calls = np.zeros(size, np.int64)
    # Summed a chunk of rows at a time: no index, float weight or masked weight of every row
    # (a tracer's millions of calls) held at once. Table lines are codes below ``size``.
    for i in range(0, len(line), _THREADS_CHUNK):
        part = line[i:i + _THREADS_CHUNK]
        w = weight[i:i + _THREADS_CHUNK]
        if counted is not None:
            w = np.where(counted[i:i + _THREADS_CHUNK], w, 0)
        total += np.bincount(part, weights=w, minlength=size).astype(np.int64)
        calls += np.bincount(part, minlength=size)
    return _thread_dict(table, total, calls)


def _thread_dict(table: EventTable, total: I64, calls: I64) -> dict[str, list[Any]]:
    """``_threads``' answer from each table line's time and count."""
    lines = np.flatnonzero(calls)
    total, calls = total[lines], calls[lines]
    order = np.argsort(-total, kind="stable")
    return {"line_id": [int(table.line_id[lines[i]]) for i in order],
            "name": [table.line_name[lines[i]] for i in order],
            "total_ns": total[order].tolist(), "count": calls[order].tolist()}


def python_views(table: EventTable, host: str, *, source: str | None = None,
                 thread: str | None = None, start_ns: int | None = None,
                 end_ns: int | None = None, step: int | None = None) -> PythonViews:
    """The Python views of one host's events: ``source`` tracer or sampler (None: the tracer
    where it recorded, else the sampler), one ``thread`` or all, within [start_ns, end_ns)."""
    have = sources_of(table)
    if not have:
        raise PythonDataError(
            f"Host {host!r} recorded no Python calls or samples; profile with "
            "ProfilerOptions(python_tracer_level=1) or python_sampling_hz=100.")
    if source is None:
        source = have[0]
    if source not in SOURCES:
        raise StepscopeError(f"No Python source {source!r}; use tracer or sampler.")
    if source not in have:
        raise PythonDataError(f"Host {host!r} has no Python {source} data (it has "
                              f"{' and '.join(have)}); pass --source {have[0]}.")
    plane = table.plane_index(SOURCES[source])
    assert plane is not None
    rows, label = _rows_of(table, plane, thread)
    lo = int(table.start_ns[rows].min()) if len(rows) else 0
    hi = int((table.start_ns[rows] + table.duration_ns[rows]).max()) if len(rows) else 0
    t0 = lo if start_ns is None else int(start_ns)
    t1 = hi + 1 if end_ns is None else int(end_ns)  # past the last end: its instant too
    if t1 <= t0:
        raise StepscopeError(f"The window {t0}..{t1} ns is empty; pass an end after its start.")
    build = _tracer_tree if source == TRACER else _sampler_tree
    tree, threads, samples, hz = build(table, rows, t0, t1)
    return PythonViews(host, source, t0, t1, step, label, threads, tree, samples, hz)


def _clip(table: EventTable, rows: Rows, t0: int, t1: int) -> tuple[Rows, I64, I64]:
    """The rows overlapping [t0, t1) (zero-length ones inside it), and their clipped spans."""
    # Which rows to keep first, a chunk at a time, then the spans of those alone: no span
    # columns of every row beside those of the kept ones.
    keep = np.empty(len(rows), bool)
    for i in range(0, len(rows), _THREADS_CHUNK):
        part = rows[i:i + _THREADS_CHUNK]
        s = table.start_ns[part]
        e = s + table.duration_ns[part]  # int64 (the durations may be int32)
        keep[i:i + len(part)] = ((s < t1) & (e > t0)) | ((e == s) & (s >= t0) & (s < t1))
    if not keep.all():  # usually all are kept: no second copy of the rows
        rows = rows[keep]
    del keep
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    np.maximum(start, t0, out=start)
    np.minimum(end, t1, out=end)
    return rows, start, end


def _depths(parent: NDArray[np.integer[Any]]) -> NDArray[np.integer[Any]]:
    """Each item's depth below its root, by pointer doubling (log of the depth passes), in
    the parents' dtype (int32 where the items fit: a depth is below their count)."""
    depth = (parent >= 0).astype(parent.dtype)
    anc = parent.copy()
    live = np.flatnonzero(anc >= 0)
    while len(live):
        up = anc[live]
        depth[live] += depth[up]
        anc[live] = anc[up]
        live = live[anc[live] >= 0]
    return depth


def _paths(parent: NDArray[np.integer[Any]], name: NDArray[np.integer[Any]]
           ) -> tuple[NDArray[np.integer[Any]], I64, I64]:
    """Items grouped by call path, a nesting level at a time: (each item's node, each node's
    parent node, each node's name). Items' nodes and order int32 where they fit (columns of
    every call, held through the levels)."""
    n = len(parent)
    small = np.int32 if n < 1 << 31 else np.int64
    module = compiled("stepscope.analysis.run_model._intervals")
    if module is not None and n and n < 1 << 31 and int(name.min()) >= 0:
        # One walk: a depth and a place an item, and a level's paths (the passes below hold
        # several int64 columns of a level's items at once).
        built: NDArray[np.integer[Any]] = np.empty(n, dtype=small)
        ups, names = module.paths(parent, name, built)
        return (built, np.frombuffer(ups, np.int64).copy(),
                np.frombuffer(names, np.int64).copy())
    return _paths_numpy(parent, name)


def _paths_numpy(parent: NDArray[np.integer[Any]], name: NDArray[np.integer[Any]]
                 ) -> tuple[NDArray[np.integer[Any]], I64, I64]:
    """``_paths`` by NumPy passes a level at a time (the twin of the compiled walk)."""
    n = len(parent)
    small = np.int32 if n < 1 << 31 else np.int64
    node: NDArray[np.integer[Any]] = np.full(n, -1, dtype=small)
    depth = _depths(parent)
    order = np.argsort(depth, kind="stable").astype(small, copy=False)
    # Where each level starts in ``order``: counted, not searched in a sorted copy of depth.
    bounds = np.zeros(int(depth.max(initial=-1)) + 2, dtype=np.int64)
    np.cumsum(np.bincount(depth, minlength=len(bounds) - 1), out=bounds[1:])
    del depth
    node_parent: list[I64] = []
    node_name: list[I64] = []
    made = 0
    width = int(name.max(initial=0)) + 1
    for level in range(len(bounds) - 1):
        items = order[bounds[level]:bounds[level + 1]]
        if not len(items):
            continue
        up = node[parent[items]].astype(np.int64) if level \
            else np.full(len(items), -1, dtype=np.int64)
        key = (up + 1) * width + name[items]  # int64: up is (a product of two counts)
        keys, inverse = np.unique(key, return_inverse=True)
        node[items] = made + inverse.reshape(-1)
        node_parent.append(keys // width - 1)
        node_name.append(keys % width)
        made += len(keys)
    cat = (np.concatenate(node_parent) if node_parent else np.zeros(0, np.int64),
           np.concatenate(node_name) if node_name else np.zeros(0, np.int64))
    return node, cat[0], cat[1]


def _used_codes(codes: NDArray[np.integer[Any]], size: int
                ) -> tuple[I64, NDArray[np.integer[Any]]]:
    """The codes (in 0..size-1) that occur, ascending, and each row's index among them: what
    ``np.unique(codes, return_inverse=True)`` gives, by counting rather than sorting the rows
    (a sort holds several copies of millions of rows)."""
    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= size):
        used, inverse = np.unique(codes, return_inverse=True)  # not codes: sort them
        return used.astype(np.int64), inverse.reshape(-1).astype(np.int64)
    used = np.flatnonzero(np.bincount(codes, minlength=size))
    # int32 indices where they fit: the inverse is one per row (millions of calls).
    index = np.full(max(size, 1), -1, dtype=np.int32 if size < 1 << 31 else np.int64)
    index[used] = np.arange(len(used), dtype=index.dtype)
    return used.astype(np.int64), index[codes]


def _compact(names: list[str], name: NDArray[np.integer[Any]]
             ) -> tuple[NDArray[np.integer[Any]], list[str]]:
    """Function codes renumbered to those used, and their names."""
    used, inverse = _used_codes(name, len(names))
    return inverse, [names[int(i)] for i in used]


def _tracer_tree(table: EventTable, rows: Rows, t0: int, t1: int
                 ) -> tuple[CallTree, dict[str, list[Any]], int, float]:
    if call_walk.walkable(table, rows):
        return _walked_tracer_tree(table, rows, t0, t1)
    # Each column is dropped as soon as the next step has what it needs of it: a tracer
    # records millions of calls, and each column of them is tens of MB.
    rows, start, end = _clip(table, rows, t0, t1)
    n_rows = len(rows)
    line = table.line[rows]  # int32: it is held to the end
    # The functions' codes before the nesting: 4 B a call held through it, not the rows' 8.
    name, names = _compact(table.names, table.name[rows])
    del rows
    # (A table's durations are never negative: the self times are each call's time less its
    # children's, clipped to it.)
    # int32 parents where they fit, as the walk writes them: held through the call paths.
    parent, self_ns = parents_and_self_times(line, start, end, narrow=True)
    dur = np.subtract(end, start, out=end)  # in place: no third column of every call
    del start, end
    # A thread's Python time is what its outermost calls cover; its count, all its calls.
    # (Before the call paths, so that the lines are not held through them.)
    threads = _threads(table, line, dur, parent < 0)
    del line
    node, node_parent, node_name = _paths(parent, name)
    del name, parent
    m = len(node_parent)
    tree = CallTree(node_parent, node_name,
                    np.bincount(node, weights=self_ns, minlength=m).astype(np.int64),
                    np.bincount(node, weights=dur, minlength=m).astype(np.int64),
                    np.bincount(node, minlength=m).astype(np.int64), names)
    return tree, threads, n_rows, 0.0


def _walked_tracer_tree(table: EventTable, rows: Rows, t0: int, t1: int
                        ) -> tuple[CallTree, dict[str, list[Any]], int, float]:
    """``_tracer_tree`` by a walk of the calls a block at a time (``call_walk``): the sums by
    call path grow with the paths, not the calls. The same tree, numbered as ``_paths``
    numbers it."""
    width = len(table.names)
    trie: dict[tuple[int, int], int] = {}
    node_parent: list[int] = []
    node_name: list[int] = []
    sums = np.zeros((3, 0), np.int64)  # self, total and count by node
    size = len(table.line_id)
    thread_total = np.zeros(size, np.int64)
    thread_calls = np.zeros(size, np.int64)
    carried_node = np.zeros(0, np.int64)
    n_rows = 0
    for block in call_walk.walk(table, rows, t0, t1):
        k, n = block.carried, len(block.rows)
        # The block's call paths: each carried call its own root (a name no function has),
        # standing for its path so far.
        local_name = table.name[block.rows].astype(np.int64)
        local_name[:k] = width + np.arange(k)
        local_node, local_parent, local_names = _paths(block.parent, local_name)
        found = np.empty(len(local_parent), np.int64)
        for j, (up, code) in enumerate(zip(local_parent.tolist(), local_names.tolist(),
                                           strict=True)):
            if code >= width:
                found[j] = carried_node[code - width]
                continue
            above = int(found[up]) if up >= 0 else -1
            node = trie.get((above, code))
            if node is None:
                node = trie[(above, code)] = len(node_parent)
                node_parent.append(above)
                node_name.append(code)
            found[j] = node
        item_node = found[local_node]
        m = len(node_parent)
        if sums.shape[1] < m:
            sums = np.concatenate([sums, np.zeros((3, m - sums.shape[1]), np.int64)], axis=1)
        dur = block.end[k:] - block.start[k:]
        mine = item_node[k:]
        sums[0] += np.bincount(mine, weights=dur, minlength=m).astype(np.int64)
        sums[1] += np.bincount(mine, weights=dur, minlength=m).astype(np.int64)
        sums[2] += np.bincount(mine, minlength=m)
        up, taken = call_walk.taken_by_parents(block)
        sums[0] -= np.bincount(item_node[up], weights=taken, minlength=m).astype(np.int64)
        thread_total[block.line] += int(dur[block.parent[k:] < 0].sum())
        thread_calls[block.line] += n - k
        n_rows += n - k
        carried_node = item_node[block.carry]
    order = _level_order(np.asarray(node_parent, np.int64), np.asarray(node_name, np.int64))
    new = np.empty(len(order), np.int64)
    new[order] = np.arange(len(order))
    parent = np.asarray(node_parent, np.int64)[order]
    names_used, name_code = _used_codes(np.asarray(node_name, np.int64)[order], width)
    tree = CallTree(np.where(parent >= 0, new[np.maximum(parent, 0)], -1),
                    name_code.astype(np.int64), sums[0][order], sums[1][order],
                    sums[2][order], [table.names[int(c)] for c in names_used])
    return tree, _thread_dict(table, thread_total, thread_calls), n_rows, 0.0


def _level_order(parent: I64, name: I64) -> I64:
    """Nodes (parents before children) in ``_paths``' order: a level at a time, and within
    one by the parent's place, then the function's code."""
    depth = np.zeros(len(parent), np.int64)
    for i, p in enumerate(parent.tolist()):  # paths, not calls: few
        if p >= 0:
            depth[i] = depth[p] + 1
    place = np.full(len(parent), -1, np.int64)
    out: list[I64] = []
    made = 0
    for level in range(int(depth.max(initial=-1)) + 1):
        nodes = np.flatnonzero(depth == level)
        above = np.where(parent[nodes] >= 0, place[np.maximum(parent[nodes], 0)], -1)
        ranked = nodes[np.lexsort((name[nodes], above))]
        place[ranked] = made + np.arange(len(ranked))
        made += len(ranked)
        out.append(ranked)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _sampler_tree(table: EventTable, rows: Rows, t0: int, t1: int
                  ) -> tuple[CallTree, dict[str, list[Any]], int, float]:
    rows, start, end = _clip(table, rows, t0, t1)
    weight = end - start
    stat_rows, codes, stacks = table.text_stat(schema.PYTHON_STACK)
    # Each sample's stack: its stat's value (a sample without one has its name as stack).
    at = np.searchsorted(stat_rows, rows)
    at_ok = np.minimum(at, max(len(stat_rows) - 1, 0))
    has = (at < len(stat_rows)) & (stat_rows[at_ok] == rows) if len(stat_rows) else \
        np.zeros(len(rows), bool)
    texts = list(stacks) + list(table.names)
    stack = np.where(has, codes[at_ok] if len(codes) else 0,
                     len(stacks) + table.name[rows].astype(np.int64))
    used, inverse = np.unique(stack, return_inverse=True)
    inverse = inverse.reshape(-1)
    # A trie of the distinct stacks (few, however many samples there are).
    index: dict[tuple[int, str], int] = {}
    node_parent: list[int] = []
    node_name: list[str] = []
    leaf = np.zeros(len(used), dtype=np.int64)
    for j, code in enumerate(used.tolist()):
        at_node = -1
        for frame in texts[code].split("\n"):
            key = (at_node, frame)
            nxt = index.get(key)
            if nxt is None:
                nxt = index[key] = len(node_parent)
                node_parent.append(at_node)
                node_name.append(frame)
            at_node = nxt
        leaf[j] = at_node
    m = len(node_parent)
    sample_node = leaf[inverse]
    self_ns = np.bincount(sample_node, weights=weight, minlength=m).astype(np.int64)
    total_ns = self_ns.copy()
    count = np.bincount(sample_node, minlength=m).astype(np.int64)
    parent = np.asarray(node_parent, dtype=np.int64)
    for i in range(m - 1, -1, -1):  # children come after their parents
        p = node_parent[i]
        if p >= 0:
            total_ns[p] += total_ns[i]
            count[p] += count[i]
    distinct = sorted(set(node_name))
    code_of = {n: i for i, n in enumerate(distinct)}
    tree = CallTree(parent, np.array([code_of[n] for n in node_name], dtype=np.int64),
                    self_ns, total_ns, count, distinct)
    threads = _threads(table, table.line[rows], weight)
    ticks = len(np.unique(start)) if len(start) else 0
    span = (int(end.max()) - int(start.min())) if len(start) else 0
    hz = ticks / (span / 1e9) if span > 0 else 0.0
    return tree, threads, len(rows), hz


def hosts_with_python(tables: Mapping[str, EventTable]) -> list[str]:
    """The hosts that recorded Python calls or samples, in name order."""
    return [name for name in sorted(tables) if sources_of(tables[name])]


def step_window(steps: Steps, step: int) -> tuple[int, int]:
    """[start, end) of step number ``step``; a NotFoundError naming the steps there are."""
    where = np.flatnonzero(steps.step_num == step)
    if not len(where):
        nums = steps.step_num.tolist()
        shown = ", ".join(str(n) for n in nums[:10]) + (" …" if len(nums) > 10 else "")
        raise NotFoundError(f"No step {step} on this host (steps: {shown or 'none'}); pass "
                            "one of those.")
    i = int(where[0])
    return int(steps.start_ns[i]), int(steps.end_ns[i])


def run_python_views(tables: Mapping[str, EventTable], steps: Mapping[str, Steps], *,
                     host: str | None = None, source: str | None = None,
                     thread: str | None = None, step: int | None = None,
                     start_ns: int | None = None, end_ns: int | None = None) -> PythonViews:
    """The Python views of one host of a run (None: the first with Python data), for one
    step (its bounds from ``steps``) or a window."""
    have = hosts_with_python(tables)
    if host is None:
        if not have:
            raise PythonDataError(
                "This run recorded no Python calls or samples; profile with "
                "ProfilerOptions(python_tracer_level=1) or python_sampling_hz=100.")
        host = have[0]
    elif host not in tables:
        raise NotFoundError(f"No host {host!r} in this run (hosts: {', '.join(sorted(tables))});"
                            " pass one of those.")
    if step is not None:
        if start_ns is not None or end_ns is not None:
            raise StepscopeError("Pass a step or a time window, not both.")
        host_steps = steps.get(host)
        if host_steps is None or not len(host_steps):
            raise NotFoundError(f"Host {host!r} has no steps; leave out the step.")
        start_ns, end_ns = step_window(host_steps, step)
    return python_views(tables[host], host, source=source, thread=thread, start_ns=start_ns,
                        end_ns=end_ns, step=step)


# How many of the heaviest functions the run model keeps per host.
SUMMARY_TOP = 8


def python_summary(table: EventTable, steps: Steps) -> dict[str, Any] | None:
    """What the overview and the advice need of a host's Python data (None: it has none):
    per step, the time the thread that runs the steps spent in Python code itself (self time
    of Python frames, C functions left out), and the heaviest functions over the steps (or
    the whole recording, without steps) by self time."""
    have = sources_of(table)
    if not have:
        return None
    source = have[0]
    plane = table.plane_index(SOURCES[source])
    assert plane is not None

    def plane_rows() -> Rows:
        # A flag a line, then int32 rows: no int32 plane of every event, nor int64 rows.
        return rows_where((table.line_plane == plane)[table.line])

    if len(steps):
        t0, t1 = int(steps.start_ns.min()), int(steps.end_ns.max())
    else:
        rows = plane_rows()
        t0 = int(table.start_ns[rows].min())
        t1 = int((table.start_ns[rows] + table.duration_ns[rows]).max()) + 1
        del rows
    build = _tracer_tree if source == TRACER else _sampler_tree
    # The rows are made anew below rather than held through the tree (a column of every call).
    tree = build(table, plane_rows(), t0, t1)[0]
    views = PythonViews("", source, t0, t1, None, None, {}, tree, 0, 0.0)
    top = views.functions(limit=SUMMARY_TOP)
    out: dict[str, Any] = {
        "source": source, "total_ns": views.total_ns,
        "top": {k: top[k] for k in ("name", "file", "line", "function", "self_ns", "total_ns",
                                    "self_share", "total_share", "count")},
        "step_num": [], "step_python_ns": [], "thread": None,
    }
    step_lines = np.asarray(steps.lines, dtype=np.int64)
    if not len(steps) or not len(step_lines):
        return out
    # The steps' threads: their Python lines have the same ids (a thread's native id). A flag
    # a line, then the rows by it: int32 rows, and no int64 id of every row on the way.
    wanted = np.isin(table.line_id, table.line_id[step_lines]) & (table.line_plane == plane)
    mine = rows_where(wanted[table.line])
    del wanted
    if not len(mine):
        return out
    python_code = np.array([bool(_PY_FRAME.match(n)) for n in table.names], dtype=bool)
    if source == TRACER and call_walk.walkable(table, mine):
        out["thread"] = table.line_name[int(table.line[mine[0]])]
        out["step_num"] = steps.step_num.tolist()
        out["step_python_ns"] = _walked_step_python(table, mine, t0, t1, steps,
                                                    python_code).tolist()
        return out
    mine, start, end = _clip(table, mine, t0, t1)
    thread = table.line_name[int(table.line[mine[0]])] if len(mine) else None
    other = ~python_code[table.name[mine]]
    # Each column is dropped once the next has what it needs of it (millions of calls).
    if source == TRACER:
        weight = self_times(table.line[mine], start, end)  # less each child's clipped time
        del mine
    else:
        del mine
        weight = end - start  # a sample's innermost frame is its name
    del end
    weight[other] = 0
    del other
    # Each call's step a chunk of calls at a time (int64 temporaries of every call were the
    # peak here). The weights are whole nanoseconds far below 2**53: the float sums are
    # exact, in any order.
    per_step = np.zeros(len(steps), dtype=np.float64)
    for at in range(0, len(start), _THREADS_CHUNK):
        part = start[at:at + _THREADS_CHUNK]
        step = np.searchsorted(steps.start_ns, part, side="right")
        step -= 1
        inside = (step >= 0) & (part < steps.end_ns[np.maximum(step, 0)])
        per_step += np.bincount(step[inside], weights=weight[at:at + _THREADS_CHUNK][inside],
                                minlength=len(steps))
    del start
    out["thread"] = thread
    out["step_num"] = steps.step_num.tolist()
    out["step_python_ns"] = per_step.astype(np.int64).tolist()
    return out


def _walked_step_python(table: EventTable, rows: Rows, t0: int, t1: int, steps: Steps,
                        python_code: NDArray[np.bool_]) -> I64:
    """Per step: the self time of the Python frames among the calls of ``rows`` that start
    in it (their time less their children's, clipped), by a walk a block at a time."""
    per_step = np.zeros(len(steps), dtype=np.float64)

    def step_of(times: I64) -> tuple[I64, NDArray[np.bool_]]:
        step = np.searchsorted(steps.start_ns, times, side="right") - 1
        return step, (step >= 0) & (times < steps.end_ns[np.maximum(step, 0)])

    for block in call_walk.walk(table, rows, t0, t1):
        k = block.carried
        python = python_code[table.name[block.rows]]
        step, inside = step_of(block.start)
        own = np.flatnonzero(python[k:] & inside[k:]) + k
        # Whole nanoseconds far below 2**53: the float sums are exact, in any order.
        per_step += np.bincount(step[own], weights=block.end[own] - block.start[own],
                                minlength=len(steps))
        up, taken = call_walk.taken_by_parents(block)
        counted = python[up] & inside[up]
        per_step -= np.bincount(step[up[counted]], weights=taken[counted],
                                minlength=len(steps))
    return per_step.astype(np.int64)


def pruned(tree: CallTree, min_ns: int) -> CallTree:
    """The nodes whose inclusive time reaches ``min_ns`` (a parent always has at least its
    children's time, so every kept node's parent is kept), renumbered in the same order."""
    keep = tree.total_ns >= min_ns
    rows = np.flatnonzero(keep)
    new = np.full(len(tree.parent), -1, dtype=np.int64)
    new[rows] = np.arange(len(rows), dtype=np.int64)
    parent = tree.parent[rows]
    return CallTree(np.where(parent >= 0, new[np.maximum(parent, 0)], -1), tree.name[rows],
                    tree.self_ns[rows], tree.total_ns[rows], tree.count[rows], tree.names)
