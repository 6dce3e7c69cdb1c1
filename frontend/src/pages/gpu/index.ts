// The GPU timeline: per device, where the time went (compute, communication, memory, idle;
// over the span and per step), why the streams sat idle, how kernels were launched, how full
// the launch queues were and which kernel sequences repeat; per step, the critical path
// across ranks (path.ts). data.ts holds the JSON's types.
import { apiUrl } from "../../api";
import { stackedColumns } from "../../charts";
import { h, int, ms, pct, svg } from "../../dom";
import { Column, numberColumn, SortableTable } from "../../table";
import type { PageContext } from "../registry";
import { Device, deviceLabel, fetchGpu, HISTOGRAM_EDGES_US, KIND_COLORS, Outlier, Queue,
         StreamIdle } from "./data";
import { pathSection } from "./path";

const CSS = `
#gpu-page .gpu-bar { display: flex; height: 18px; border-radius: 3px; overflow: hidden;
  background: #eef0f3; margin: 4px 0 10px; }
#gpu-page .gpu-bar span { display: block; height: 100%; }
#gpu-page .gpu-legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 12px; }
#gpu-page .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
#gpu-page .spark { width: 220px; height: 36px; }
#gpu-page .row { display: flex; gap: 24px; flex-wrap: wrap; }
#gpu-page .row > div { flex: 1; min-width: 280px; }
#gpu-page .hist td { padding: 1px 6px; }
#gpu-page .hist .gpu-bar { height: 10px; margin: 0; }
#gpu-page .hist td:last-child { width: 60%; }
#gpu-page .seq code { font-size: 12px; }
`;

/** A long kernel name cut to its first ``n`` characters (the whole name on hover). */
function short(name: string, n = 60): HTMLElement {
  return h("code", { title: name }, name.length > n ? name.slice(0, n) + "…" : name);
}

const msOf = (us: number) => ms(us / 1000);

interface DeviceRow { d: Device; label: string; }

function deviceColumns(): Column<DeviceRow>[] {
  const b = (key: keyof Device["breakdown"]) => (r: DeviceRow) => r.d.breakdown[key] as number;
  return [
    { key: "device", title: "Device", value: (r) => r.label, className: "name" },
    { key: "rank", title: "Rank", numeric: true, value: (r) => r.d.rank ?? -1,
      format: (r) => (r.d.rank === null ? "–" : String(r.d.rank)) },
    { key: "span", title: "Span (ms)", numeric: true, value: b("span_us"),
      format: (r) => msOf(r.d.breakdown.span_us) },
    { key: "compute", title: "Compute", numeric: true, value: b("compute_percent"),
      format: (r) => pct(r.d.breakdown.compute_percent) },
    { key: "comm", title: "Communication", numeric: true, value: b("communication_percent"),
      format: (r) => pct(r.d.breakdown.communication_percent) },
    { key: "memory", title: "Memcpy/memset", numeric: true, value: b("memory_percent"),
      format: (r) => pct(r.d.breakdown.memory_percent) },
    { key: "idle", title: "Idle", numeric: true, value: b("idle_percent"),
      format: (r) => pct(r.d.breakdown.idle_percent) },
    { key: "overlap", title: "Comm under compute", numeric: true,
      value: (r) => r.d.breakdown.overlap_percent ?? -1,
      format: (r) => pct(r.d.breakdown.overlap_percent) },
    { key: "exposed", title: "Exposed comm (ms)", numeric: true, value: b("exposed_comm_us"),
      format: (r) => msOf(r.d.breakdown.exposed_comm_us) },
    { key: "host_wait", title: "Idle: host wait", numeric: true,
      value: (r) => r.d.idle.total.host_wait_percent,
      format: (r) => pct(r.d.idle.total.host_wait_percent) },
    { key: "launch_p50", title: "Launch delay p50 (µs)", numeric: true,
      value: (r) => r.d.launches.launch_delay.p50_us,
      format: (r) => r.d.launches.launch_delay.p50_us.toFixed(1) },
  ];
}

const IDLE_COLUMNS: Column<StreamIdle>[] = [
  { key: "stream", title: "Stream", value: (s) => s.stream, className: "name" },
  numberColumn<StreamIdle>("ops", "Ops", int),
  numberColumn<StreamIdle>("idle_us", "Idle (ms)", msOf),
  numberColumn<StreamIdle>("host_wait_percent", "Host wait", pct),
  numberColumn<StreamIdle>("kernel_wait_percent", "Kernel wait", pct),
  numberColumn<StreamIdle>("other_percent", "Other", pct),
];

