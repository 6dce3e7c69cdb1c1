// Python profile: where a host's Python time goes, from the Python tracer (calls) or the Python
// sampler (samples): the flame graph (or its icicle, by self time), zoomable and searchable,
// and the top-functions table; for the whole recording, one step, or a range selected in the
// trace viewer. A clicked function opens its rows in the trace viewer (a search for its name).
import { apiUrl, toolData } from "../../api";
import { duration, h, int, pct } from "../../dom";
import { Column, numberColumn, SortableTable } from "../../table";
import type { PageContext } from "../registry";
import { FlameGraph, inverted, label, Tree } from "./flame";
import { requestTraceSearch, takePythonRange } from "./link";
import { pythonStyle } from "./style";

interface Functions { name: string[]; file: string[]; line: number[]; function: string[];
  self_ns: number[]; total_ns: number[]; self_share: number[]; total_share: number[];
  count: number[]; self_share_error?: number[]; }
interface PythonData { run: string; host: string; source: string; count_kind: string;
  start_ns: number; end_ns: number; step: number | null; thread: string | null; total_ns: number;
  samples: number; hz: number; threads: { line_id: number[]; name: string[]; total_ns: number[];
  count: number[] }; functions: Functions; tree: Tree; tree_nodes: number; tree_min_ns: number;
  hosts: string[]; sources: string[]; steps: number[]; }

interface Row { name: string; function: string; where: string; self_ns: number; total_ns: number;
  self_share: number; total_share: number; count: number; error: number | null; }

interface Choice { source: string; step: string; thread: string;
  range: { start_ns: number; end_ns: number } | null; }

const ms = (ns: number) => (ns / 1e6).toFixed(3);

function rowsOf(f: Functions): Row[] {
  return f.name.map((name, i) => ({
    name, function: f.function[i], where: f.file[i] ? `${f.file[i]}:${f.line[i]}` : "(C)",
    self_ns: f.self_ns[i], total_ns: f.total_ns[i], self_share: 100 * f.self_share[i],
    total_share: 100 * f.total_share[i], count: f.count[i],
    error: f.self_share_error ? 100 * f.self_share_error[i] : null }));
}

function columns(kind: string): Column<Row>[] {
  return [
    { key: "function", title: "Function", value: (r) => r.function, className: "name", clip: true },
    { key: "where", title: "File:line", value: (r) => r.where, className: "name" },
    { key: "self_ns", title: "Self (ms)", numeric: true, value: (r) => r.self_ns,
      format: (r) => ms(r.self_ns) },
    { key: "self_share", title: "Self %", numeric: true, value: (r) => r.self_share,
      format: (r) => pct(r.self_share) + (r.error !== null ? ` ± ${r.error.toFixed(1)}` : "") },
    { key: "total_ns", title: "Total (ms)", numeric: true, value: (r) => r.total_ns,
      format: (r) => ms(r.total_ns) },
    numberColumn<Row>("total_share", "Total %", pct),
    numberColumn<Row>("count", kind === "calls" ? "Calls" : "Samples", int),
  ];
}

function select(id: string, label: string, options: [string, string][], value: string,
                onchange: (v: string) => void): HTMLElement {
  const el = h("select", { id, "aria-label": label },
    ...options.map(([v, text]) => h("option", { value: v }, text)));
  el.value = value;
  el.addEventListener("change", () => onchange(el.value));
  return h("label", {}, `${label} `, el);
}

export async function renderPython(ctx: PageContext): Promise<HTMLElement> {
  const choice: Choice = { source: "", step: "", thread: "", range: takePythonRange() };
  const root = h("div", { id: "python-page" }, pythonStyle());
  const body = h("div");
  root.append(body);

  const load = async (): Promise<void> => {
    const params: Record<string, string | undefined> = {
      run: ctx.run, host: ctx.host, tool: "python_profile",
      source: choice.source || undefined, step: choice.step || undefined,
      thread: choice.thread || undefined,
      start_ns: choice.range ? String(Math.round(choice.range.start_ns)) : undefined,
      end_ns: choice.range ? String(Math.round(choice.range.end_ns)) : undefined,
    };
    const data = await toolData<PythonData>(params, ctx.progress);
    if (ctx.stale()) return;
    body.replaceChildren(...page(ctx, data, choice, params, () => void load().catch(showError)));
  };
  const showError = (err: unknown): void => {
    body.replaceChildren(h("p", { className: "error", role: "alert" },
      err instanceof Error ? err.message : String(err)));
  };
  await load();
  return root;
}

