// Trace viewer: a canvas timeline fed by the server's level-of-detail window queries.
// Track labels and section headers are DOM (a few hundred at most); events, aggregate blocks,
// counters and flows are drawn on one canvas, never one DOM node per event.
import { apiUrl, ApiError, toolData } from "../api";
import { h, int } from "../dom";
import { hslPixel, pixel, RowRaster } from "./raster";
import type { PageContext } from "./registry";

interface TrackInfo { id: number; section: string; name: string; kind: string; rows: number;
  events: number; }
interface Meta { run: string; host: string; hosts: string[]; origin_ns: number; span_ns: number;
  events: number; flows: number; sections: { name: string; tracks: number[] }[];
  tracks: TrackInfo[]; }
interface End { id: number; track: number; row: number; time: number; }
interface Flow { kind: string; from: End; to: End; }
interface Window {
  start_ns: number; end_ns: number; width: number;
  events: { track: number[]; row: number[]; start: number[]; dur: number[]; name: number[];
            id: number[] };
  aggregates: { track: number[]; row: number[]; start: number[]; end: number[];
                count: number[]; covered: number[] };
  names: Record<string, string>;
  counters: { track: number; time: number[]; value: number[] }[];
  flows: Flow[]; flows_in_window: number;
}
interface EventDetail { id: number; name: string; start_ns: number; duration_ns: number;
  track: number; row: number; section: string; track_name: string;
  stats: Record<string, unknown>; flows: Flow[]; }
interface Matches { query: string; total: number;
  matches: { id: number[]; track: number[]; row: number[]; start: number[]; dur: number[] } | []; }
interface Selection { events: number;
  rows: { name: string; count: number; total_ns: number; average_ns: number }[]; }

type Tool = "select" | "pan" | "zoom" | "timing";
const ROW_H = 18;
const COUNTER_H = 40;
const SECTION_H = 24;
const TRACK_PAD = 4;
const AXIS_H = 28;

/** A duration in the unit that suits it. */
export function duration(ns: number): string {
  const a = Math.abs(ns);
  if (a >= 1e9) return `${(ns / 1e9).toFixed(3)} s`;
  if (a >= 1e6) return `${(ns / 1e6).toFixed(3)} ms`;
  if (a >= 1e3) return `${(ns / 1e3).toFixed(3)} µs`;
  return `${Math.round(ns)} ns`;
}

/** An axis label, with as many decimals as the tick spacing needs. */
function tickLabel(ns: number, tick: number): string {
  const [scale, unit] = tick >= 1e8 ? [1e9, "s"] : tick >= 1e5 ? [1e6, "ms"]
    : tick >= 1e2 ? [1e3, "µs"] : [1, "ns"];
  const decimals = Math.min(Math.max(Math.ceil(-Math.log10(tick / scale)), 0), 6);
  return `${(ns / scale).toFixed(decimals)} ${unit}`;
}

const colours: number[] = [];
/** An event name's colour as a pixel (built once per name). */
function colourPixel(code: number): number {
  let c = colours[code];
  if (c === undefined) c = colours[code] = hslPixel((code * 137.508) % 360, 0.55, 0.62);
  return c;
}
const BLOCK_PIXEL = pixel(183, 185, 187); // merged sub-pixel events: grey