const OUTLIER_COLUMNS: Column<Outlier>[] = [
  { key: "kernel", title: "Kernel", value: (o) => o.kernel, className: "name", clip: true },
  { key: "op", title: "Launched by", value: (o) => o.op || "–", className: "name" },
  { key: "launch", title: "Call", value: (o) => o.launch },
  { key: "step", title: "Step", numeric: true, value: (o) => o.step ?? -1,
    format: (o) => (o.step === null ? "–" : String(o.step)) },
  numberColumn<Outlier>("cpu_duration_us", "Call (µs)", (v) => v.toFixed(1)),
  numberColumn<Outlier>("launch_delay_us", "Delay (µs)", (v) => v.toFixed(1)),
  numberColumn<Outlier>("gpu_duration_us", "Kernel (µs)", (v) => v.toFixed(1)),
  { key: "why", title: "Why", value: (o) => o.why.replace("_", " ") },
];

function stepChart(d: Device): HTMLElement {
  if (!d.steps.length) return h("p", { className: "note" }, "No steps in this profile.");
  const xs = d.steps.map((s) => s.step);
  return stackedColumns("gpu-step-chart", xs, [
    { name: "Compute", color: KIND_COLORS.compute, values: d.steps.map((s) => s.compute_us / 1e3) },
    { name: "Communication", color: KIND_COLORS.communication,
      values: d.steps.map((s) => s.communication_us / 1e3) },
    { name: "Memcpy/memset", color: KIND_COLORS.memory,
      values: d.steps.map((s) => s.memory_us / 1e3) },
    { name: "Idle", color: KIND_COLORS.idle, values: d.steps.map((s) => s.idle_us / 1e3) },
  ], "ms");
}

function histogram(id: string, title: string, counts: number[]): HTMLElement {
  const most = Math.max(1, ...counts);
  const rows = counts.map((c, i) => {
    const lo = HISTOGRAM_EDGES_US[i];
    const hi = HISTOGRAM_EDGES_US[i + 1];
    return h("tr", {}, h("td", {}, hi === undefined ? `≥ ${lo} µs` : `${lo}–${hi} µs`),
      h("td", { className: "num" }, int(c)),
      h("td", {}, h("div", { className: "gpu-bar", style: `width:${(100 * c) / most}%` },
        h("span", { style: "width:100%;background:#3b7dd8" }))));
  });
  return h("div", {}, h("h3", {}, title),
           h("table", { id, className: "hist" }, h("tbody", {}, ...rows)));
}

function spark(q: Queue): SVGElement {
  const w = 220, hgt = 36;
  const xs = q.series_us, ys = q.series;
  const x0 = xs[0] ?? 0, x1 = xs[xs.length - 1] ?? 1;
  const top = Math.max(1, q.max_length);
  const pts = xs.map((x, i) => `${((x - x0) / Math.max(x1 - x0, 1e-9)) * w},` +
                               `${hgt - (ys[i] / top) * (hgt - 2)}`).join(" ");
  return svg("svg", { class: "spark", viewBox: `0 0 ${w} ${hgt}`, role: "img",
                      "aria-label": `queue length of ${q.stream}` },
    svg("polyline", { points: pts, fill: "none", stroke: "#3b7dd8", "stroke-width": 1.5 }));
}

