// The overview page: performance summary, precisions, step-time graph, top ops, run
// environment and the recommendation.
import { getJson, toolData, ToolInfo } from "../api";
import { stackedColumns } from "../charts";
import { bytes, h, int, ms, pct } from "../dom";
import { baselineBar, baselineRuns } from "./diff/baseline";
import type { Diff } from "./diff/data";
import { signed, signedPct } from "./diff/data";
import type { PageContext } from "./registry";
import { pythonCard, PythonSummary } from "./python/overview_card";

export const CATEGORIES: { key: string; label: string; color: string }[] = [
  { key: "input", label: "Waiting for input", color: "#d93025" },
  { key: "device_compute", label: "Device compute", color: "#188038" },
  { key: "device_collectives", label: "Collectives", color: "#e52592" },
  { key: "host_compute", label: "Host compute", color: "#81c995" },
  { key: "device_to_device", label: "Device to device", color: "#12b5cb" },
  { key: "output", label: "Output", color: "#f29900" },
  { key: "compilation", label: "Compilation", color: "#a142f4" },
  { key: "kernel_launch", label: "Kernel launch", color: "#4285f4" },
  { key: "all_others", label: "All others", color: "#9aa0a6" },
];

// The overview's next_tool values → the tool pages that answer them.
const NEXT_TOOL: Record<string, string> = {
  ops: "framework_op_stats", input_pipeline: "input_pipeline_analyzer",
  kernel_stats: "kernel_stats", trace_viewer: "trace_viewer",
};

interface Overview {
  run: string; host: string | null;
  steps: { count: number; avg_ms: number | null; min_ms: number | null; max_ms: number | null;
           stddev_ms: number | null; found_by: string | string[]; marker: string | string[];
           found_by_text: string; trimmed: number[];
           per_step: { step_num: number; ms: number; breakdown_ms: Record<string, number> }[] };
  breakdown: Record<string, number>;
  breakdown_ms: Record<string, number>;
  input: { percent: number | null; verdict: string; statement: string };
  precision: { "16bit_percent": number; "32bit_percent": number } | null;
  top_ops: { name: string; type: string; host_or_device: string; self_ms: number;
             self_percent: number; cumulative_self_percent?: number; occurrences: number }[];
  environment: { hosts: number; host_names: string[]; device_type: string; device_count: number;
                 device_names: string[]; cpu_count: number | null };
  recommendation: { next_tool: string; hints: string[] };
  recommendations?: Advice[];
  failed_hosts: Record<string, string>;
  /** Where the run is a flight recorder's dump: what saved it and the step's figures. */
  flight?: { trigger: string; detail?: string; step?: number | null; step_ms?: number;
             median_ms?: number; threshold_ms?: number; window?: string } | null;
  dropped_events?: Record<string, { count: number; message: string }>;
  xla_flops_utilization?: number | null; // where the run has XLA programs and a known peak
  xla_flops_note?: string; // where ops with unknown FLOPs hold most of the device's time
  /** Model FLOPs utilisation: the figure, or why it is unknown. */
  mfu?: { mfu: number | null; unknown: string;
          hosts: Record<string, { device: string; devices: number; peak_tflops: number | null;
                                  peak_precision: string; peak_source: string;
                                  flops_source: string; mfu: number | null;
                                  notes?: string[] }> };
  python?: Record<string, PythonSummary>; // hosts with Python tracer or sampler data
}

interface Advice {
  rule: string; text: string; because?: string; evidence: Record<string, unknown>; tool: string;
}

function evidenceText(v: unknown): string {
  if (Array.isArray(v)) return v.map(String).join("; ");
  if (v !== null && typeof v === "object") {
    return Object.entries(v as Record<string, unknown>).map(([k, x]) => `${k} ${String(x)}`)
      .join("; ");
  }
  return String(v);
}

