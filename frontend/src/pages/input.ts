// The input pipeline analyzer: is the run input-bound, step time with its input part, the
// host-side split of input time, the input-op table (sortable, CSV), every input pipeline
// with its slowest run and bottleneck (XProf's tf.data bottleneck analysis), and one
// pipeline's bottleneck in detail, chosen by host and pipeline, with its slowest run's graph
// (critical path bold, bottleneck red).
import { apiUrl, toolData } from "../api";
import { stackedColumns } from "../charts";
import { h, int, ms, pct, svg } from "../dom";
import { Column, numberColumn, SortableTable } from "../table";
import type { PageContext } from "./registry";

interface OpRow { name: string; count: number; total_ms: number; total_percent: number;
  self_ms: number; self_percent: number; category: string; runs_apart?: boolean; }
interface GraphNode { name: string; kind: string; parent: string | null; start_us: number;
  total_ms: number; self_ms: number; calls: number; asynchronous: boolean; critical: boolean;
  bottleneck: boolean; }
interface BottleneckData { host: string | null; pipeline: string | null; stage: string | null;
  stage_ms: number | null; recommendation: string; run_ms: number | null;
  critical_path: string[]; slow_call_us: number; graph: GraphNode[]; }
interface PipelineData { host: string; name: string; kind: string; root: string; calls: number;
  avg_ms: number; min_ms: number; max_ms: number; slow_calls: number;
  bottleneck: BottleneckData; }
interface InputAnalysis {
  run: string; host: string | null;
  input: { percent: number | null; verdict: string; statement: string };
  steps: { count: number; avg_ms: number | null; stddev_ms: number | null; min_ms: number | null;
           max_ms: number | null; input_avg_ms: number | null; input_stddev_ms: number | null;
           input_min_ms: number | null; input_max_ms: number | null;
           per_step: { step_num: number; ms: number; input_ms: number; other_ms: number }[] };
  host_breakdown: Record<string, number>;
  host_breakdown_percent: Record<string, number>;
  host_breakdown_labels: Record<string, string>;
  ops: OpRow[];
  bottleneck: BottleneckData;
  pipelines: PipelineData[];
}

const RED = "#d93025";
const num = (key: keyof OpRow & string, title: string, f: (v: number) => string) =>
  numberColumn<OpRow>(key, title, f);
const COLUMNS: Column<OpRow>[] = [
  // ‡: the stage runs apart from its consumer (threads, DataLoader worker processes), so its
  // total overlaps the consumer's and may exceed it.
  { key: "name", title: "Input op", value: (r) => r.name + (r.runs_apart ? " ‡" : ""),
    className: "name" },
  num("count", "Count", int),
  num("total_ms", "Total time (ms)", ms),
  num("total_percent", "Total %", pct),
  num("self_ms", "Total self time (ms)", ms),
  num("self_percent", "Self %", pct),
  { key: "category", title: "Category", value: (r) => r.category },
];

function stat(id: string, value: number | null): HTMLElement {
  return h("span", { id, "data-value": value === null ? undefined : String(value) }, ms(value));
}

function summary(d: InputAnalysis): HTMLElement {
  return h("section", { className: "card", id: "input-summary" },
    h("h2", {}, "Summary"),
    h("div", { className: "muted" }, "Share of step time waiting for input"),
    h("div", { className: "big" },
      h("span", { id: "input-percent", "data-value": d.input.percent === null ? undefined
                                                      : String(d.input.percent) },
        pct(d.input.percent))),
    h("p", { id: "input-verdict", className: `verdict-${d.input.verdict}`,
             "data-verdict": d.input.verdict }, d.input.statement));
}

function stepSide(d: InputAnalysis): HTMLElement {
  const s = d.steps;
  if (!s.count) {
    return h("section", { className: "card wide", id: "step-side" },
      h("h2", {}, "Training-loop side"), h("p", { className: "muted" }, "No steps were found."));
  }
  const rows: [string, string, number | null, string, number | null][] = [
    ["Average", "step-avg", s.avg_ms, "input-avg", s.input_avg_ms],
    ["σ", "step-stddev", s.stddev_ms, "input-stddev", s.input_stddev_ms],
    ["Minimum", "step-min", s.min_ms, "input-min", s.input_min_ms],
    ["Maximum", "step-max", s.max_ms, "input-max", s.input_max_ms],
  ];
  return h("section", { className: "card wide", id: "step-side" },
    h("h2", {}, "Training-loop (device) side: step time and waiting for input"),
    stackedColumns("input-step-graph", s.per_step.map((p) => p.step_num), [
      { name: "Waiting for input", color: RED, values: s.per_step.map((p) => p.input_ms) },
      { name: "Rest of the step", color: "#9aa0a6", values: s.per_step.map((p) => p.other_ms) },
    ], "ms"),
    h("table", { id: "step-stats" },
      h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", { className: "num" }, "Step time (ms)"),
                       h("th", { className: "num" }, "Waiting for input (ms)"))),
      h("tbody", {}, ...rows.map(([label, a, av, b, bv]) => h("tr", {},
        h("td", {}, label), h("td", { className: "num" }, stat(a, av)),
        h("td", { className: "num" }, stat(b, bv)))))));
}