function page(ctx: PageContext, data: PythonData, choice: Choice,
              params: Record<string, string | undefined>, reload: () => void): Node[] {
  const kind = data.count_kind;
  const where = data.step !== null ? `step ${data.step}`
    : choice.range ? `the range selected in the trace viewer (${duration(data.end_ns - data.start_ns)})`
      : "the whole recording";
  const rate = data.source === "sampler" ? `, ${int(data.hz)} samples/s` : "";
  const controls = h("div", { className: "controls", id: "py-controls" },
    select("py-source", "Source", data.sources.map((s): [string, string] =>
      [s, s === "tracer" ? "Python tracer (calls)" : "Python sampler (samples)"]),
      data.source, (v) => { choice.source = v; reload(); }),
    select("py-step", "Step", [["", "Whole recording"],
      ...data.steps.map((n): [string, string] => [String(n), `Step ${n}`])],
      data.step === null ? "" : String(data.step),
      (v) => { choice.step = v; choice.range = null; reload(); }),
    select("py-thread", "Thread", [["", "All threads"],
      ...data.threads.name.map((n, i): [string, string] =>
        [n || String(data.threads.line_id[i]), n || String(data.threads.line_id[i])])],
      choice.thread, (v) => { choice.thread = v; reload(); }),
    choice.range
      ? h("button", { type: "button", id: "py-clear-range",
                      onclick: () => { choice.range = null; reload(); } }, "Whole recording")
      : null);

  const summary = h("p", { id: "py-summary" },
    `Python ${data.source} on host ${data.host}, ${where}: `,
    h("strong", { id: "py-total", "data-value": String(data.total_ns) }, duration(data.total_ns)),
    ` of Python over ${data.threads.name.length} thread(s), ${int(data.samples)} ${kind}${rate}.`);
  if (data.tree_nodes > data.tree.parent.length) {
    summary.append(` The flame graph leaves out call paths under ${duration(data.tree_min_ns)}` +
                   ` (${int(data.tree_nodes - data.tree.parent.length)} of ${int(data.tree_nodes)}).`);
  }

  // The flame graph and its icicle.
  const flame = new FlameGraph(data.tree, data.total_ns);
  let icicle: Tree | null = null;
  const details = h("div", { id: "py-details", className: "card" },
    h("p", { className: "muted" }, "Click a bar to zoom to it and see its function here."));
  const search = h("input", { type: "search", id: "py-search", placeholder: "Search functions",
                              "aria-label": "Search functions in the flame graph" });
  const share = h("span", { id: "py-search-share", className: "muted" });
  search.addEventListener("input", () => {
    const s = flame.search(search.value);
    share.textContent = search.value.trim() ? `${pct(100 * s)} of the time` : "";
    share.dataset.value = String(s);
  });
  const modes = h("div", { className: "py-modes", role: "radiogroup" });
  const setMode = (mode: "flame" | "icicle"): void => {
    for (const b of modes.querySelectorAll("button")) {
      b.setAttribute("aria-checked", String(b.dataset.mode === mode));
    }
    if (mode === "icicle") icicle = icicle ?? inverted(data.tree);
    flame.setTree(mode === "icicle" ? icicle! : data.tree);
    flame.element.dataset.mode = mode;
    flame.search(search.value);
  };
  for (const [mode, text] of [["flame", "Flame graph"], ["icicle", "Icicle (by self time)"]]) {
    modes.append(h("button", { type: "button", id: `py-view-${mode}`, role: "radio",
                               "data-mode": mode,
                               onclick: () => setMode(mode as "flame" | "icicle") }, text));
  }
  const reset = h("button", { type: "button", id: "py-reset", onclick: () => flame.zoom(-1) },
                  "Reset zoom");
  flame.onSelect = (node: number) => {
    const t = flame.current;
    const name = t.names[t.name[node]];
    const m = /^\$(.*):(\d+) (.*)$/s.exec(name);
    details.replaceChildren(
      h("h2", { id: "py-detail-name" }, label(name)),
      h("dl", { className: "kv" },
        h("dt", {}, "Where"), h("dd", {}, m ? `${m[1]}:${m[2]}` : "C function"),
        h("dt", {}, "Total"), h("dd", {}, `${duration(t.total_ns[node])} (${pct(100 * t.total_ns[node] / Math.max(data.total_ns, 1))})`),
        h("dt", {}, "Self"), h("dd", {}, duration(t.self_ns[node])),
        h("dt", {}, kind === "calls" ? "Calls" : "Samples"), h("dd", {}, int(t.count[node]))),
      ...(ctx.tools.some((x) => x.name === "trace_viewer")
        ? [h("button", { type: "button", id: "py-to-trace",
                         onclick: () => { requestTraceSearch(name); ctx.go("trace_viewer"); } },
             "Show its rows in the trace viewer →")]
        : []));
  };
  setTimeout(() => setMode("flame"), 0);

  const table = new SortableTable<Row>(columns(kind), rowsOf(data.functions), 2000, "py-table");
  const filter = h("input", { type: "search", id: "py-filter", placeholder: "Filter functions",
                              "aria-label": "Filter functions by name or file" });
  filter.addEventListener("input", () => {
    const needle = filter.value.toLowerCase();
    table.setFilter((r) => r.name.toLowerCase().includes(needle));
  });
  const csvParams = { ...params, tool: "python_profile" };
  return [
    h("h1", {}, `Python profile — ${data.run} — ${data.host}`),
    controls, summary,
    h("section", { className: "card wide" },
      h("div", { className: "controls" }, modes, search, share, reset),
      flame.element),
    details,
    h("section", { className: "card wide" },
      h("h2", {}, "Top functions"),
      h("div", { className: "controls" }, filter,
        h("a", { id: "py-csv", href: apiUrl("csv", csvParams), download: "" }, "Export as CSV")),
      table.element),
  ];
}
