// Op profile: the run's XLA time by category or by program, down to each HLO op (fusions
// expand to the ops they run), coloured by FLOPS utilisation, with idle time, a top-N cut and
// a details card for the op picked. Names reach the page only as text.
import { toolData } from "../../api";
import { h, int, ms, pct } from "../../dom";
import type { PageContext } from "../registry";
import { fig, Group, OpProfileData, OpRow, util, utilColor } from "./data";
import { xlaStyle } from "./style";

type View = "category" | "program";

interface TreeNode { key: string; name: string; level: number; group?: Group; op?: OpRow;
  fused?: { name: string; opcode: string; flops: number }; children: TreeNode[]; }

function opNodes(names: string[] | undefined, ops: Map<string, OpRow>, parent: string,
                 level: number, program?: string): TreeNode[] {
  return (names ?? []).map((n) => ops.get((program ?? "") + "\u0000" + n) ?? ops.get("\u0000" + n))
    .filter((o): o is OpRow => !!o)
    .map((o) => ({ key: `${parent}/${o.program_id}/${o.name}`, name: o.name, level, op: o,
                   children: (o.fused ?? []).map((f) => ({
                     key: `${parent}/${o.program_id}/${o.name}/${f.name}`, name: f.name,
                     level: level + 1, fused: f, children: [] })) }));
}

function tree(data: OpProfileData, view: View, top: number): TreeNode[] {
  const ops = new Map<string, OpRow>();
  for (const o of data.ops) {
    ops.set(o.program_id + "\u0000" + o.name, o);
    if (!ops.has("\u0000" + o.name)) ops.set("\u0000" + o.name, o);
  }
  const cut = (names?: string[]) => (names ?? []).slice(0, top);
  if (view === "category") {
    return data.categories.map((c) => ({ key: `c/${c.name}`, name: c.name, level: 0, group: c,
      children: opNodes(cut(c.ops), ops, `c/${c.name}`, 1) }));
  }
  // Programs apart by id; a name that several programs share is shown with each one's id.
  const seen = new Map<string, number>();
  for (const p of data.programs) seen.set(p.name, (seen.get(p.name) ?? 0) + 1);
  return data.programs.map((p) => {
    const key = `p/${p.program_id ?? ""}/${p.name}`;
    const label = (seen.get(p.name) ?? 0) > 1 ? `${p.name} (${p.program_id ?? ""})` : p.name;
    return { key, name: label, level: 0, group: p,
      children: (p.categories ?? []).map((c) => ({ key: `${key}/${c.name}`, name: c.name,
        level: 1, group: c, children: opNodes(cut(c.ops), ops, `${key}/${c.name}`, 2,
                                               p.program_id) })) };
  });
}

function details(o: OpRow | null): HTMLElement {
  const card = h("section", { className: "card", id: "op-details" });
  if (!o) {
    card.append(h("h2", {}, "Details"), h("p", { className: "muted" },
      "Pick an op to see its HLO expression, shape and layout, and where it came from."));
    return card;
  }
  const row = (k: string, v: string) => [h("dt", {}, k), h("dd", { "data-key": k }, v)];
  card.append(h("h2", {}, o.name),
    h("dl", { className: "kv" },
      ...row("Program", o.module), ...row("Category", o.category),
      ...row("Occurrences", int(o.occurrences)), ...row("Self time", `${ms(o.self_ms)} ms`),
      ...row("FLOPs", o.flops === null ? "unknown" : fig(o.flops) + (o.flops_estimated ? " (estimated)" : "")),
      ...row("FLOP rate", o.gflops_per_s === null ? "–" : `${fig(o.gflops_per_s)} GFLOP/s`),
      ...row("Bandwidth", o.gbytes_per_s === null ? "–" : `${fig(o.gbytes_per_s)} GiB/s`),
      ...row("FLOPS utilisation", util(o.flops_utilization)),
      ...row("Bound by", o.bound_by),
      ...row("Shape and layout", o.shape || "–"),
      ...row("Layout padding", o.padding_percent === null ? "–"
        : `${o.padding_percent.toFixed(1)}% more memory than the values need`),
      ...row("Framework op", o.tf_op || "–"), ...row("Source", o.source || "–")),
    h("h3", {}, "HLO expression"), h("pre", { id: "op-expression" }, o.expression || "–"));
  if (o.fused && o.fused.length) {
    card.append(h("h3", {}, `Fused ops (${o.fused.length})`),
      h("pre", { id: "op-fused" }, o.fused.map((f) => f.expression).join("\n")));
  }
  return card;
}