function deviceSection(d: Device): HTMLElement {
  const b = d.breakdown;
  const l = d.launches;
  const idle = new SortableTable<StreamIdle>(IDLE_COLUMNS, d.idle.streams, 500, "gpu-idle");
  const outliers = new SortableTable<Outlier>(OUTLIER_COLUMNS, l.outliers, 100,
                                              "gpu-outliers");
  return h("div", { id: "gpu-device" },
    h("section", { className: "card wide" },
      h("h2", {}, `Time per step — ${d.host} ${d.device}`),
      h("p", {}, `Over the span (${msOf(b.span_us)} ms): compute ${pct(b.compute_percent)}, `,
        `communication outside compute ${pct(b.communication_percent)}, memcpy/memset `,
        `${pct(b.memory_percent)}, idle ${pct(b.idle_percent)}. `,
        b.overlap_percent === null ? "No communication."
          : `${pct(b.overlap_percent)} of communication ran under compute; ` +
            `${msOf(b.exposed_comm_us)} ms was exposed.`),
      stepChart(d)),
    h("section", { className: "card wide" }, h("h2", {}, "Idle time per stream, by cause"),
      h("p", { className: "muted" }, "Host wait: the next op was not launched yet. Kernel ",
        "wait: a gap under the back-to-back threshold. Other: a dependency on another ",
        "stream, an event or a sync."), idle.element),
    h("section", { className: "card wide", id: "gpu-launch" }, h("h2", {}, "Kernel launches"),
      h("p", { id: "gpu-launch-summary" },
        `${int(l.launches)} launches; launch call p50 ${l.cpu_duration.p50_us.toFixed(1)} µs, `,
        `p99 ${l.cpu_duration.p99_us.toFixed(1)} µs; launch delay p50 `,
        `${l.launch_delay.p50_us.toFixed(1)} µs, p99 ${l.launch_delay.p99_us.toFixed(1)} µs. `,
        `${int(l.short_kernels)} of ${int(l.kernels)} kernels (${pct(l.short_kernels_percent)}) `,
        `are short, ${msOf(l.short_kernels_us)} ms in all.`),
      h("div", { className: "row" },
        histogram("gpu-hist-cpu", "Launch call duration", l.cpu_duration.histogram),
        histogram("gpu-hist-delay", "Launch delay", l.launch_delay.histogram)),
      h("h3", {}, `Outliers (${int(l.cpu_duration_outliers)} slow calls, `,
        `${int(l.launch_delay_outliers)} long delays; the worst shown)`),
      outliers.element),
    h("section", { className: "card wide", id: "gpu-queues" },
      h("h2", {}, "Launch queue per stream"),
      d.queues.length ? h("table", {}, h("thead", {}, h("tr", {},
          ...["Stream", "Max", "Mean", "Blocked on full queue (ms)", "Over time"].map((t) =>
            h("th", {}, t)))),
        h("tbody", {}, ...d.queues.map((q) => h("tr", {},
          h("td", { className: "name" }, q.stream), h("td", { className: "num" }, int(q.max_length)),
          h("td", { className: "num" }, q.mean_length.toFixed(2)),
          h("td", { className: "num" }, msOf(q.blocked_on_full_queue_us)),
          h("td", {}, spark(q))))))
        : h("p", { className: "note" }, "No launches matched to device ops.")),
    h("section", { className: "card wide", id: "gpu-sequences" },
      h("h2", {}, "Frequent kernel sequences (fusion candidates)"),
      d.sequences.length ? h("ol", { className: "seq" }, ...d.sequences.map((s) => h("li", {},
          h("strong", {}, `${s.count}× — ${msOf(s.total_us)} ms in all: `),
          ...s.kernels.flatMap((k, i) => (i ? [" → ", short(k)] : [short(k)])))))
        : h("p", { className: "note" }, "No sequence of kernels repeats.")));
}

export async function renderGpu(ctx: PageContext): Promise<HTMLElement> {
  const data = await fetchGpu(ctx.run, ctx.host, ctx.progress);
  const page = h("div", { id: "gpu-page" }, h("style", {}, CSS),
    h("h1", {}, `GPU timeline — ${data.run}${data.host ? " — " + data.host : ""}`));
  if (!data.devices.length) {
    page.append(h("p", { className: "card", id: "gpu-none" },
      "No device activity in this run (no kernels, copies or sets on a GPU)."),
      pathSection(data.critical_path.steps));
    return page;
  }
  if (data.advice.length) {
    page.append(h("section", { className: "card wide", id: "gpu-advice" },
      h("h2", {}, "What to do"),
      h("ul", {}, ...data.advice.map((a) => h("li", { "data-rule": a.rule }, a.text)))));
  }
  const hosts = new Set(data.devices.map((d) => d.host)).size;
  const rows = data.devices.map((d) => ({ d, label: deviceLabel(d, hosts) }));
  const table = new SortableTable<DeviceRow>(deviceColumns(), rows, 2000, "gpu-devices");
  const select = h("select", { id: "gpu-device-select", "aria-label": "Device" },
    ...rows.map((r, i) => h("option", { value: String(i) }, r.label)));
  const holder = h("div", {}, deviceSection(data.devices[0]));
  select.addEventListener("change", () =>
    holder.replaceChildren(deviceSection(data.devices[Number(select.value)])));
  page.append(
    h("section", { className: "card wide" },
      h("h2", {}, "Temporal breakdown per device (share of its span)"),
      h("div", { className: "controls" },
        h("a", { id: "export-csv", href: apiUrl("csv", { run: ctx.run, host: ctx.host,
                                                         tool: "gpu_timeline" }),
                 download: "" }, "Export as CSV")),
      table.element),
    h("div", { className: "controls" }, h("label", {}, "Device: ", select)),
    holder, pathSection(data.critical_path.steps));
  return page;
}
