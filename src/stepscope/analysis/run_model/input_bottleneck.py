"""Input-pipeline bottleneck analysis: the iterator graph, its critical path and slowest stage.

Iterator events (tf.data's, stepscope.data's, the DataLoader's) are named by the chain of
their consumers, ``Iterator::Batch::Map::Range``; a stage's consumer is its name less the last
part, so the pipeline graph is rebuilt from names alone. TensorFlow's decorations are
normalised away so that one stage is one node: the ``Root`` wrapper, version suffixes
(``BatchV2``), repetition indices (``FiniteRepeat[0]``) and ``Finite``/``Forever`` prefixes.

A host may run several pipelines (a training and an evaluation iterator, say). TensorFlow
gives every iterator an ``id`` and its consumer's ``parent_id``: the pipeline of an event is
the root iterator its chain of parents ends at, so two iterators over pipelines of the same
shape stay apart. Events without ids (stepscope.data, the DataLoader) belong to the pipeline
of their output stage's name. Pipelines are named as XProf names them, ``Host:0``,
``Host:1``… in order of their first call, and ``Device:0``… for those that feed a device
(``prefetch_to_device``: their second iterator is ``Prefetch::Generator``).

Each pipeline's bottleneck is looked for in its slowest run (the longest call of its output
stage) on the given host. A synchronous stage's producers are all on the critical path; an
asynchronous stage's (prefetch, parallel map or interleave, DataLoader workers: its producers
run on other threads) only when its call in that run was slow (``SLOW_CALL_NS``): otherwise
its buffer hid them. Each stage's own work is its self time (for an asynchronous stage, the
wait its producers do not explain); the stage with most work on the critical path is the
bottleneck.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stepscope.analysis.run_model import intervals
from stepscope.analysis.run_model.frameworks import input_library_of
from stepscope.analysis.run_model.steps import device_planes
from stepscope.model import schema
from stepscope.model.events import EventTable, codes_of, distinct

I64 = NDArray[np.int64]

PREFIX = "Iterator"
SEP = "::"
ROOT = PREFIX + SEP + "Root"
SLOW_CALL_NS = 50_000  # a call slower than 50 µs counts as slow
ASYNC_KINDS = frozenset({"Prefetch", "ParallelMap", "ParallelInterleave", "ParallelBatch",
                         "MapAndBatch", "ParallelFilter", "DataService", "PrefetchToDevice",
                         "LegacyParallelInterleave"})
# tf.data's stages that read files, and the stages whose presence in a reader's chain makes
# its reads advance ones (a cache's reader and writer, prefetch, interleave, parallel map):
# XProf's input-op categories, by name (a parallel interleave counts only under one of these).
FILE_READERS = frozenset({"TFRecord", "TextLine", "FixedLengthRecord", "SSTable", "RecordIO"})
ADVANCE_STAGES = ("MemoryReader", "MemoryWriter", "Interleave", "Prefetch", "ParallelMap")
ENQUEUE_KIND = re.compile(r"Enqueue|ToDevice|PinMemory|Transfer|Infeed|Send")
CATEGORIES = ("read_on_demand", "read_in_advance", "preprocessing", "enqueue", "other")
CATEGORY_LABELS = {"read_on_demand": "Reading data on demand",
                   "read_in_advance": "Reading data in advance (cache, prefetch, interleave)",
                   "preprocessing": "Preprocessing", "enqueue": "Enqueuing / transfer to device",
                   "other": "Other data reading or processing"}
# The second iterator of a pipeline that feeds a device (prefetch_to_device).
DEVICE_PIPELINE_SECOND = PREFIX + SEP + "Prefetch" + SEP + "Generator"
_INDEX = re.compile(r"\[\d+\]$")
_VERSION = re.compile(r"(?<=[a-z])V\d+$")
_BOUND = re.compile(r"^(Finite|Forever)(?=[A-Z])")


def normalize(name: str) -> str | None:
    """The stage long name of an iterator event name, or None if it is not a stage's."""
    parts = name.split(SEP)
    if len(parts) < 2 or parts[0] != PREFIX:
        return None
    parts = parts[1:]
    if parts[0] == "Root":
        parts = parts[1:]
    if not parts:
        return None
    cleaned = [_BOUND.sub("", _VERSION.sub("", _INDEX.sub("", p))) for p in parts]
    return SEP.join([PREFIX, *cleaned])


