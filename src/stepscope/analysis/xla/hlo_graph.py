"""Graph viewer: the HLO graph around one op, to a chosen depth.

A pure function of one decoded HLO module. From the chosen instruction the graph follows
operands (upward) and users (downward) within its computation, ``depth`` steps each way.
A fusion is one node (collapsed, with the number of ops it fuses) or, expanded, also the
instructions of its fused computation, grouped under it. Each node carries its shape and,
where the op profile has it, the op's device time. Nodes get a layer (longest path from the
graph's sources) and an order within it, so that a view only has to place boxes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from stepscope.errors import not_found
from stepscope.model.hlo import Computation, HloModule, Instruction

# A neighbourhood larger than this is cut (a node's operands or users past it are dropped).
MAX_NODES = 400
MAX_DEPTH = 20


@dataclass
class GraphNode:
    """One instruction of the graph."""

    name: str
    opcode: str
    shape: str
    computation: str
    distance: int  # steps from the chosen op (operands and users alike)
    layer: int = 0  # longest path from a source of the drawn graph
    order: int = 0  # position within its layer
    time_ms: float | None = None  # total device time, from the op profile where it has one
    occurrences: int = 0
    fusion_kind: str = ""
    fused_ops: int = 0  # a fusion: how many instructions it fuses
    group: str = ""  # an expanded fusion's instruction: the fusion it belongs to
    op_name: str = ""  # the framework op it came from
    is_root: bool = False  # the chosen op


@dataclass
class HloGraph:
    """The neighbourhood of one op."""

    module: str
    program_id: str
    op: str
    depth: int
    expand_fusions: bool
    nodes: list[GraphNode]
    edges: list[tuple[str, str]]  # (operand, user)
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "program_id": self.program_id, "op": self.op,
                "depth": self.depth, "expand_fusions": self.expand_fusions,
                "nodes": [asdict(n) for n in self.nodes],
                "edges": [{"source": a, "target": b} for a, b in self.edges],
                "truncated": self.truncated, "notes": self.notes}


@dataclass
class OpTime:
    """An op's time over the run (from the op profile's model)."""

    total_ps: int
    occurrences: int


def _computation_of(module: HloModule, name: str) -> tuple[Computation, Instruction] | None:
    for c in module.computations:
        for i in c.instructions:
            if i.name == name:
                return c, i
    return None


def hlo_graph(module: HloModule, op: str, depth: int = 2, *, expand_fusions: bool = False,
              times: dict[str, OpTime] | None = None, program_id: str = "",
              max_nodes: int = MAX_NODES) -> HloGraph:
    """The graph of ``op``'s operands and users in ``module``, ``depth`` steps each way."""
    if depth < 0 or depth > MAX_DEPTH:
        raise ValueError(f"The depth must be between 0 and {MAX_DEPTH}, not {depth}.")
    found = _computation_of(module, op)
    if found is None:
        raise not_found("op", op, f"program {module.name!r}",
                        [i.name for c in module.computations for i in c.instructions])
    comp, start = found
    times = times or {}
    by_id = {i.id: i for i in comp.instructions}
    users: dict[int, list[int]] = {}
    for i in comp.instructions:
        for o in dict.fromkeys(i.operand_ids):
            users.setdefault(o, []).append(i.id)
    distance = {start.id: 0}
    queue = deque([start.id])
    truncated = False
    while queue:
        iid = queue.popleft()
        if distance[iid] >= depth:
            continue
        for nxt in [*by_id[iid].operand_ids, *users.get(iid, [])]:
            if nxt in distance or nxt not in by_id:
                continue
            if len(distance) >= max_nodes:
                truncated = True
                break
            distance[nxt] = distance[iid] + 1
            queue.append(nxt)
    kept = [i for i in comp.instructions if i.id in distance]  # program order
    nodes = [_node(module, comp, i, distance[i.id], times, i.id == start.id) for i in kept]
    edges = [(by_id[o].name, i.name) for i in kept for o in dict.fromkeys(i.operand_ids)
             if o in distance]
    if expand_fusions:
        for i in kept:
            if i.opcode != "fusion" or not i.called_computation_ids:
                continue
            fused = module.computation(i.called_computation_ids[0])
            if fused is None:
                continue
            if len(nodes) + len(fused.instructions) > max_nodes:
                truncated = True
                continue
            inner_ids = {f.id: f for f in fused.instructions}
            for f in fused.instructions:
                node = _node(module, fused, f, distance[i.id], times)
                node.group = i.name
                nodes.append(node)
                edges += [(inner_ids[o].name, f.name) for o in dict.fromkeys(f.operand_ids)
                          if o in inner_ids]
    _layout(nodes, edges)
    notes = []
    if truncated:
        notes.append(f"The graph is cut at {max_nodes} nodes; choose a smaller depth.")
    return HloGraph(module.name, program_id, op, depth, expand_fusions, nodes, edges,
                    truncated, notes)


