// The memory timeline: heap, stack, reserved and free over time as SVG lines, step
// boundaries behind them, a hover card naming the allocation or free under the pointer, and
// drag to zoom (the page fetches the window again at full detail).
import { bytes, h, svg } from "../../dom";
import type { Timeline } from "./data";

const W = 900, H = 280, LEFT = 70, RIGHT = 44, TOP = 12, BOTTOM = 28;
const FRAGMENTATION = { key: "fragmentation", label: "Fragmentation (right axis)",
                        color: "#d93025" };
export const SERIES = [
  { key: "heap", label: "Heap in use", color: "#1a73e8" },
  { key: "stack", label: "Stack", color: "#e8710a" },
  { key: "reserved", label: "Reserved", color: "#9334e6" },
  { key: "free", label: "Free", color: "#188038" },
] as const;

function values(t: Timeline, key: string): (number | null)[] {
  if (key === "heap") return t.heap_bytes;
  if (key === "stack") return t.stack_bytes;
  if (key === "reserved") return t.reserved_bytes;
  return t.free_bytes;
}

// Series the user switched off (kept while the page lives); free memory starts off where it
// would dwarf what is in use.
const hidden = new Set<string>();
const chosen = new Set<string>(); // series the user showed or hid: no longer decided for them

export function timelineChart(t: Timeline, onZoom: (from: number, to: number) => void)
    : HTMLElement {
  const box = h("div", { id: "memory-timeline", className: "timeline-box" });
  draw(box, t, onZoom);
  return box;
}