// Best-practice advice: each rule that fired, with the numbers behind it and its tool.
function advice(o: Overview, ctx: PageContext): HTMLElement {
  const items = o.recommendations ?? [];
  return h("section", { className: "card", id: "advice" },
    h("h2", {}, "Advice"),
    items.length
      ? h("ul", {}, ...items.map((a) => {
        const tool = ctx.tools.find((t) => t.name === a.tool);
        return h("li", { "data-rule": a.rule },
          h("p", { className: "advice-text" }, a.text),
          h("p", { className: "muted evidence" },
            a.because
              ? "Because " + a.because
              : "Evidence: " + Object.entries(a.evidence)
                .map(([k, v]) => `${k.replace(/_/g, " ")} ${evidenceText(v)}`).join(", ")),
          tool
            ? h("a", { href: "#", className: "advice-tool", "data-tool": tool.name,
                       onclick: (e: Event) => { e.preventDefault(); ctx.go(tool.name); } },
                `Open ${tool.title} →`)
            : h("span", { className: "muted" }, a.tool));
      }))
      : h("p", { className: "muted" }, "No rule fired: the profile shows none of the problems the guides list."));
}

function value(id: string, text: string, raw?: number | null): HTMLElement {
  return h("span", { id, "data-value": raw === null || raw === undefined ? undefined : String(raw) },
           text);
}

function summary(o: Overview): HTMLElement {
  const s = o.steps;
  // The categories this server reports (an older one has no collectives).
  const rows = CATEGORIES.filter((c) => c.key in o.breakdown_ms).map((c) => h("tr",
    { "data-category": c.key },
    h("td", {}, h("span", { className: "swatch", style: `background:${c.color}` }), c.label),
    h("td", { className: "num", "data-value": String(o.breakdown_ms[c.key]) }, ms(o.breakdown_ms[c.key])),
    h("td", { className: "num", "data-value": String(o.breakdown[c.key]) }, pct(o.breakdown[c.key]))));
  return h("section", { className: "card", id: "summary" },
    h("h2", {}, "Performance summary"),
    s.count ? h("div", {},
      h("div", { className: "muted" }, "Average step time"),
      h("div", { className: "big" }, value("avg-step-ms", ms(s.avg_ms), s.avg_ms), " ms"),
      h("p", { className: "muted" },
        "σ ", value("stddev-ms", ms(s.stddev_ms), s.stddev_ms), " ms · min ",
        value("min-ms", ms(s.min_ms), s.min_ms), " ms · max ",
        value("max-ms", ms(s.max_ms), s.max_ms), " ms · ",
        value("step-count", int(s.count), s.count), " steps"),
      h("p", { className: "muted", id: "steps-found-by",
               "data-method": [s.found_by].flat().join(",") }, s.found_by_text),
      h("table", { id: "breakdown" },
        h("thead", {}, h("tr", {}, h("th", {}, "Category"), h("th", { className: "num" }, "ms per step"),
                         h("th", { className: "num" }, "% of step"))),
        h("tbody", {}, ...rows)))
      : h("p", {}, "No steps were found in this profile, so there is no step-time breakdown. ",
          "Mark each step with ", h("code", {}, "stepscope.Trace('train', step_num=i, _r=1)"), "."),
    h("p", { id: "verdict", className: `verdict-${o.input.verdict}` }, o.input.statement),
    o.xla_flops_utilization !== undefined && o.xla_flops_utilization !== null
      ? h("p", { id: "flops-utilization" }, "FLOPS utilisation (XLA programs): ",
          value("flops-utilization-value", pct(100 * o.xla_flops_utilization),
                o.xla_flops_utilization),
          o.xla_flops_note ? h("span", { className: "muted" }, " ", o.xla_flops_note) : null)
      : null,
    mfuLine(o));
}

function mfuLine(o: Overview): HTMLElement | null {
  const m = o.mfu;
  if (!m) return null;
  if (m.mfu === null) {
    return h("p", { id: "mfu", className: "muted" }, "MFU: unknown. ", m.unknown);
  }
  const first = Object.values(m.hosts).find((x) => x.mfu !== null);
  const peak = first && first.peak_tflops !== null
    ? ` · peak ${first.peak_tflops} TFLOP/s per device (` +
      `${first.peak_precision ? first.peak_precision + "; " : ""}${first.peak_source}) · ` +
      `FLOPs from ${first.flops_source}` : "";
  // What the figure rests on (the TF32 or FP32 peak, ops left out), in words.
  const notes = first?.notes?.length ? " · " + first.notes.join(" ") : "";
  return h("p", { id: "mfu" }, "MFU (model FLOPs utilisation): ",
    value("mfu-value", pct(100 * m.mfu), m.mfu), h("span", { className: "muted" }, peak),
    h("span", { className: "muted", id: "mfu-notes" }, notes));
}