def parent_of(node: str) -> str | None:
    """The consumer of a stage (None for a pipeline's output stage)."""
    head, _, _ = node.rpartition(SEP)
    return head if head != PREFIX else None


def kind_of(node: str) -> str:
    """The stage's own name, the last part of its long name."""
    return node.rpartition(SEP)[2]


@dataclass
class IteratorEvents:
    """The iterator events of one host, as columns."""

    nodes: list[str]  # distinct stage long names, sorted
    rows: I64  # event rows in the host's table
    node: I64  # per row: index into nodes
    line: I64
    start_ns: I64
    end_ns: I64
    self_ns: I64
    # per row: index into pipelines (keys: "<root stage>" or "<root stage>#<root id>")
    pipeline: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    pipelines: list[str] = field(default_factory=list)
    # tf.data's Root wrappers (``Iterator::Root``) around the output stages: no stage of
    # their own, but XProf counts their self time (the iterator's overhead) as preprocessing.
    root_calls: int = 0
    root_total_ns: int = 0
    root_self_ns: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    def subset(self, keep: NDArray[np.bool_]) -> IteratorEvents:
        """The events where ``keep`` is true (the stage names stay the same)."""
        return IteratorEvents(self.nodes, self.rows[keep], self.node[keep], self.line[keep],
                              self.start_ns[keep], self.end_ns[keep], self.self_ns[keep],
                              self.pipeline[keep], self.pipelines)  # no Root wrappers' sums


def iterator_events(table: EventTable) -> IteratorEvents:
    """Every iterator event of ``table``'s host planes, with self time among iterators."""
    normalized = [normalize(n) for n in table.names]
    nodes = sorted({n for n in normalized if n is not None})
    index = {n: i for i, n in enumerate(nodes)}
    # The Root wrappers take the code one past the stages': among the events whose self times
    # are found (their children's are the same with them or without), then set apart.
    wrapper = len(nodes)
    code = np.array([index[n] if n is not None else wrapper if _is_root(raw) else -1
                     for raw, n in zip(table.names, normalized, strict=True)] + [-1],
                    dtype=np.int64)
    # A flag per event, then codes for the iterator events alone: not an int64 code per
    # event (tens of MB over millions of events, the report's peak).
    wanted = (code >= 0)[table.name] if len(table) else np.zeros(0, bool)
    if len(table.planes):
        off = device_planes(table) | np.array(
            [p.name in (schema.PYTHON_TRACER_PLANE, schema.COUNTERS_PLANE, schema.TASK_ENV_PLANE)
             for p in table.planes], dtype=bool)
        wanted &= ~off[table.line_plane][table.line]
    rows = np.flatnonzero(wanted).astype(np.int64)
    del wanted
    node = code[table.name[rows]]
    start = table.start_ns[rows]
    end = start + table.duration_ns[rows]
    line = table.line[rows].astype(np.int64)
    self_ns = intervals.self_times(line, start, end)
    root = node == wrapper
    root_sums = (int(root.sum()), int((end[root] - start[root]).sum()), int(self_ns[root].sum()))
    if root_sums[0]:
        stage = ~root
        rows, node, line, start, end, self_ns = (
            rows[stage], node[stage], line[stage], start[stage], end[stage], self_ns[stage])
    pipeline, pipelines = _pipelines_of(table, nodes, rows, node, start)
    return IteratorEvents(nodes, rows, node, line, start, end, self_ns, pipeline, pipelines,
                          *root_sums)


def _is_root(name: str) -> bool:
    """Whether an event name is tf.data's Root wrapper (``Iterator::Root``)."""
    return name == ROOT or _INDEX.sub("", name) == ROOT


def _root_of(node: str) -> str:
    """The output stage of the pipeline a stage belongs to."""
    return SEP.join(node.split(SEP)[:2])