function hostSide(d: InputAnalysis): HTMLElement {
  const keys = Object.keys(d.host_breakdown_labels);
  return h("section", { className: "card", id: "host-side" },
    h("h2", {}, "Host side: where input time goes"),
    h("table", { id: "host-breakdown" },
      h("thead", {}, h("tr", {}, h("th", {}, "Category"), h("th", { className: "num" }, "ms"),
                       h("th", { className: "num" }, "%"))),
      h("tbody", {}, ...keys.map((k) => h("tr", { "data-category": k },
        h("td", {}, d.host_breakdown_labels[k]),
        h("td", { className: "num", "data-value": String(d.host_breakdown[k]) },
          ms(d.host_breakdown[k])),
        h("td", { className: "num", "data-value": String(d.host_breakdown_percent[k]) },
          pct(d.host_breakdown_percent[k])))))));
}

/** The pipeline graph as SVG: consumers left, producers right, one row per leaf. */
function graph(nodes: GraphNode[]): SVGElement {
  const W = 200, H = 78, GX = 36, GY = 16;
  const kids = new Map<string | null, GraphNode[]>();
  for (const n of nodes) {
    const list = kids.get(n.parent) ?? [];
    list.push(n);
    kids.set(n.parent, list);
  }
  const pos = new Map<string, { x: number; y: number }>();
  let row = 0;
  const place = (n: GraphNode, depth: number): number => {
    const children = kids.get(n.name) ?? [];
    let y: number;
    if (!children.length) { y = row++; } else {
      const ys = children.map((c) => place(c, depth + 1));
      y = (ys[0] + ys[ys.length - 1]) / 2;
    }
    pos.set(n.name, { x: depth * (W + GX), y: y * (H + GY) });
    return y;
  };
  for (const root of kids.get(null) ?? []) place(root, 0);
  const maxX = Math.max(...[...pos.values()].map((p) => p.x)) + W;
  const height = Math.max(row, 1) * (H + GY);
  const out = svg("svg", { id: "pipeline-graph", width: maxX + 8, height: height + 8,
                           viewBox: `-4 -4 ${maxX + 8} ${height + 8}`, role: "img",
                           "aria-label": "Pipeline graph of the slowest run" });
  for (const n of nodes) {
    const p = pos.get(n.name), q = n.parent ? pos.get(n.parent) : undefined;
    if (!p || !q) continue;
    out.append(svg("line", { x1: q.x + W, y1: q.y + H / 2, x2: p.x, y2: p.y + H / 2,
                             stroke: n.critical ? "#202124" : "#bdc1c6",
                             "stroke-width": n.critical ? 3 : 1 }));
  }
  for (const n of nodes) {
    const p = pos.get(n.name);
    if (!p) continue;
    const cls = ["node", n.critical ? "critical" : "", n.bottleneck ? "bottleneck" : ""]
      .filter(Boolean).join(" ");
    const lines = [
      `start ${n.start_us.toFixed(1)} µs · calls ${int(n.calls)}`,
      `total ${ms(n.total_ms)} ms · self ${ms(n.self_ms)} ms`,
      n.asynchronous ? "asynchronous" : "",
    ];
    out.append(svg("g", { class: cls, "data-name": n.name, transform: `translate(${p.x},${p.y})` },
      svg("title", {}, n.name),
      svg("rect", { width: W, height: H, rx: 6, fill: n.bottleneck ? "#fce8e6" : "#fff",
                    stroke: n.bottleneck ? RED : n.critical ? "#202124" : "#9aa0a6",
                    "stroke-width": n.critical || n.bottleneck ? 3 : 1 }),
      svg("text", { x: 10, y: 20, "font-weight": "bold", "font-size": 13,
                    fill: n.bottleneck ? RED : "#202124" }, n.kind),
      ...lines.map((t, i) => svg("text", { x: 10, y: 38 + 15 * i, "font-size": 11,
                                            fill: "#5f6368" }, t))));
  }
  return out;
}

/** One run's bottleneck: the stage, the recommendation and the run's pipeline graph. */
function bottleneckDetail(b: BottleneckData): HTMLElement {
  return h("div", { id: "bottleneck-detail" },
    h("p", {}, "Bottleneck stage: ",
      h("strong", { id: "bottleneck-stage", style: b.stage ? `color:${RED}` : undefined },
        b.stage ?? "none")),
    h("p", { id: "bottleneck-recommendation" }, b.recommendation),
    b.run_ms !== null
      ? h("p", { className: "muted", id: "bottleneck-run" },
          `Slowest run of pipeline ${b.pipeline ?? ""} on host ${b.host ?? ""}: ` +
          `${ms(b.run_ms)} ms. Critical path in bold, the bottleneck in red; a call slower ` +
          `than ${b.slow_call_us} µs counts as slow.`)
      : null,
    b.graph.length ? h("div", { className: "graph-wrap", style: "overflow-x:auto" }, graph(b.graph))
      : null);
}