async function fetchTrace<T>(view: string, params: Record<string, string>): Promise<T> {
  for (;;) {
    const response = await fetch(apiUrl(`trace/${view}`, params),
                                 { headers: { Accept: "application/json" } });
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (!response.ok) throw new ApiError(response.status, body?.error ?? response.statusText);
    if (response.status !== 202) return body as T;
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function renderTrace(ctx: PageContext): Promise<HTMLElement> {
  const meta = await toolData<Meta>({ run: ctx.run, host: ctx.host, tool: "trace_viewer" },
                                    ctx.progress);
  const base = { run: ctx.run, host: meta.host };
  const tracks = meta.tracks;
  const collapsed = new Set<string>();
  let view = { t0: 0, t1: Math.max(meta.span_ns, 1) };
  let tool: Tool = "select";
  let data: Window | null = null;
  let selected: EventDetail | null = null;
  let timing: [number, number] | null = null;
  let drag: { x: number; y: number; t0: number; t1: number; scroll: number; moved: boolean;
              x1: number; y1: number } | null = null;
  let drawnFlows: Flow[] = [];
  let drawnRects = 0;
  let drawnBlocks = 0;
  let drawMs = 0;
  const raster = new RowRaster();
  let fetching = false;
  let wanted = false;
  let matches: Matches | null = null;
  let matchAt = -1;
  const trackY = new Map<number, number>(); // track id → y of its first row (content coords)

  // -- DOM ------------------------------------------------------------------------------
  const canvas = h("canvas", { id: "trace-canvas", tabindex: 0,
                               "aria-label": "Trace timeline" });
  const axis = h("canvas", { id: "trace-axis", "aria-hidden": "true" });
  const gutter = h("div", { className: "trace-gutter", id: "trace-tracks" });
  const scroller = h("div", { className: "trace-scroll" },
    h("div", { className: "trace-inner" }, gutter,
      h("div", { className: "trace-canvas-col" }, canvas)));
  const range = h("span", { id: "trace-range", className: "muted" });
  const drawnLabel = h("span", { id: "trace-drawn", className: "muted" });
  const timingLabel = h("span", { id: "trace-timing" });
  const details = h("div", { id: "trace-details", className: "card" },
    h("p", { className: "muted" }, "Click an event for its details; drag to select many."));
  const search = h("input", { type: "search", id: "trace-search", placeholder: "Search events",
                              "aria-label": "Search events by name" });
  const matchLabel = h("span", { id: "trace-matches", className: "muted" });
  const toolButtons = new Map<Tool, HTMLButtonElement>();
  const toolBar = h("div", { className: "trace-tools", role: "radiogroup" });
  for (const [name, key] of [["select", "1"], ["pan", "2"], ["zoom", "3"], ["timing", "4"]]) {
    const b = h("button", { id: `trace-tool-${name}`, type: "button", role: "radio",
                            title: `${name} (${key})`,
                            onclick: () => setTool(name as Tool) }, name);
    toolButtons.set(name as Tool, b);
    toolBar.append(b);
  }

  function setTool(t: Tool): void {
    tool = t;
    for (const [name, b] of toolButtons) b.setAttribute("aria-checked", String(name === t));
    canvas.dataset.tool = t;
  }
  setTool("select");

  // -- layout ---------------------------------------------------------------------------
  function trackHeight(t: TrackInfo): number {
    return t.kind === "counter" ? COUNTER_H : Math.max(t.rows, 1) * ROW_H + TRACK_PAD;
  }

  function buildGutter(): void {
    trackY.clear();
    const children: HTMLElement[] = [];
    let y = 0;
    for (const section of meta.sections) {
      const open = !collapsed.has(section.name);
      const header = h("button", { className: "trace-section", type: "button",
                                   "aria-expanded": String(open), "data-section": section.name,
                                   onclick: () => {
                                     if (open) collapsed.add(section.name);
                                     else collapsed.delete(section.name);
                                     buildGutter(); draw();
                                   } },
        `${open ? "▾" : "▸"} ${section.name}`);
      header.style.height = `${SECTION_H}px`;
      children.push(header);
      y += SECTION_H;
      if (!open) continue;
      for (const id of section.tracks) {
        const t = tracks[id];
        const label = h("div", { className: "trace-track", "data-track": id, title: t.name },
                        t.name);
        label.style.height = `${trackHeight(t)}px`;
        children.push(label);
        trackY.set(id, y);
        y += trackHeight(t);
      }
    }
    gutter.replaceChildren(...children);
  }

  // -- drawing --------------------------------------------------------------------------
  function size(c: HTMLCanvasElement, w: number, hgt: number): CanvasRenderingContext2D {
    const dpr = window.devicePixelRatio || 1;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(hgt * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(hgt * dpr);
      c.style.width = `${w}px`;
      c.style.height = `${hgt}px`;
    }
    const g = c.getContext("2d")!;
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    return g;
  }

  const width = () => Math.max(canvas.parentElement!.clientWidth, 100);
  const xOf = (t: number) => ((t - view.t0) / (view.t1 - view.t0)) * width();
  const tOf = (x: number) => view.t0 + (x / width()) * (view.t1 - view.t0);
  const yOf = (track: number, row: number) => {
    const y = trackY.get(track);
    return y === undefined ? null : y + row * ROW_H - scroller.scrollTop;
  };

  function drawAxis(): void {
    const w = width();
    const g = size(axis, w, AXIS_H);
    g.clearRect(0, 0, w, AXIS_H);
    g.fillStyle = "#fff";
    g.fillRect(0, 0, w, AXIS_H);
    const span = view.t1 - view.t0;
    const step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    const tick = span / step > 40 ? step * 5 : span / step > 16 ? step * 2 : step;
    g.fillStyle = "#5f6368";
    g.strokeStyle = "#dadce0";
    g.font = "11px system-ui, sans-serif";
    for (let t = Math.ceil(view.t0 / tick) * tick; t <= view.t1; t += tick) {
      const x = xOf(t);
      g.beginPath(); g.moveTo(x, AXIS_H - 8); g.lineTo(x, AXIS_H); g.stroke();
      g.fillText(tickLabel(t, tick), x + 2, 12);
    }
    if (timing) {
      const [a, b] = timing;
      g.fillStyle = "rgba(26,115,232,.25)";
      g.fillRect(xOf(a), 0, xOf(b) - xOf(a), AXIS_H);
      g.fillStyle = "#1a73e8";
      g.font = "bold 11px system-ui, sans-serif";
      g.fillText(duration(b - a), Math.max(xOf(a), 0) + 4, AXIS_H - 4);
    }
  }

  function draw(): void {
    const began = performance.now();
    const w = width();
    const hgt = scroller.clientHeight;
    const g = size(canvas, w, hgt);
    g.clearRect(0, 0, w, hgt);
    drawAxis();
    range.textContent = `${duration(view.t0)} – ${duration(view.t1)}`;
    if (!data) return;
    const scale = w / (view.t1 - view.t0);
    // Each shown track's top on the canvas (NaN: collapsed), read once: the loops below may
    // run over 100,000 events a frame.
    const tops = new Float64Array(tracks.length).fill(NaN);
    const scrollTop = scroller.scrollTop;
    for (const [id, y] of trackY) tops[id] = y - scrollTop;
    const agg = data.aggregates;
    let blocks = 0;
    for (let i = 0; i < agg.count.length; i++) {
      const y = tops[agg.track[i]] + agg.row[i] * ROW_H;
      if (!(y >= -ROW_H && y <= hgt)) continue;  // also false for NaN
      const x0 = (agg.start[i] - view.t0) * scale;
      const x1 = (agg.end[i] - view.t0) * scale;
      if (x1 < 0 || x0 > w) continue;
      raster.add(y, x0, Math.max(x1, x0 + 1), BLOCK_PIXEL);
      blocks++;
    }
    const ev = data.events;
    const labelled: number[] = [];
    let drawn = 0;
    for (let i = 0; i < ev.id.length; i++) {
      const y = tops[ev.track[i]] + ev.row[i] * ROW_H;
      if (!(y >= -ROW_H && y <= hgt)) continue;
      const x0 = (ev.start[i] - view.t0) * scale;
      const wd = Math.max(ev.dur[i] * scale, 1);
      if (x0 + wd < 0 || x0 > w) continue;
      raster.add(y, x0, x0 + wd, colourPixel(ev.name[i]));
      drawn++;
      if (wd > 40) labelled.push(i, x0, y, wd);
    }
    raster.paint(g, window.devicePixelRatio || 1, 1, ROW_H - 1);
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    g.fillStyle = "#202124";
    for (let k = 0; k < labelled.length; k += 4) {
      const [i, x0, y, wd] = [labelled[k], labelled[k + 1], labelled[k + 2], labelled[k + 3]];
      const left = Math.max(x0, 0);
      const room = Math.min(x0 + wd, w) - left - 4;
      if (room > 20) {
        g.save();
        g.beginPath(); g.rect(left, y, room + 2, ROW_H); g.clip();
        g.fillText(data.names[ev.name[i]] ?? "", left + 2, y + ROW_H / 2);
        g.restore();
      }
    }
    drawnRects = drawn;
    drawnBlocks = blocks;
    // Counters: a line normalised to the window's largest value.
    for (const c of data.counters) {
      const y = trackY.get(c.track);
      if (y === undefined || !c.time.length) continue;
      const top = y - scroller.scrollTop;
      const max = Math.max(...c.value.map(Math.abs), 1e-12);
      g.strokeStyle = "#1a73e8";
      g.beginPath();
      c.time.forEach((t, i) => {
        const px = (t - view.t0) * scale;
        const py = top + COUNTER_H - 3 - (c.value[i] / max) * (COUNTER_H - 8);
        if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
      });
      g.stroke();
      g.fillStyle = "#5f6368";
      g.fillText(`max ${max.toPrecision(4)}`, 4, top + 8);
    }
    // Timing interval and drag rectangle.
    if (timing) {
      g.fillStyle = "rgba(26,115,232,.12)";
      g.fillRect(xOf(timing[0]), 0, xOf(timing[1]) - xOf(timing[0]), hgt);
    }
    if (drag && drag.moved && (tool === "select" || tool === "zoom")) {
      g.strokeStyle = "#1a73e8";
      g.strokeRect(Math.min(drag.x, drag.x1), Math.min(drag.y, drag.y1),
                   Math.abs(drag.x1 - drag.x), Math.abs(drag.y1 - drag.y));
    }
    // Flows: the window's (light), and the selected event's (strong).
    drawnFlows = [];
    const arrows = (flows: Flow[], style: string) => {
      g.strokeStyle = style;
      g.fillStyle = style;
      for (const f of flows) {
        const ya = yOf(f.from.track, f.from.row);
        const yb = yOf(f.to.track, f.to.row);
        if (ya === null || yb === null) continue;
        const xa = xOf(f.from.time), xb = xOf(f.to.time);
        const y0 = ya + ROW_H / 2, y1 = yb + ROW_H / 2;
        g.beginPath(); g.moveTo(xa, y0); g.lineTo(xb, y1); g.stroke();
        const ang = Math.atan2(y1 - y0, xb - xa);
        g.beginPath(); g.moveTo(xb, y1);
        g.lineTo(xb - 7 * Math.cos(ang - 0.4), y1 - 7 * Math.sin(ang - 0.4));
        g.lineTo(xb - 7 * Math.cos(ang + 0.4), y1 - 7 * Math.sin(ang + 0.4));
        g.fill();
        drawnFlows.push(f);
      }
    };
    arrows(data.flows, "rgba(95,99,104,.35)");
    if (selected) {
      arrows(selected.flows, "#d93025");
      const y = yOf(selected.track, selected.row);
      if (y !== null) {
        g.strokeStyle = "#d93025";
        g.lineWidth = 2;
        g.strokeRect(xOf(selected.start_ns), y + 1,
                     Math.max(selected.duration_ns * scale, 2), ROW_H - 2);
        g.lineWidth = 1;
      }
    }
    drawnLabel.textContent = `${int(drawn)} events, ${int(blocks)} merged blocks`;
    canvas.dataset.drawn = String(drawn);
    drawMs = performance.now() - began;
  }

  // -- fetching -------------------------------------------------------------------------
  async function refresh(): Promise<void> {
    if (fetching) { wanted = true; return; }
    fetching = true;
    try {
      do {
        wanted = false;
        const span = view.t1 - view.t0;
        // Fetch a margin on both sides so that panning draws at once.
        const start = Math.floor(view.t0 - span / 2);
        const end = Math.ceil(view.t1 + span / 2);
        const w = Math.min(Math.round(width() * 2), 20000);
        const answer = await fetchTrace<Window>("window", { ...base, start_ns: String(start),
          end_ns: String(Math.max(end, start + 1)), width: String(w) });
        if (ctx.stale()) return;
        data = answer;
        canvas.dataset.window = `${answer.start_ns},${answer.end_ns}`;
        draw();
      } while (wanted);
    } finally {
      fetching = false;
    }
  }

  let pending = 0;
  function changed(): void {
    draw();
    window.clearTimeout(pending);
    pending = window.setTimeout(() => void refresh().catch(showError), 40);
  }

  function showError(err: unknown): void {
    details.replaceChildren(h("p", { className: "error", role: "alert" },
      err instanceof Error ? err.message : String(err)));
  }

  function zoom(factor: number, at: number): void {
    const span = Math.max((view.t1 - view.t0) * factor, 10);
    const share = (at - view.t0) / (view.t1 - view.t0);
    view = { t0: at - share * span, t1: at - share * span + span };
    changed();
  }

  function pan(share: number): void {
    const d = (view.t1 - view.t0) * share;
    view = { t0: view.t0 + d, t1: view.t1 + d };
    changed();
  }

  // -- details --------------------------------------------------------------------------
  function kv(rows: [string, string][]): HTMLElement {
    return h("dl", { className: "kv" }, ...rows.flatMap(([k, v]) => [h("dt", {}, k),
                                                                    h("dd", {}, v)]));
  }

  async function selectEvent(id: number): Promise<void> {
    const d = await fetchTrace<EventDetail>("event", { ...base, id: String(id) });
    selected = d;
    const flowList = d.flows.map((f) => {
      const other = f.from.id === d.id ? f.to : f.from;
      const dir = f.from.id === d.id ? "to" : "from";
      return h("li", {}, h("button", { type: "button", className: "linkish trace-flow",
                                       onclick: () => void goTo(other.id, 0).catch(showError) },
        `${f.kind} flow ${dir} event ${other.id} (${tracks[other.track].name}, ` +
        `${duration(other.time)})`));
    });
    details.replaceChildren(
      h("h2", { id: "trace-detail-name" }, d.name),
      kv([["Start", duration(d.start_ns)], ["Duration", duration(d.duration_ns)],
          ["Track", `${d.section} › ${d.track_name}`],
          ...Object.entries(d.stats).map(([k, v]): [string, string] => [k, String(v)])]),
      ...(flowList.length ? [h("div", {}, h("h3", {}, "Flows"),
                                 h("ul", { id: "trace-flows" }, ...flowList))] : []));
    draw();
  }

  async function selectRange(a: number, b: number, y0: number, y1: number): Promise<void> {
    const top = Math.min(y0, y1) + scroller.scrollTop;
    const bottom = Math.max(y0, y1) + scroller.scrollTop;
    const ids = [...trackY.entries()]
      .filter(([id, y]) => y < bottom && y + trackHeight(tracks[id]) > top)
      .map(([id]) => id);
    if (!ids.length) return;
    const sel = await fetchTrace<Selection>("selection", { ...base,
      start_ns: String(Math.floor(a)), end_ns: String(Math.ceil(b)), tracks: ids.join(",") });
    selected = null;
    details.replaceChildren(
      h("h2", {}, `${int(sel.events)} events selected (${duration(b - a)})`),
      h("table", { id: "trace-selection" },
        h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Count"),
                         h("th", {}, "Total"), h("th", {}, "Average"))),
        h("tbody", {}, ...sel.rows.slice(0, 500).map((r) => h("tr", {},
          h("td", { className: "name" }, r.name), h("td", {}, int(r.count)),
          h("td", {}, duration(r.total_ns)), h("td", {}, duration(r.average_ns)))))));
    draw();
  }

  function hit(x: number, y: number): number | null {
    if (!data) return null;
    const ev = data.events;
    const t = tOf(x);
    const slack = 2 * (view.t1 - view.t0) / width();
    let best: number | null = null;
    for (let i = 0; i < ev.id.length; i++) {
      const ty = yOf(ev.track[i], ev.row[i]);
      if (ty === null || y < ty || y >= ty + ROW_H) continue;
      if (t >= ev.start[i] - slack && t <= ev.start[i] + ev.dur[i] + slack) {
        if (best === null || ev.dur[best] > ev.dur[i]) best = i;
      }
    }
    return best === null ? null : ev.id[best];
  }

  async function goTo(id: number, dur: number): Promise<void> {
    const d = await fetchTrace<EventDetail>("event", { ...base, id: String(id) });
    const section = tracks[d.track].section;
    if (collapsed.delete(section)) buildGutter();
    const span = Math.max(d.duration_ns * 3, 1000, dur);
    view = { t0: d.start_ns - span / 3, t1: d.start_ns - span / 3 + span };
    const y = trackY.get(d.track) ?? 0;
    scroller.scrollTop = Math.max(y + d.row * ROW_H - scroller.clientHeight / 2, 0);
    changed();
    await selectEvent(id);
  }

  async function runSearch(step: number): Promise<void> {
    const q = search.value.trim();
    if (!q) return;
    if (!matches || matches.query !== q) {
      matches = await fetchTrace<Matches>("search", { ...base, q });
      matchAt = step > 0 ? -1 : 0;
    }
    const m = matches.matches;
    if (Array.isArray(m) || !m.id.length) {
      matchLabel.textContent = "no match";
      return;
    }
    matchAt = (matchAt + step + m.id.length) % m.id.length;
    matchLabel.textContent = `${int(matchAt + 1)} of ${int(matches.total)}`;
    await goTo(m.id[matchAt], m.dur[matchAt]);
  }

  // -- input ----------------------------------------------------------------------------
  const local = (e: MouseEvent) => {
    const r = canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };
  canvas.addEventListener("mousedown", (e) => {
    const p = local(e);
    drag = { x: p.x, y: p.y, t0: view.t0, t1: view.t1, scroll: scroller.scrollTop,
             moved: false, x1: p.x, y1: p.y };
    canvas.focus();
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const p = local(e);
    drag.x1 = p.x; drag.y1 = p.y;
    if (Math.abs(p.x - drag.x) + Math.abs(p.y - drag.y) > 3) drag.moved = true;
    if (!drag.moved) return;
    if (tool === "pan") {
      const dt = ((p.x - drag.x) / width()) * (drag.t1 - drag.t0);
      view = { t0: drag.t0 - dt, t1: drag.t1 - dt };
      scroller.scrollTop = drag.scroll - (p.y - drag.y);
      changed();
    } else if (tool === "timing") {
      const a = tOf(Math.min(drag.x, p.x)), b = tOf(Math.max(drag.x, p.x));
      timing = [a, b];
      timingLabel.textContent = `Interval: ${duration(b - a)}`;
      draw();
    } else {
      draw();
    }
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag || !canvas.isConnected) { drag = null; return; }
    const d = drag;
    drag = null;
    const p = local(e);
    if (tool === "select") {
      if (!d.moved) {
        const id = hit(p.x, p.y);
        if (id !== null) void selectEvent(id).catch(showError);
      } else {
        void selectRange(tOf(Math.min(d.x, p.x)), tOf(Math.max(d.x, p.x)), d.y, p.y)
          .catch(showError);
      }
    } else if (tool === "zoom") {
      if (d.moved && Math.abs(p.x - d.x) > 3) {
        const a = tOf(Math.min(d.x, p.x)), b = tOf(Math.max(d.x, p.x));
        view = { t0: a, t1: Math.max(b, a + 10) };
        changed();
      } else {
        zoom(e.shiftKey ? 2 : 0.5, tOf(p.x));
      }
    }
    draw();
  });
  scroller.addEventListener("wheel", (e) => {
    const r = canvas.getBoundingClientRect();
    const at = tOf(e.clientX - r.left);
    if (e.ctrlKey || e.altKey || tool === "zoom") {
      e.preventDefault();
      zoom(Math.pow(1.0015, e.deltaY), at);
    } else if (e.shiftKey) {
      e.preventDefault();
      pan((e.deltaY || e.deltaX) / 1000);
    }
  }, { passive: false });
  scroller.addEventListener("scroll", () => draw());
  const onKey = (e: KeyboardEvent) => {
    if (!canvas.isConnected) { window.removeEventListener("keydown", onKey); return; }
    const target = e.target as HTMLElement | null;
    if (target && (target.tagName === "INPUT" || target.tagName === "SELECT")) return;
    const mid = (view.t0 + view.t1) / 2;
    const k = e.key.toLowerCase();
    if (k === "w") zoom(0.8, mid);
    else if (k === "s") zoom(1.25, mid);
    else if (k === "a") pan(-0.2);
    else if (k === "d") pan(0.2);
    else if (k === "1") setTool("select");
    else if (k === "2") setTool("pan");
    else if (k === "3") setTool("zoom");
    else if (k === "4") setTool("timing");
    else return;
    e.preventDefault();
  };
  window.addEventListener("keydown", onKey);
  search.addEventListener("keydown", (e) => {
    if (e.key === "Enter") void runSearch(e.shiftKey ? -1 : 1).catch(showError);
  });
  const prev = h("button", { type: "button", id: "trace-prev",
                             onclick: () => void runSearch(-1).catch(showError) }, "◀ Prev");
  const next = h("button", { type: "button", id: "trace-next",
                             onclick: () => void runSearch(1).catch(showError) }, "Next ▶");
  const reset = h("button", { type: "button", id: "trace-reset", onclick: () => {
    view = { t0: 0, t1: Math.max(meta.span_ns, 1) }; changed();
  } }, "Reset view");
  new ResizeObserver(() => draw()).observe(scroller);

  // Hooks for tests and scripting: where an event is drawn, what the view is.
  (window as unknown as Record<string, unknown>).stepscopeTrace = {
    view: () => ({ ...view }),
    locate: (id: number) => {
      if (!data) return null;
      const i = data.events.id.indexOf(id);
      if (i < 0) return null;
      const y = yOf(data.events.track[i], data.events.row[i]);
      const r = canvas.getBoundingClientRect();
      if (y === null) return null;
      const x0 = Math.max(xOf(data.events.start[i]), 0);
      const x1 = Math.min(xOf(data.events.start[i] + data.events.dur[i]), width());
      return { x: r.left + (x0 + x1) / 2, y: r.top + y + ROW_H / 2 };
    },
    flows: () => drawnFlows.map((f) => ({ kind: f.kind, from: f.from.id, to: f.to.id })),
    rects: () => drawnRects,
    blocks: () => drawnBlocks,
    drawMs: () => drawMs,
    pan: (share: number) => pan(share),
    names: () => (data ? data.events.id.map((_, i) => data!.names[data!.events.name[i]]) : []),
    ready: () => !fetching && data !== null,
  };

  buildGutter();
  const page = h("div", { id: "trace-page" },
    h("div", { className: "controls" }, toolBar, search, prev, next, matchLabel, reset,
      timingLabel),
    h("div", { className: "trace-axis-row" }, h("div", { className: "trace-axis-gutter" },
      range, " ", drawnLabel), axis),
    scroller, details);
  setTimeout(() => { draw(); void refresh().catch(showError); }, 0);
  return page;
}
