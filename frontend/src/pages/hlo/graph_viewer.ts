// Graph viewer: the HLO graph around one op (its operands above, its users below) to a depth,
// fusions collapsed or expanded, drawn as SVG; each node shows its shape and its device time
// from the op profile. Hovering a node shows its details; clicking one centres the graph on it.
import { toolData } from "../../api";
import { h, ms, svg } from "../../dom";
import type { PageContext } from "../registry";
import { GraphData, GraphNode } from "./data";
import { hloStyle } from "./style";

const NODE_W = 200, NODE_H = 46, GAP_X = 28, GAP_Y = 40, PAD = 20;

function clip(text: string, chars: number): string {
  return text.length > chars ? text.slice(0, chars - 1) + "…" : text;
}

function fill(n: GraphNode): string {
  if (n.is_root) return "#fce8e6";
  if (n.group) return "#f3e8fd";
  if (n.opcode === "fusion") return "#e6f4ea";
  if (n.opcode === "parameter" || n.opcode === "constant") return "#f1f3f4";
  return "#e8f0fe";
}

function drawGraph(d: GraphData, centre: (op: string) => void): HTMLElement {
  const layers = Math.max(0, ...d.nodes.map((n) => n.layer)) + 1;
  const widest = Math.max(1, ...d.nodes.map((n) => n.order + 1));
  const W = PAD * 2 + widest * (NODE_W + GAP_X), H = PAD * 2 + layers * (NODE_H + GAP_Y);
  const at = new Map<string, { x: number; y: number }>();
  for (const n of d.nodes) {
    at.set(n.name, { x: PAD + n.order * (NODE_W + GAP_X), y: PAD + n.layer * (NODE_H + GAP_Y) });
  }
  const root = svg("svg", { id: "gv-svg", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                            role: "group", "aria-label": `HLO graph around ${d.op}`,
                            "data-nodes": d.nodes.length, "data-edges": d.edges.length });
  root.append(svg("defs", {}, svg("marker", { id: "gv-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#80868b" }))));
  // Each expanded fusion's instructions in a dashed box named for the fusion.
  const groups = new Map<string, GraphNode[]>();
  for (const n of d.nodes) if (n.group) groups.set(n.group, [...(groups.get(n.group) ?? []), n]);
  for (const [group, members] of groups) {
    const xs = members.map((n) => at.get(n.name)!.x), ys = members.map((n) => at.get(n.name)!.y);
    const x = Math.min(...xs) - 8, y = Math.min(...ys) - 14;
    root.append(svg("g", { class: "gv-group", "data-fusion": group },
      svg("rect", { x, y, width: Math.max(...xs) - x + NODE_W + 8, height: Math.max(...ys) - y + NODE_H + 8,
                    rx: 6, fill: "none", stroke: "#a142f4", "stroke-dasharray": "5 3" }),
      svg("text", { x: x + 4, y: y + 10, "font-size": 10, fill: "#a142f4" }, clip(`inside ${group}`, 40))));
  }
  for (const e of d.edges) {
    const a = at.get(e.source), b = at.get(e.target);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W / 2, y1 = a.y + NODE_H, x2 = b.x + NODE_W / 2, y2 = b.y;
    const my = (y1 + y2) / 2;
    root.append(svg("path", { class: "gv-edge", "data-source": e.source, "data-target": e.target,
      d: `M ${x1} ${y1} C ${x1} ${my}, ${x2} ${my}, ${x2} ${y2}`, fill: "none", stroke: "#9aa0a6",
      "marker-end": "url(#gv-arrow)" }));
  }
  const wrap = h("div", { className: "chart-wrap" });
  const card = h("div", { className: "hover-card", id: "gv-card", role: "tooltip", hidden: true });
  for (const n of d.nodes) {
    const p = at.get(n.name)!;
    const time = n.time_ms === null ? "" : ` · ${ms(n.time_ms)} ms`;
    const g = svg("g", { class: "gv-node", tabindex: 0, "data-name": n.name, "data-layer": n.layer,
                         "data-root": String(n.is_root), "aria-label": `${n.name} ${n.opcode} ${n.shape}`,
                         ...(n.group ? { "data-group": n.group } : {}) },
      svg("rect", { x: p.x, y: p.y, width: NODE_W, height: NODE_H, rx: 5, fill: fill(n),
                    stroke: n.is_root ? "#d93025" : "#bdc1c6", "stroke-width": n.is_root ? 2 : 1 }),
      svg("text", { x: p.x + 6, y: p.y + 15, "font-size": 11, "font-weight": 600 }, clip(n.name, 30)),
      svg("text", { x: p.x + 6, y: p.y + 29, "font-size": 10, fill: "#3c4043" },
          clip(`${n.opcode}${n.fused_ops ? ` (${n.fused_ops} ops)` : ""}${time}`, 34)),
      svg("text", { x: p.x + 6, y: p.y + 41, "font-size": 10, fill: "#5f6368" }, clip(n.shape, 34)));
    const show = () => {
      const row = (k: string, v: string, key: string) => [h("dt", {}, k), h("dd", { "data-key": key }, v)];
      card.replaceChildren(h("h3", {}, n.name), h("dl", { className: "kv" },
        ...row("Op", n.opcode + (n.fusion_kind ? ` (${n.fusion_kind})` : ""), "opcode"),
        ...row("Shape", n.shape, "shape"),
        ...row("Time", n.time_ms === null ? "–" : `${ms(n.time_ms)} ms × ${n.occurrences}`, "time"),
        ...row("Computation", n.computation, "computation"),
        ...(n.fused_ops ? row("Fuses", `${n.fused_ops} ops`, "fused") : []),
        ...(n.group ? row("Inside", n.group, "group") : []),
        ...(n.op_name ? row("Framework op", n.op_name, "op-name") : [])));
      card.dataset.name = n.name;
      card.hidden = false;
      card.style.left = `${Math.min(p.x, W - 300)}px`;
      card.style.top = `${p.y + NODE_H + 4}px`;
    };
    const hide = () => { card.hidden = true; };
    g.addEventListener("mouseenter", show);
    g.addEventListener("focus", show);
    g.addEventListener("mouseleave", hide);
    g.addEventListener("blur", hide);
    g.addEventListener("click", () => { if (!n.is_root) centre(n.name); });
    g.addEventListener("keydown", (ev) => {
      if ((ev as KeyboardEvent).key === "Enter" && !n.is_root) centre(n.name);
    });
    root.append(g);
  }
  wrap.append(root, card);
  return wrap;
}