function draw(box: HTMLElement, t: Timeline, onZoom: (from: number, to: number) => void): void {
  box.replaceChildren();
  if (!t.time_ms.length) {
    box.append(h("p", { className: "muted" }, "No allocations in this window."));
    return;
  }
  const present = SERIES.filter((s) => values(t, s.key).some((v) => v !== null && v > 0));
  if (!chosen.has("free")) {
    const most = (k: string) => values(t, k).reduce<number>((m, v) => Math.max(m, v ?? 0), 0);
    if (most("free") > 4 * Math.max(most("heap") + most("stack"), most("reserved"))) {
      hidden.add("free");
    } else {
      hidden.delete("free");
    }
  }
  const shown = present.filter((s) => !hidden.has(s.key));
  const t0 = t.time_ms[0], t1 = t.time_ms[t.time_ms.length - 1];
  const span = Math.max(t1 - t0, 1e-6);
  const top = shown.reduce((m, s) => values(t, s.key).reduce<number>(
    (n, v) => Math.max(n, v ?? 0), m), 1);
  const x = (ms: number) => LEFT + ((ms - t0) / span) * (W - LEFT - RIGHT);
  const y = (b: number) => H - BOTTOM - (b / top) * (H - TOP - BOTTOM);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img",
                             "aria-label": "Memory over time" });
  for (const s of t.steps) {
    if (s.end_ms < t0 || s.start_ms > t1) continue;
    const a = x(Math.max(s.start_ms, t0));
    chart.append(svg("line", { x1: a, x2: a, y1: TOP, y2: H - BOTTOM, stroke: "#ccc",
                               "stroke-dasharray": "3 3", class: "step-line" },
                     svg("title", {}, `step ${s.step}`)));
  }
  for (let i = 0; i <= 4; i++) {
    const b = (top * i) / 4;
    chart.append(svg("text", { x: LEFT - 6, y: y(b) + 4, "text-anchor": "end",
                               "font-size": 11, fill: "#555" }, bytes(b)));
  }
  chart.append(svg("text", { x: LEFT, y: H - 8, "font-size": 11, fill: "#555" },
                   `${t0.toFixed(3)} ms`));
  chart.append(svg("text", { x: W - RIGHT, y: H - 8, "font-size": 11, fill: "#555",
                             "text-anchor": "end" }, `${t1.toFixed(3)} ms`));
  // Fragmentation is a share: its own axis on the right, 0 to 100 %.
  const fragPresent = t.fragmentation.some((v) => v !== null && v > 0);
  const frag = fragPresent && !hidden.has(FRAGMENTATION.key);
  if (frag) {
    const fy = (f: number) => H - BOTTOM - Math.max(0, Math.min(1, f)) * (H - TOP - BOTTOM);
    let d = "";
    t.fragmentation.forEach((v, i) => {
      if (v === null) return;
      const px = x(t.time_ms[i]), py = fy(v);
      d += d ? `H${px.toFixed(1)}V${py.toFixed(1)}` : `M${px.toFixed(1)},${py.toFixed(1)}`;
    });
    chart.append(svg("path", { d, fill: "none", stroke: FRAGMENTATION.color, "stroke-width": 1,
                               "stroke-dasharray": "4 2", class: "series-fragmentation" }));
    for (const f of [0, 0.5, 1]) {
      chart.append(svg("text", { x: W - RIGHT + 4, y: fy(f) + 4, "font-size": 11,
                                 fill: FRAGMENTATION.color }, `${f * 100}%`));
    }
  }
  for (const s of shown) {
    const vs = values(t, s.key);
    // A step line: memory holds its value until the next event.
    let d = "";
    vs.forEach((v, i) => {
      if (v === null) return;
      const px = x(t.time_ms[i]), py = y(v);
      d += d ? `H${px.toFixed(1)}V${py.toFixed(1)}` : `M${px.toFixed(1)},${py.toFixed(1)}`;
    });
    chart.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 1.5,
                               class: `series-${s.key}` }));
  }
  const cursor = svg("line", { x1: 0, x2: 0, y1: TOP, y2: H - BOTTOM, stroke: "#333",
                               visibility: "hidden" });
  const band = svg("rect", { x: 0, y: TOP, width: 0, height: H - TOP - BOTTOM,
                             fill: "rgba(26,115,232,0.15)", visibility: "hidden" });
  chart.append(cursor, band);
  const card = h("div", { id: "memory-hover", className: "hover-card", role: "status" });
  const legend = h("p", { className: "legend" },
    ...[...present, ...(fragPresent ? [FRAGMENTATION] : [])].map((s) =>
      h("button", { type: "button", className: "legend-item", "data-series": s.key,
                    "aria-pressed": hidden.has(s.key) ? "false" : "true",
                    title: "Show or hide this line",
                    onclick: () => {
                      if (hidden.has(s.key)) hidden.delete(s.key); else hidden.add(s.key);
                      chosen.add(s.key);
                      draw(box, t, onZoom);
                    } },
        h("span", { className: "swatch", style: `background:${s.color}` }), s.label)));

  const toMs = (ev: MouseEvent) => {
    const r = (chart as unknown as Element).getBoundingClientRect();
    const px = ((ev.clientX - r.left) / Math.max(r.width, 1)) * W;
    return t0 + ((px - LEFT) / (W - LEFT - RIGHT)) * span;
  };
  const nearest = (ms: number) => {
    let lo = 0, hi = t.time_ms.length - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (t.time_ms[mid] < ms) lo = mid + 1; else hi = mid; }
    if (lo > 0 && Math.abs(t.time_ms[lo - 1] - ms) < Math.abs(t.time_ms[lo] - ms)) lo--;
    return lo;
  };
  const describe = (i: number) => {
    const rows: [string, string][] = [
      ["Time", `${t.time_ms[i].toFixed(3)} ms`],
      ["Step", t.step[i] === null ? "–" : String(t.step[i])],
      ["Heap in use", bytes(t.heap_bytes[i])],
    ];
    if (t.stack_bytes[i]) rows.push(["Stack", bytes(t.stack_bytes[i])]);
    if (t.reserved_bytes[i] !== null) rows.push(["Reserved", bytes(t.reserved_bytes[i]!)]);
    if (t.free_bytes[i] !== null) rows.push(["Free", bytes(t.free_bytes[i]!)]);
    if (t.fragmentation[i] !== null)
      rows.push(["Fragmentation", `${(100 * t.fragmentation[i]!).toFixed(1)}%`]);
    rows.push([t.activity[i] === "alloc" ? "Allocation by" : "Free of", t.op[i] || "(unknown)"],
              ["Requested", bytes(t.requested_bytes[i])], ["Allocated", bytes(t.size_bytes[i])]);
    if (t.region_type[i]) rows.push(["Region", t.region_type[i]]);
    if (t.data_type[i]) rows.push(["Data type", t.data_type[i]]);
    if (t.shape[i]) rows.push(["Shape", t.shape[i]]);
    card.replaceChildren(h("table", {}, ...rows.map(([k, v]) =>
      h("tr", {}, h("td", { className: "label" }, k), h("td", { "data-key": k }, v)))));
    card.dataset.index = String(i);
  };
  let dragFrom: number | null = null;
  chart.addEventListener("mousemove", (ev) => {
    const me = ev as MouseEvent;
    const ms = toMs(me);
    const i = nearest(ms);
    cursor.setAttribute("x1", String(x(t.time_ms[i])));
    cursor.setAttribute("x2", String(x(t.time_ms[i])));
    cursor.setAttribute("visibility", "visible");
    describe(i);
    if (dragFrom !== null) {
      const a = x(Math.min(dragFrom, ms)), b = x(Math.max(dragFrom, ms));
      band.setAttribute("x", String(a));
      band.setAttribute("width", String(Math.max(0, b - a)));
      band.setAttribute("visibility", "visible");
    }
  });
  chart.addEventListener("mousedown", (ev) => { dragFrom = toMs(ev as MouseEvent); ev.preventDefault(); });
  chart.addEventListener("mouseup", (ev) => {
    if (dragFrom === null) return;
    const to = toMs(ev as MouseEvent);
    const a = Math.max(t0, Math.min(dragFrom, to)), b = Math.min(t1, Math.max(dragFrom, to));
    dragFrom = null;
    band.setAttribute("visibility", "hidden");
    if (b - a > span / 1000) onZoom(a, b);
  });
  chart.addEventListener("mouseleave", () => {
    cursor.setAttribute("visibility", "hidden");
    band.setAttribute("visibility", "hidden");
    dragFrom = null;
  });
  box.append(legend, chart as unknown as Node, card);
}