function precision(o: Overview): HTMLElement {
  const p = o.precision;
  return h("section", { className: "card", id: "precision" },
    h("h2", {}, "Device compute precisions"),
    p ? h("dl", { className: "kv" },
          h("dt", {}, "16-bit"), h("dd", {}, value("precision-16", pct(p["16bit_percent"]), p["16bit_percent"])),
          h("dt", {}, "32-bit"), h("dd", {}, value("precision-32", pct(p["32bit_percent"]), p["32bit_percent"])))
      : h("p", { className: "muted" }, "No device compute in this profile."));
}

function stepGraph(o: Overview): HTMLElement {
  const steps = o.steps.per_step;
  const used = CATEGORIES.filter((c) => steps.some((s) => (s.breakdown_ms?.[c.key] ?? 0) > 0));
  return h("section", { className: "card wide" },
    h("h2", {}, "Step-time graph"),
    steps.length
      ? stackedColumns("step-graph", steps.map((s) => s.step_num), used.map((c) => ({
          name: c.label, color: c.color, values: steps.map((s) => s.breakdown_ms?.[c.key] ?? 0),
        })), "ms")
      : h("p", { className: "muted" }, "No steps."));
}

function topOps(o: Overview): HTMLElement {
  return h("section", { className: "card wide" },
    h("h2", {}, "Top 10 ops by self time"),
    o.top_ops.length ? h("table", { id: "top-ops" },
      h("thead", {}, h("tr", {}, h("th", {}, "Op"), h("th", {}, "Type"), h("th", {}, "Host/device"),
        h("th", { className: "num" }, "Self time (ms)"), h("th", { className: "num" }, "Self time %"),
        h("th", { className: "num" }, "Cumulative self time %"),
        h("th", { className: "num" }, "Occurrences"))),
      h("tbody", {}, ...o.top_ops.map((r) => h("tr", {},
        h("td", { className: "name", "data-key": "name" }, r.name), h("td", {}, r.type),
        h("td", {}, r.host_or_device),
        h("td", { className: "num", "data-key": "self_ms", "data-value": String(r.self_ms) }, ms(r.self_ms)),
        h("td", { className: "num", "data-key": "self_percent", "data-value": String(r.self_percent) },
          pct(r.self_percent)),
        h("td", { className: "num", "data-key": "cumulative_self_percent",
                  "data-value": String(r.cumulative_self_percent ?? "") },
          r.cumulative_self_percent === undefined ? "–" : pct(r.cumulative_self_percent)),
        h("td", { className: "num", "data-key": "occurrences" }, int(r.occurrences))))))
      : h("p", { className: "muted" }, "No ops."));
}

/** Peak memory per allocator, from the memory profile where the run recorded memory. */
async function memoryPeaks(ctx: PageContext): Promise<[string, Node][]> {
  const tools = (await getJson<{ tools: ToolInfo[] }>("tools", { run: ctx.run, host: ctx.host }))
    .tools;
  if (!tools.some((t) => t.name === "memory_profile")) return [];
  const m = await toolData<{ allocators: { name: string; host: string;
                                           peak_bytes_in_use: number }[] }>(
    { run: ctx.run, host: ctx.host, tool: "memory_profile", width: "0" }, ctx.progress);
  const many = new Set(m.allocators.map((a) => a.host)).size > 1;
  const link = h("a", { href: "#", id: "memory-link",
                        onclick: (e: Event) => { e.preventDefault(); ctx.go("memory_profile"); } },
                 "Open Memory profile →");
  return [["Peak memory", h("span", { id: "memory-peaks" },
    m.allocators.map((a) => `${a.name}${many ? " (" + a.host + ")" : ""}: `
      + bytes(a.peak_bytes_in_use)).join(", "), " ", link)]];
}