def _node(module: HloModule, comp: Computation, i: Instruction, distance: int,
          times: dict[str, OpTime], is_root: bool = False) -> GraphNode:
    fused = 0
    if i.opcode == "fusion" and i.called_computation_ids:
        called = module.computation(i.called_computation_ids[0])
        fused = len(called.instructions) if called is not None else 0
    t = times.get(i.name)
    return GraphNode(i.name, i.opcode, i.shape.text(), comp.name, distance,
                     time_ms=None if t is None else t.total_ps / 1e9,
                     occurrences=0 if t is None else t.occurrences,
                     fusion_kind=i.fusion_kind, fused_ops=fused, op_name=i.op_name,
                     is_root=is_root)


def _layout(nodes: list[GraphNode], edges: list[tuple[str, str]]) -> None:
    """Layer each node by its longest path from a source (nodes come in program order, which
    is a topological order within each computation) and number them within layers. An
    expanded fusion's instructions form a block of columns of their own, to the right,
    starting at the fusion's layer."""
    preds: dict[str, list[str]] = {}
    for a, b in edges:
        preds.setdefault(b, []).append(a)
    groups: dict[str, list[GraphNode]] = {}
    for n in nodes:
        groups.setdefault(n.group, []).append(n)
    layer_of: dict[str, int] = {}
    column = 0
    for group, members in groups.items():  # the main graph ("") comes first
        base = layer_of.get(group, 0)
        inner: dict[str, int] = {}
        for n in members:  # operands precede users in program order
            inner[n.name] = max([inner[p] + 1 for p in preds.get(n.name, []) if p in inner],
                                default=0)
            n.layer = layer_of[n.name] = base + inner[n.name]
        count: dict[int, int] = {}
        for n in members:
            n.order = column + count.get(n.layer, 0)
            count[n.layer] = count.get(n.layer, 0) + 1
        column += max(count.values(), default=0)


def op_times(ops: list[Any], program_id: str, module_name: str) -> dict[str, OpTime]:
    """The op profile's times of one program's ops (``XlaModel.ops``), by op name."""
    out: dict[str, OpTime] = {}
    for o in ops:
        if o.program_id == program_id or (not o.program_id and o.module == module_name):
            out[o.name] = OpTime(int(o.total_ps), int(o.occurrences))
    return out


def graph_text(graph: HloGraph) -> str:
    """The graph as text: one line per node (layer by layer) with its operands."""
    operands: dict[str, list[str]] = {}
    for a, b in graph.edges:
        operands.setdefault(b, []).append(a)
    lines = [f"{graph.module} ({graph.program_id}): {graph.op}, depth {graph.depth}"
             + (", fusions expanded" if graph.expand_fusions else "")]
    for n in sorted(graph.nodes, key=lambda n: (n.layer, n.order)):
        time = "" if n.time_ms is None else f"  [{n.time_ms:.3f} ms × {n.occurrences}]"
        mark = "*" if n.is_root else " "
        inside = f" (in {n.group})" if n.group else ""
        fused = f" fuses {n.fused_ops}" if n.fused_ops else ""
        args = ", ".join(operands.get(n.name, []))
        lines.append(f"{mark} L{n.layer} {n.name} = {n.shape} {n.opcode}({args}){fused}"
                     f"{inside}{time}")
    lines += graph.notes
    return "\n".join(lines)


def graph_dot(graph: HloGraph) -> str:
    """The graph in Graphviz's DOT language."""
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = ["digraph hlo {", "  node [shape=box, fontname=monospace];"]
    for n in graph.nodes:
        parts = [n.name, f"{n.opcode} {n.shape}"]
        if n.time_ms is not None:
            parts.append(f"{n.time_ms:.3f} ms")
        label = '"' + "\\n".join(q(p)[1:-1] for p in parts) + '"'
        style = ", style=bold" if n.is_root else ""
        lines.append(f"  {q(n.name)} [label={label}{style}];")
    lines += [f"  {q(a)} -> {q(b)};" for a, b in graph.edges]
    lines.append("}")
    return "\n".join(lines)