export async function renderOpProfile(ctx: PageContext): Promise<HTMLElement> {
  const data = await toolData<OpProfileData>({ run: ctx.run, host: ctx.host, tool: "op_profile" }, ctx.progress);
  const page = h("div", { id: "op-profile-page", className: "xla-page" }, xlaStyle(),
                 h("h1", {}, `Op profile — ${data.run}${ctx.host ? " — " + ctx.host : ""}`));
  if (!data.ops.length) {
    page.append(h("p", { className: "card", id: "no-xla" }, "No XLA ops in this run."));
    return page;
  }
  const d = data.device;
  page.append(h("section", { className: "card xla-summary", id: "xla-summary" },
    h("dl", { className: "kv" },
      h("dt", {}, "Device"), h("dd", { id: "xla-device" }, `${d.name || "unknown"} × ${d.count}`),
      h("dt", {}, "Peak"), h("dd", { id: "xla-peak" }, d.peak_tflops === null ? "unknown peak"
        : `${fig(d.peak_tflops)} TFLOP/s, ${fig(d.peak_gbytes_per_s)} GiB/s (${d.peak_source}; bandwidth: ${d.peak_bandwidth_source})`),
      h("dt", {}, "Programs"), h("dd", {}, data.modules.join(", ")),
      h("dt", {}, "XLA device time"), h("dd", {}, `${ms(data.total_ms)} ms`),
      h("dt", {}, "Idle"), h("dd", { id: "xla-idle" }, `${ms(data.idle_ms)} ms (${pct(data.idle_percent)})`),
      h("dt", {}, "FLOPS utilisation"), h("dd", { id: "xla-flops-util" }, util(data.flops_utilization)),
      h("dt", {}, "Bandwidth utilisation"), h("dd", {}, util(data.bandwidth_utilization))),
    ...data.notes.map((n) => h("p", { className: "note" }, n))));

  let view: View = "category";
  let top = 10;
  let selected: OpRow | null = null;
  const open = new Set<string>();
  const body = h("tbody");
  const detailsSlot = h("div", {}, details(null));
  const viewSelect = h("select", { id: "op-view", "aria-label": "Group by" },
    h("option", { value: "category" }, "By category"), h("option", { value: "program" }, "By program"));
  const topSelect = h("select", { id: "op-top", "aria-label": "Ops shown per group" },
    ...[5, 10, 25, 100, 100000].map((n) => h("option", { value: String(n), selected: n === top },
      n === 100000 ? "all" : `top ${n}`)));

  const render = () => {
    const rows: HTMLElement[] = [];
    const walk = (nodes: TreeNode[]) => {
      for (const n of nodes) {
        const figures = n.group ?? n.op;
        const fu = figures ? figures.flops_utilization : null;
        const expandable = n.children.length > 0;
        const tr = h("tr", { className: "node" + (n.op && n.op === selected ? " selected" : ""),
                             tabindex: 0, "data-key": n.key, "data-level": n.level,
                             "data-kind": n.group ? "group" : n.op ? "op" : "fused" },
          h("td", { className: "name-cell", style: `padding-left:${0.4 + 1.2 * n.level}rem` },
            h("span", { className: "twisty" }, expandable ? (open.has(n.key) ? "▾" : "▸") : ""),
            h("span", { className: "bar", style: `width:${Math.max(2, Math.min(60,
              (figures?.time_percent ?? 0) * 0.6))}px;background:${utilColor(fu)}` }),
            n.fused ? `${n.name} (${n.fused.opcode})` : n.name),
          h("td", { className: "num", "data-key": "time_ms" }, figures ? ms("time_ms" in figures
            ? figures.time_ms : figures.self_ms) : ""),
          h("td", { className: "num" }, figures ? pct(figures.time_percent) : ""),
          h("td", { className: "num", "data-key": "flops_utilization" }, figures ? util(fu)
            : n.fused ? `${fig(n.fused.flops)} FLOPs` : ""),
          h("td", { className: "num" }, figures ? util(figures.bandwidth_utilization) : ""),
          h("td", { className: "num" }, figures ? int(figures.occurrences) : ""));
        const act = () => {
          if (expandable) { if (open.has(n.key)) open.delete(n.key); else open.add(n.key); }
          if (n.op) { selected = n.op; detailsSlot.replaceChildren(details(n.op)); }
          render();
        };
        tr.addEventListener("click", act);
        tr.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); act(); } });
        rows.push(tr);
        if (expandable && open.has(n.key)) walk(n.children);
      }
    };
    walk(tree(data, view, top));
    rows.push(h("tr", { id: "idle-row", "data-kind": "idle" },
      h("td", { className: "name-cell" }, h("span", { className: "twisty" }, ""), "IDLE"),
      h("td", { className: "num" }, ms(data.idle_ms)), h("td", { className: "num" }, pct(data.idle_percent)),
      h("td", {}, ""), h("td", {}, ""), h("td", {}, "")));
    body.replaceChildren(...rows);
  };
  viewSelect.addEventListener("change", () => { view = viewSelect.value as View; open.clear(); render(); });
  topSelect.addEventListener("change", () => { top = Number(topSelect.value); render(); });
  render();
  page.append(h("div", { className: "cards" },
    h("section", { className: "card" },
      h("div", { className: "controls" }, viewSelect, topSelect,
        h("span", { className: "muted" }, "FLOPS utilisation: ", h("span", { className: "legend-bar" }),
          " 0 → 100%")),
      h("table", { className: "op-tree", id: "op-tree" },
        h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", { className: "num" }, "Time (ms)"),
          h("th", { className: "num" }, "Time %"), h("th", { className: "num" }, "FLOPS util."),
          h("th", { className: "num" }, "BW util."), h("th", { className: "num" }, "#"))), body)),
    detailsSlot));
  return page;
}