def _last_value(keys: I64, values: I64, wanted: I64) -> tuple[NDArray[np.bool_], I64]:
    """For each of ``wanted``: whether ``keys`` holds it, and the value of its last row
    there (as ``dict(zip(keys, values))`` would give, without the dict)."""
    if not len(keys):
        return np.zeros(len(wanted), bool), np.zeros(len(wanted), np.int64)
    if bool(np.any(keys[1:] < keys[:-1])):  # a stable sort keeps equal keys' row order
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
    pos = np.searchsorted(keys, wanted, side="right") - 1
    hit = (pos >= 0) & (keys[np.maximum(pos, 0)] == wanted)
    return hit, values[np.maximum(pos, 0)]


def _first_of(keys: I64, values: I64) -> dict[int, int]:
    """Per distinct key, the value of its first row (as ``setdefault`` in row order)."""
    distinct, first = np.unique(keys, return_index=True)
    return dict(zip(distinct.tolist(), values[first].tolist(), strict=True))


def _pipelines_of(table: EventTable, nodes: list[str], rows: I64, node: I64,
                  start: I64) -> tuple[I64, list[str]]:
    """Per iterator event, its pipeline (index), and the pipelines' keys by first call.

    A pipeline's key is its output stage's name, and ``#`` and the id of its Root where the
    events' ids lead there. Rows carry codes (the root's, the found id), never a string each:
    a host of millions of iterator events holds a few integer columns here."""
    if not len(rows):
        return np.zeros(0, np.int64), []
    roots = sorted({_root_of(n) for n in nodes})
    root_index = {r: i for i, r in enumerate(roots)}
    root = np.array([root_index[_root_of(n)] for n in nodes], np.int64)[node]
    found = np.zeros(len(rows), np.int64)  # the Root's id, where ``has``
    has = np.zeros(len(rows), bool)
    id_rows, ids = table.int_stat("id")
    if len(id_rows):
        parent_rows, parent_ids = table.int_stat("parent_id")
        # TensorFlow's ids, for every iterator-named event (the Root wrapper included).
        named = np.array([n.startswith(PREFIX + SEP) for n in table.names] + [False], bool)
        on = named[table.name[id_rows]]
        id_rows, ids = id_rows[on], ids[on]
        with_parent, parent_of_row = _last_value(parent_rows, parent_ids, id_rows)
        parent = _first_of(ids[with_parent], parent_of_row[with_parent])
        with_id, row_id = _last_value(id_rows, ids, rows)
        stage_of_id = _first_of(row_id[with_id], node[with_id])
        memo: dict[int, int | None] = {}

        def root_id(i: int) -> int | None:
            """The id naming iterator ``i``'s pipeline (its Root's, or its output stage's);
            None where the chain of parents breaks before an output stage (events of
            DataLoader worker processes: their ids come from another process)."""
            seen: list[int] = []
            result: int | None = None
            while len(seen) < 100:
                if i in memo:
                    result = memo[i]
                    break
                seen.append(i)
                n = stage_of_id.get(i)
                if n is not None and parent_of(nodes[n]) is None:
                    result = parent.get(i, i)  # TF: the Root wrapper's id
                    break
                if i not in parent:
                    break
                i = parent[i]
            for each in seen:
                memo[each] = result
            return result

        distinct_ids, inverse = codes_of(row_id[with_id])
        results = [root_id(i) for i in distinct_ids.tolist()]
        ok = np.array([r is not None for r in results], bool)
        value = np.array([0 if r is None else r for r in results], np.int64)
        has[with_id] = ok[inverse]
        found[with_id] = value[inverse]
    # The distinct keys: (root, found id) pairs, named as text once each. The found ids are
    # few: coded first, then one small key a row (not a sort of rows of three).
    found_ids, found_code = codes_of(found)
    found_code += 1
    found_code[~has] = 0
    del has, found
    pair_keys, pair_of = codes_of(root * np.int64(len(found_ids) + 1) + found_code)
    del root, found_code
    pairs = [(int(k) // (len(found_ids) + 1), int(k) % (len(found_ids) + 1)) for k in pair_keys]
    names = [f"{roots[r]}#{int(found_ids[c - 1])}" if c else roots[r] for r, c in pairs]
    if len(id_rows):
        # Events whose chain broke join the busiest pipeline of their output stage's name.
        counts = np.bincount(pair_of, minlength=len(names))
        by_name: dict[str, int] = {}
        for key, count in zip(names, counts.tolist(), strict=True):
            by_name[key] = by_name.get(key, 0) + count
        best: dict[str, tuple[int, str]] = {}
        for key in sorted(by_name):
            name, sep, _ = key.partition("#")
            if sep and by_name[key] > best.get(name, (-1, ""))[0]:
                best[name] = (by_name[key], key)
        names = [best[k][1] if "#" not in k and k in best else k for k in names]
    distinct = sorted(set(names))
    code = {k: i for i, k in enumerate(distinct)}
    key_of_row = np.array([code[k] for k in names], np.int64)[pair_of]
    first = np.full(len(distinct), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, key_of_row, start)
    order = sorted(range(len(distinct)), key=lambda i: (int(first[i]), distinct[i]))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank[key_of_row].astype(np.int64), [distinct[i] for i in order]


@dataclass
class NodeTotals:
    """Per stage: calls, total and self time (ns), first start, and the lines it ran on."""

    calls: I64
    total_ns: I64
    self_ns: I64
    first_ns: I64


def node_totals(ev: IteratorEvents, lo: int | None = None, hi: int | None = None) -> NodeTotals:
    """Per-stage totals over all events, or over the part of each inside [lo, hi)."""
    n = len(ev.nodes)
    start, end, self_ns = ev.start_ns, ev.end_ns, ev.self_ns.astype(np.float64)
    node = ev.node
    if lo is not None and hi is not None:
        keep = (end > lo) & (start < hi)
        start, end, node, self_ns = start[keep], end[keep], node[keep], self_ns[keep]
        clipped_start, clipped_end = np.maximum(start, lo), np.minimum(end, hi)
        dur = np.maximum(end - start, 1)
        self_ns = self_ns * (clipped_end - clipped_start) / dur
        start, end = clipped_start, clipped_end
    calls = np.bincount(node, minlength=n).astype(np.int64)
    total = np.bincount(node, weights=(end - start).astype(np.float64), minlength=n)
    own = np.bincount(node, weights=self_ns, minlength=n)
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, node, start)
    return NodeTotals(calls, total.astype(np.int64), own.astype(np.int64), first)


def children_of(nodes: list[str]) -> dict[str, list[str]]:
    """Each stage's producers (the stages it reads), by long name."""
    present = set(nodes)
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for n in nodes:
        parent = parent_of(n)
        if parent is not None and parent in present:
            out[parent].append(n)
    return out


def async_nodes(ev: IteratorEvents) -> set[str]:
    """Stages whose producers run on other threads than they do (or that are async by kind)."""
    out = {n for n in ev.nodes if kind_of(n) in ASYNC_KINDS}
    lines_of: dict[int, set[int]] = {}
    for node, line in _distinct_pairs(ev.node, ev.line):
        lines_of.setdefault(node, set()).add(line)
    index = {n: i for i, n in enumerate(ev.nodes)}
    for n in ev.nodes:
        parent = parent_of(n)
        if parent is not None and parent in index and (
                lines_of.get(index[n], set()) - lines_of.get(index[parent], set())):
            out.add(parent)
    return out


def _distinct_pairs(a: I64, b: I64) -> list[tuple[int, int]]:
    """The distinct (a, b) pairs of two columns of non-negative integers, ascending: one int64
    key a row, sorted (a sort of rows of two, ``np.unique(axis=...)``, took a quarter of a
    second over a million iterator events)."""
    if not len(a):
        return []
    width = int(b.max()) + 1
    if int(a.max()) >= (1 << 62) // width:  # no key fits: the rows themselves
        return [(int(x), int(y)) for x, y in np.unique(np.stack([a, b]), axis=1).T.tolist()]
    key = np.asarray(a, np.int64) * np.int64(width)
    key += b
    found = distinct(key)
    return list(zip((found // width).tolist(), (found % width).tolist(), strict=True))


def work_ns(nodes: list[str], totals: NodeTotals, asynchronous: set[str]) -> I64:
    """Each stage's own work: self time, less for an async stage its producers' time."""
    work = totals.self_ns.copy()
    index = {n: i for i, n in enumerate(nodes)}
    for n, kids in children_of(nodes).items():
        if n in asynchronous and kids:
            produced = sum(int(totals.total_ns[index[k]]) for k in kids)
            work[index[n]] = max(0, int(work[index[n]]) - produced)
    return work


def per_call_ns(ev: IteratorEvents, totals: NodeTotals, work: I64,
                asynchronous: set[str]) -> I64:
    """Each stage's own work in a typical call (ns): the lower quartile of its calls' self
    times, or, for an asynchronous stage, its work (see ``work_ns``) over its calls.

    The lower quartile, not the mean or the median: on a busy machine interference only adds
    time (a thread preempted inside a call, the wake-ups of the threads a TensorFlow function
    runs on), and it added to half the calls. A serial map of ``x + 1`` measured 37 µs (median)
    and 28 µs (lower quartile) quiet; beside 4 CPU hogs 42-90 µs and 25-32 µs. An asynchronous
    stage's calls wait for producers on other threads, so no one call measures its work: there
    the mean of what is left is all there is."""
    n = len(ev.nodes)
    out = np.zeros(n, np.int64)
    if len(ev):
        order = np.lexsort((ev.self_ns, ev.node))
        node, own = ev.node[order], ev.self_ns[order]
        first = np.searchsorted(node, np.arange(n), side="left")
        count = np.searchsorted(node, np.arange(n), side="right") - first
        has = count > 0
        out[has] = own[(first + (count - 1) // 4)[has]]
    for i, name in enumerate(ev.nodes):
        if name in asynchronous:
            out[i] = int(work[i]) // max(int(totals.calls[i]), 1)
    return out


def category_of(node: str, kids: list[str], asynchronous: set[str],
                tf_data: bool = False) -> str:
    """The host-side input category of a stage (see CATEGORIES).

    tf.data's stages (``tf_data``) take XProf's rule, by name alone: a stage that reads a
    file (FILE_READERS) reads in advance when its chain holds a caching, prefetching,
    interleaving or parallel-map stage (ADVANCE_STAGES) and on demand otherwise; every
    other stage, other sources (``Range``, ``TensorSlice``) included, is preprocessing.
    Other libraries' sources (stepscope.data's, the DataLoader's) are what the program
    reads: in advance under an asynchronous stage (by kind, or a DataLoader's workers,
    which run in other processes by construction)."""
    kind = kind_of(node)
    if tf_data:
        if kind not in FILE_READERS:
            return "preprocessing"
        stages = node.split(SEP)[1:-1]
        if any(s.startswith(ADVANCE_STAGES) for s in stages):
            return "read_in_advance"
        return "read_on_demand"
    if ENQUEUE_KIND.search(kind):
        return "enqueue"
    if kind == "Cache":
        return "read_in_advance"
    if kids:
        return "preprocessing"
    # A source: read in advance when an ancestor buffers or parallelises it.
    parent = parent_of(node)
    while parent is not None:
        if parent in asynchronous or kind_of(parent) in ("Cache", "Interleave"):
            return "read_in_advance"
        parent = parent_of(parent)
    return "read_on_demand"


@dataclass
class GraphNode:
    """One stage of the slowest run's pipeline graph."""

    name: str
    kind: str
    parent: str | None
    start_us: float  # from the run's start
    total_ms: float
    self_ms: float
    calls: int
    asynchronous: bool
    critical: bool = False
    bottleneck: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass
class Bottleneck:
    """The bottleneck analysis of one host's slowest pipeline run."""

    host: str | None
    stage: str | None
    recommendation: str
    run_start_ns: int | None = None
    run_ms: float | None = None
    critical_path: list[str] = field(default_factory=list)
    graph: list[GraphNode] = field(default_factory=list)
    pipeline: str | None = None  # "Host:0"…: the pipeline whose run this is
    stage_ms: float | None = None  # the bottleneck stage's own work in that run

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"host": self.host, "pipeline": self.pipeline, "stage": self.stage,
                "stage_ms": self.stage_ms, "recommendation": self.recommendation,
                "run_start_ns": self.run_start_ns, "run_ms": self.run_ms,
                "critical_path": list(self.critical_path),
                "slow_call_us": SLOW_CALL_NS / 1000,
                "graph": [n.to_dict() for n in self.graph]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Bottleneck:
        """The inverse of ``to_dict``."""
        return cls(d["host"], d["stage"], str(d["recommendation"]), d["run_start_ns"],
                   d["run_ms"], [str(n) for n in d["critical_path"]],
                   [GraphNode(**node) for node in d["graph"]], d.get("pipeline"),
                   d.get("stage_ms"))


@dataclass
class Pipeline:
    """One input pipeline of a host: its calls and its slowest run's bottleneck."""

    host: str
    name: str  # "Host:0", "Device:0", as XProf names them
    kind: str  # "host" or "device"
    root: str  # its output stage's long name
    calls: int
    avg_ms: float
    min_ms: float
    max_ms: float  # the slowest call, the first (start-up) one included
    slow_calls: int  # calls slower than SLOW_CALL_NS
    bottleneck: Bottleneck  # of its slowest run (start-up call left out, see below)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"host": self.host, "name": self.name, "kind": self.kind, "root": self.root,
                "calls": self.calls, "avg_ms": self.avg_ms, "min_ms": self.min_ms,
                "max_ms": self.max_ms, "slow_calls": self.slow_calls,
                "bottleneck": self.bottleneck.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pipeline:
        """The inverse of ``to_dict``."""
        return cls(str(d["host"]), str(d["name"]), str(d["kind"]), str(d["root"]),
                   int(d["calls"]), float(d["avg_ms"]), float(d["min_ms"]),
                   float(d["max_ms"]), int(d["slow_calls"]),
                   Bottleneck.from_dict(d["bottleneck"]))


NO_EVENTS = ("No input-pipeline iterator events were recorded: use tf.data, PyTorch's "
             "DataLoader or stepscope.data.instrument(...) while a session records to get a "
             "bottleneck analysis.")


def find_pipelines(host: str, table: EventTable,
                   ev: IteratorEvents | None = None) -> list[Pipeline]:
    """Every input pipeline of ``host``, each with its slowest run's bottleneck."""
    ev = ev if ev is not None else iterator_events(table)
    roots = [i for i, n in enumerate(ev.nodes) if parent_of(n) is None]
    library = input_library_of(table) if len(ev) else ""
    out: list[Pipeline] = []
    counts = {"host": 0, "device": 0}
    for p in range(len(ev.pipelines)):
        mine = ev.subset(ev.pipeline == p)
        calls = np.flatnonzero(np.isin(mine.node, roots))
        if not len(calls):
            continue  # producers whose consumer was not recorded
        root = mine.nodes[int(mine.node[calls[0]])]
        device = any(n == DEVICE_PIPELINE_SECOND or n.startswith(DEVICE_PIPELINE_SECOND + SEP)
                     for n in (mine.nodes[i] for i in np.unique(mine.node).tolist()))
        kind = "device" if device else "host"
        name = f"{kind.capitalize()}:{counts[kind]}"
        counts[kind] += 1
        took = (mine.end_ns[calls] - mine.start_ns[calls]).astype(np.float64)
        found = _run_bottleneck(host, table, mine, roots, library)
        found.pipeline = name
        out.append(Pipeline(host, name, kind, root, len(calls), float(took.mean()) / 1e6,
                            float(took.min()) / 1e6, float(took.max()) / 1e6,
                            int((took > SLOW_CALL_NS).sum()), found))
    return out


def find_bottleneck(host: str, table: EventTable, ev: IteratorEvents | None = None,
                    pipelines: list[Pipeline] | None = None) -> Bottleneck:
    """The bottleneck of ``host``'s slowest host pipeline run, with its recommendation."""
    ev = ev if ev is not None else iterator_events(table)
    found = pipelines if pipelines is not None else find_pipelines(host, table, ev)
    ranked = [p for p in found if p.kind == "host"] or found
    if not ranked:
        return Bottleneck(host, None, NO_EVENTS)
    return max(ranked, key=lambda p: (p.bottleneck.run_ms or 0.0, p.name)).bottleneck


def _run_bottleneck(host: str, table: EventTable, ev: IteratorEvents,
                    roots: list[int], library: str = "") -> Bottleneck:
    """The bottleneck of the slowest run among ``ev``'s (one pipeline's events)."""
    root_rows = _steady_root_rows(ev, roots)
    slowest = int(root_rows[np.argmax(ev.end_ns[root_rows] - ev.start_ns[root_rows])])
    lo, hi = int(ev.start_ns[slowest]), int(ev.end_ns[slowest])
    root = ev.nodes[int(ev.node[slowest])]
    present = set(np.unique(ev.node).tolist())
    members = [n for i, n in enumerate(ev.nodes)
               if i in present and (n == root or n.startswith(root + SEP))]
    totals = node_totals(ev, lo, hi)
    index = {n: i for i, n in enumerate(ev.nodes)}
    asynchronous = async_nodes(ev)
    work = work_ns(ev.nodes, totals, asynchronous)
    kids = children_of(members)

    path: list[str] = []
    todo = [root]
    while todo:
        n = todo.pop(0)
        if totals.calls[index[n]] == 0:
            continue
        path.append(n)
        calls = int(totals.calls[index[n]])
        slow = totals.total_ns[index[n]] / max(calls, 1) >= SLOW_CALL_NS
        if n not in asynchronous or slow:
            todo.extend(k for k in kids[n])
    run_ns = hi - lo
    stage: str | None = None
    if run_ns >= SLOW_CALL_NS and path:
        best = max(path, key=lambda n: int(work[index[n]]))
        if work[index[best]] > 0:
            stage = best
    graph = [GraphNode(
        name=n, kind=kind_of(n), parent=parent_of(n) if n != root else None,
        start_us=(int(totals.first_ns[index[n]]) - lo) / 1e3 if totals.calls[index[n]] else 0.0,
        total_ms=int(totals.total_ns[index[n]]) / 1e6, self_ms=int(work[index[n]]) / 1e6,
        calls=int(totals.calls[index[n]]), asynchronous=n in asynchronous,
        critical=n in path, bottleneck=n == stage) for n in members]
    workers = _dataloader_stat(table, ev, slowest, "num_workers")
    text = recommend(stage, run_ns, workers, library)
    if workers and _dataloader_stat(table, ev, slowest, WORKERS_RECORDED) == 0:
        text = UNRECORDED_WORKERS.format(workers=workers) + " " + text
    return Bottleneck(host, stage, text, lo, run_ns / 1e6,
                      path, graph,
                      stage_ms=int(work[index[stage]]) / 1e6 if stage is not None else None)


def _steady_root_rows(ev: IteratorEvents, roots: list[int]) -> I64:
    """Calls of the pipelines' output stages, less each one's first when it has 3 or more.

    A pipeline's first call starts it (worker processes, threads, files, buffers filling);
    the bottleneck of a running pipeline is in the calls after.
    """
    rows = np.flatnonzero(np.isin(ev.node, roots))
    if len(rows) == 0:
        return rows
    order = rows[np.lexsort((ev.start_ns[rows], ev.node[rows]))]
    node = ev.node[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = node[1:] != node[:-1]
    counts = np.bincount(node, minlength=len(ev.nodes))
    drop = first & (counts[node] >= 3)
    out: I64 = order[~drop]
    return out


# Set by stepscope's DataLoader instrumentation: 0 when the iterator's workers started before
# stepscope could hook them (capture.input_pipeline).
WORKERS_RECORDED = "workers_recorded"
UNRECORDED_WORKERS = (
    "The DataLoader's {workers} worker processes started before stepscope was recording, so "
    "their work is NOT in this profile (only the training loop's waits for them are): make "
    "the iterator (for batch in loader) inside stepscope.torch.profile(...), or start the "
    "session before it.")


def _dataloader_stat(table: EventTable, ev: IteratorEvents, row: int,
                     stat: str) -> int | None:
    """A stat of the DataLoader's event of the run (``num_workers``...), where it has one."""
    st = table.stats
    try:
        code = st.stat_names.index(stat)
    except ValueError:
        return None
    hit = np.flatnonzero((st.name == code) & (st.event == ev.rows[row]))
    return int(st.value_of(int(hit[0]))) if len(hit) else None


def recommend(stage: str | None, run_ns: int, num_workers: int | None = None,
              library: str = "tf.data") -> str:
    """A concrete next step for the bottleneck ``stage`` (None: no slow stage), in the words
    of the pipeline's library (``frameworks.INPUT_LIBRARIES``: tf.data, stepscope.data, or ""
    for stages the user named by hand, which get advice that names no library)."""
    if stage is None:
        return (f"No input stage is slow: the slowest pipeline call took {run_ns / 1e3:.1f} µs "
                f"(slow is {SLOW_CALL_NS / 1e3:.0f} µs or more), or no stage did work of its "
                "own. Look at the rest of the step.")
    kind = kind_of(stage)
    if stage.startswith(PREFIX + SEP + "DataLoader"):
        workers = (f"raise DataLoader(num_workers=...) (now {num_workers})"
                   if num_workers else "load in worker processes: DataLoader(num_workers=4 "
                   "or more)")
        if kind == "Map":
            return (f"Reading items (the dataset's __getitem__) is the bottleneck: {workers}; "
                    "cache decoded items, or move augmentation to the device (after "
                    ".to(device)).")
        if kind == "Batch":
            return (f"Batching (collate_fn) is the bottleneck: make collate_fn cheaper, "
                    f"or {workers}.")
        return (f"The training loop waits for the DataLoader with no slow stage inside it: "
                f"{workers}, raise prefetch_factor, keep workers with persistent_workers=True, "
                "and use pin_memory=True on a GPU.")
    tf = library == "tf.data"
    ours = library == "stepscope.data"
    if kind == "ParallelMap":
        more = ("raise num_parallel_calls (tf.data.AUTOTUNE)" if tf
                else "raise num_parallel_calls" if ours else "run more of it at once")
        return (f"The parallel map is the bottleneck: {more}, make the mapped function "
                "cheaper, cache after it if it is deterministic, or move augmentation to the "
                "device.")
    if kind in ("Map", "MapAndBatch"):
        parallel = ("run it in parallel (num_parallel_calls=tf.data.AUTOTUNE), " if tf
                    else "run it in parallel (.map(fn, num_parallel_calls=N)), " if ours
                    else "run it in parallel (threads, or worker processes for "
                    "Python-heavy work), ")
        return (f"The map stage is the bottleneck: {parallel}make the function cheaper, "
                "cache after it if it is deterministic, or move augmentation to the device.")
    if kind in ("Batch", "PaddedBatch", "ParallelBatch"):
        return ("Batching is the bottleneck: batch before the map (vectorise the map over a "
                "batch)" + (", or batch in parallel (num_parallel_calls)." if tf else "."))
    if kind == "Filter":
        return ("The filter is the bottleneck: make its predicate cheaper or filter earlier, "
                "before expensive stages.")
    if kind == "Shuffle":
        return "Shuffling is the bottleneck: use a smaller shuffle buffer, or shuffle file names."
    if kind in ("Prefetch", "PrefetchToDevice"):
        return ("The consumer waits on prefetch with no slow producer traced: raise the "
                "prefetch buffer and parallelise the stages before it.")
    if "Interleave" in kind:
        return ("Interleave is the bottleneck: raise num_parallel_calls and cycle_length, or "
                "cache after it.")
    if kind == "Cache":
        return "Reading from the cache is the bottleneck: cache to memory instead of a file."
    if ENQUEUE_KIND.search(kind):
        return ("Transfer to the device is the bottleneck: prefetch to the device, pin host "
                "memory and send larger batches.")
    if tf:
        return (f"Reading data ({kind}) is the bottleneck: read in parallel (interleave with "
                "num_parallel_calls), cache after the expensive read (.cache()), and add "
                "prefetch after it.")
    return (f"Reading data ({kind}) is the bottleneck: read ahead of the step on a thread "
            + ("(.prefetch(n) after the read) " if ours else "")
            + "and keep what is read more than once in memory"
            + (" (.cache())." if ours else "."))


__all__ = ["ADVANCE_STAGES", "ASYNC_KINDS", "CATEGORIES", "CATEGORY_LABELS", "FILE_READERS", "ROOT",
           "Bottleneck", "GraphNode",
           "IteratorEvents", "NodeTotals", "Pipeline", "SLOW_CALL_NS", "async_nodes",
           "category_of", "children_of", "find_bottleneck", "find_pipelines", "iterator_events",
           "kind_of", "node_totals", "normalize", "parent_of", "per_call_ns", "recommend",
           "work_ns"]