function environment(o: Overview, memory: [string, Node][] = []): HTMLElement {
  const e = o.environment;
  const kv: [string, string][] = [
    ["Hosts", `${e.hosts} (${e.host_names.join(", ")})`],
    ["Device type", e.device_type],
    ["Devices", String(e.device_count)],
    ["Device names", e.device_names.join(", ") || "–"],
    ["CPU cores", e.cpu_count === null ? "–" : String(e.cpu_count)],
  ];
  const f = o.flight;
  if (f) {
    const step = f.step === null || f.step === undefined ? "" : ` at step ${f.step}`;
    const ms = f.step_ms === undefined ? "" : ` (${f.step_ms.toFixed(1)} ms` +
      (f.median_ms === undefined ? ")" : `, median ${f.median_ms.toFixed(1)} ms)`);
    kv.push(["Saved by", `flight recorder: ${f.trigger.replace(/_/g, " ")}${step}${ms}` +
      (f.detail ? ` – ${f.detail}` : "")]);
    if (f.window) kv.push(["Window", f.window]);
  }
  return h("section", { className: "card", id: "environment" },
    h("h2", {}, "Run environment"),
    h("dl", { className: "kv" }, ...kv.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      ...memory.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
}

function recommendation(o: Overview, ctx: PageContext): HTMLElement {
  const target = NEXT_TOOL[o.recommendation.next_tool] ?? o.recommendation.next_tool;
  const tool = ctx.tools.find((t) => t.name === target);
  return h("section", { className: "card", id: "recommendation" },
    h("h2", {}, "Recommendation for next step"),
    h("ul", {}, ...o.recommendation.hints.map((hint) => h("li", {}, hint))),
    tool
      ? h("p", {}, h("a", { href: "#", id: "next-tool", "data-tool": tool.name,
                            onclick: (e: Event) => { e.preventDefault(); ctx.go(tool.name); } },
                     `Open ${tool.title} →`))
      : h("p", { className: "muted" }, `Next tool: ${target} (not in this version yet).`));
}

export async function renderOverview(ctx: PageContext): Promise<HTMLElement> {
  const o = await toolData<Overview>({ run: ctx.run, host: ctx.host, tool: "overview_page" },
                                     ctx.progress);
  const failed = Object.entries(o.failed_hosts ?? {});
  const memory = await memoryPeaks(ctx).catch(() => [] as [string, Node][]);
  const vsBase = h("div", { id: "overview-vs-base" });
  const bar = baselineBar(ctx, await baselineRuns(ctx), "overview-baseline",
                         (d) => vsBase.replaceChildren(...(d ? baselineSummary(d, ctx) : [])));
  return h("div", { id: "overview-page" },
    h("h1", {}, `Overview — ${o.run}${o.host ? " — " + o.host : ""}`),
    bar ? h("section", { className: "card wide", id: "overview-baseline-card" }, bar, vsBase)
      : null,
    ...failed.map(([host, why]) => h("p", { className: "warning" }, `Host ${host} could not be read: ${why}`)),
    ...Object.values(o.dropped_events ?? {}).map((d) =>
      h("p", { className: "warning dropped-events" }, d.message)),
    h("div", { className: "cards" }, summary(o), precision(o), recommendation(o, ctx),
      advice(o, ctx), pythonCard(o.python, ctx, o.steps.per_step),
      environment(o, memory), stepGraph(o), topOps(o)));
}

/** Against the chosen baseline: the step time change and the categories that moved most. */
function baselineSummary(d: Diff, ctx: PageContext): (Node | string)[] {
  const s = d.step_time;
  const ci = s.ci_percent;
  const verdict = s.ci_percent === null ? "cannot be told from noise"
    : s.verdict === "no change" ? "no change beyond noise" : s.verdict;
  const moved = [...d.breakdown_ms_per_step].filter((c) => c.delta !== 0)
    .sort((a, b) => Math.abs(b.delta) - Math.abs(a.delta)).slice(0, 3);
  return [
    h("p", { id: "overview-step-delta", "data-verdict": s.verdict },
      `Step time against ${d.base}: ${signed(s.delta_ms)} ms ${signedPct(s.percent)}`,
      ci ? ` (95% CI ${signedPct(ci[0])} to ${signedPct(ci[1])})` : "", ` — ${verdict}.`),
    moved.length ? h("p", { className: "muted" }, "Breakdown, ms per step: ",
      moved.map((c) => `${c.name} ${signed(c.delta)}`).join(", "), ". ") : "",
    h("a", { href: "#", id: "overview-open-diff",
             onclick: (e: Event) => { e.preventDefault(); ctx.go("diff"); } }, "Open Diff →"),
  ];
}