/** Every pipeline, slowest run first: XProf's summary of the tf.data bottleneck analysis. */
function pipelineTable(d: InputAnalysis, pick: (p: PipelineData) => void): HTMLElement {
  if (!d.pipelines.length) {
    return h("p", { className: "muted" }, "No input-pipeline iterator events in this profile.");
  }
  return h("table", { id: "pipeline-table" },
    h("thead", {}, h("tr", {}, ...["Host", "Pipeline", "Output stage", "Calls",
                                   "Slowest run (ms)", "Bottleneck stage",
                                   "Its time in that run (ms)"].map((t, i) =>
      h("th", { className: i === 3 || i === 4 || i === 6 ? "num" : "" }, t)))),
    h("tbody", {}, ...d.pipelines.map((p) => {
      const b = p.bottleneck;
      const row = h("tr", { "data-host": p.host, "data-pipeline": p.name, tabIndex: 0,
                            style: "cursor:pointer" },
        h("td", {}, p.host), h("td", {}, p.name), h("td", { className: "name" }, p.root),
        h("td", { className: "num" }, int(p.calls)),
        h("td", { className: "num", "data-value": String(b.run_ms ?? "") }, ms(b.run_ms)),
        h("td", { className: "name" }, b.stage ?? "none"),
        h("td", { className: "num", "data-value": String(b.stage_ms ?? "") }, ms(b.stage_ms)));
      row.addEventListener("click", () => pick(p));
      return row;
    })));
}

function bottleneck(d: InputAnalysis): HTMLElement {
  const hosts = [...new Set(d.pipelines.map((p) => p.host))];
  const hostSelect = h("select", { id: "pipeline-host", "aria-label": "Host" },
    ...hosts.map((n) => h("option", { value: n }, n)));
  const pipeSelect = h("select", { id: "pipeline-select", "aria-label": "Pipeline" });
  const detail = h("div", {}, bottleneckDetail(d.bottleneck));
  const show = (p: PipelineData) => {
    hostSelect.value = p.host;
    pipeSelect.replaceChildren(...d.pipelines.filter((q) => q.host === p.host).map((q) =>
      h("option", { value: q.name }, `${q.name} (${q.root})`)));
    pipeSelect.value = p.name;
    detail.replaceChildren(bottleneckDetail(p.bottleneck));
  };
  hostSelect.addEventListener("change", () => {
    const first = d.pipelines.find((q) => q.host === hostSelect.value);
    if (first) show(first);
  });
  pipeSelect.addEventListener("change", () => {
    const p = d.pipelines.find((q) => q.host === hostSelect.value && q.name === pipeSelect.value);
    if (p) show(p);
  });
  const start = d.pipelines.find((p) => p.host === d.bottleneck.host &&
                                        p.name === d.bottleneck.pipeline);
  if (start) {
    show(start);
    // The run's own analysis may have been overruled (not input-bound): keep the verdict.
    detail.replaceChildren(bottleneckDetail(d.bottleneck));
  }
  return h("section", { className: "card wide", id: "bottleneck" },
    h("h2", {}, "Bottleneck analysis"),
    h("h3", {}, "Input pipelines"),
    h("p", { className: "muted" }, "Each pipeline's slowest run and the stage that took most " +
      "of it; click a row, or choose a host and a pipeline, to see it below."),
    pipelineTable(d, show),
    d.pipelines.length
      ? h("div", { className: "controls" }, h("label", {}, "Host ", hostSelect),
          h("label", {}, " Pipeline ", pipeSelect))
      : null,
    detail);
}

export async function renderInput(ctx: PageContext): Promise<HTMLElement> {
  const params = { run: ctx.run, host: ctx.host, tool: "input_pipeline_analyzer" };
  const d = await toolData<InputAnalysis>(params, ctx.progress);
  const table = new SortableTable<OpRow>(COLUMNS, d.ops, 2000, "input-op-table");
  return h("div", { id: "input-page" },
    h("h1", {}, `Input pipeline analyzer — ${d.run}${d.host ? " — " + d.host : ""}`),
    h("div", { className: "cards" }, summary(d), hostSide(d), stepSide(d), bottleneck(d),
      h("section", { className: "card wide", id: "input-ops" },
        h("h2", {}, "Input ops"),
        h("div", { className: "controls" },
          h("a", { id: "export-csv", href: apiUrl("csv", params), download: "" }, "Export as CSV")),
        d.ops.length ? table.element
          : h("p", { className: "muted" }, "No input-pipeline iterator events in this profile."))));
}