interface Choice { module: string; op: string; depth: string; expand: boolean; }

async function load(ctx: PageContext, c: Choice): Promise<GraphData> {
  return toolData<GraphData>({ run: ctx.run, host: ctx.host, tool: "graph_viewer", module: c.module,
                               op: c.op, depth: c.depth, expand_fusions: c.expand ? "true" : "" },
                             ctx.progress);
}

export async function renderGraphViewer(ctx: PageContext): Promise<HTMLElement> {
  const page = h("div", { id: "graph-viewer-page", className: "hlo-page" }, hloStyle());
  const body = h("div", {});
  const error = h("p", { className: "note", id: "gv-error", hidden: true });
  const draw = (d: GraphData) => {
    const program = h("select", { id: "gv-module", "aria-label": "Program" },
      ...d.programs.map((p) => h("option", { value: p.label, selected: p.label === d.module_label }, p.label)));
    const op = h("input", { id: "gv-op", list: "gv-ops", value: d.op, "aria-label": "HLO op",
                            placeholder: "HLO op name" });
    const ops = h("datalist", { id: "gv-ops" }, ...d.ops.map((o) => h("option", { value: o })));
    const depth = h("select", { id: "gv-depth", "aria-label": "Depth" },
      ...[0, 1, 2, 3, 4, 5, 6, 8, 10].map((k) => h("option", { value: String(k), selected: k === d.depth },
                                                     `depth ${k}`)));
    const expand = h("input", { type: "checkbox", id: "gv-expand", checked: d.expand_fusions });
    const go = async (c: Choice) => {
      try {
        const next = await load(ctx, c);
        if (!ctx.stale()) draw(next);
      } catch (err) {
        error.textContent = String((err as Error).message ?? err);
        error.hidden = false;
      }
    };
    const current = (): Choice => ({ module: program.value, op: op.value.trim(), depth: depth.value,
                                     expand: expand.checked });
    program.addEventListener("change", () => { void go({ ...current(), op: "" }); });
    op.addEventListener("change", () => { void go(current()); });
    depth.addEventListener("change", () => { void go(current()); });
    expand.addEventListener("change", () => { void go(current()); });
    error.hidden = true;
    body.replaceChildren(
      h("h1", {}, `Graph viewer — ${d.run}${ctx.host ? " — " + ctx.host : ""}`),
      h("div", { className: "controls" }, program, op, ops, depth,
        h("label", {}, expand, " expand fusions")),
      error,
      ...d.notes.map((n) => h("p", { className: "note" }, n)),
      h("section", { className: "card wide" },
        h("h2", { id: "gv-title" }, `${d.op} in ${d.module_label}`),
        h("p", { className: "muted" }, "Operands above, users below; click a node to centre on it."),
        drawGraph(d, (name) => { void go({ ...current(), op: name }); })));
  };
  draw(await load(ctx, { module: "", op: "", depth: "", expand: false }));
  page.append(body);
  return page;
}
