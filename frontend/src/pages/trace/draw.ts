// Trace viewer drawing: the track gutter (DOM: a few hundred labels at most), the time axis,
// and on one canvas the events, merged blocks, counters, flows, the selection and the timing
// interval, never one DOM node per event.
import { bytes, count, duration, h, int } from "../../dom";
import { hslPixel, pixel, RowRaster } from "../raster";
import { AXIS_H, Band, COUNTER_H, Flow, flowsDrawn, FLOWS_AUTO_MAX, layout, ROW_H,
         SECTION_H, TraceState, trackHeight } from "./state";

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
// Each event at least BOUNDARY_MIN_PX wide starts with a one-pixel white line: back-to-back
// steps (or ops) of one colour would otherwise draw as one bar.
const BOUNDARY_PIXEL = pixel(255, 255, 255);
const BOUNDARY_MIN_PX = 3;

/** A counter's value as its track's unit asks: bytes in KiB/MiB/GiB, else a plain count. */
function counterText(track: string, value: number): string {
  return /\(bytes\)$/.test(track) ? bytes(value) : count(value);
}

/** ``text`` as it fits in ``room`` pixels: whole, else cut short with an ellipsis ("" when
 * not even one character fits). */
function fitted(g: CanvasRenderingContext2D, text: string, room: number): string {
  const full = g.measureText(text).width;
  if (full <= room) return text;
  const fits = (n: number) => g.measureText(`${text.slice(0, n)}…`).width <= room;
  // Guess from the average character's width, then step to the longest prefix that fits:
  // a few measurements, not one per character.
  let n = Math.max(Math.floor((text.length * room) / full) - 1, 0);
  while (n > 0 && !fits(n)) n--;
  while (n + 1 < text.length && fits(n + 1)) n++;
  if (n > 0 && /[\uD800-\uDBFF]/.test(text[n - 1])) n--; // not half a surrogate pair
  return n > 0 ? `${text.slice(0, n)}…` : "";
}

/** Size a canvas to ``w`` × ``hgt`` CSS pixels at the screen's pixel ratio. */
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

/** The elements the timeline is drawn into. */
export interface Surface {
  canvas: HTMLCanvasElement;
  axis: HTMLCanvasElement;
  gutter: HTMLElement;
  scroller: HTMLElement;
  range: HTMLElement; // the shown time range, as text
  drawnLabel: HTMLElement; // how much was drawn, as text
  flowToggle: HTMLInputElement; // draw the window's flow arrows
  flowLabel: HTMLElement; // how many flows the window has, and whether they are drawn
}

export function createSurface(): Surface {
  const canvas = h("canvas", { id: "trace-canvas", tabindex: 0,
                               "aria-label": "Trace timeline" });
  const gutter = h("div", { className: "trace-gutter", id: "trace-tracks" });
  return {
    canvas, gutter,
    axis: h("canvas", { id: "trace-axis", "aria-hidden": "true" }),
    scroller: h("div", { className: "trace-scroll" },
      h("div", { className: "trace-inner" }, gutter,
        h("div", { className: "trace-canvas-col" }, canvas))),
    range: h("span", { id: "trace-range", className: "muted" }),
    drawnLabel: h("span", { id: "trace-drawn", className: "muted" }),
    flowToggle: h("input", { type: "checkbox", id: "trace-flow-toggle" }),
    flowLabel: h("span", { id: "trace-flow-note", className: "muted" }),
  };
}

export class Painter {
  /** What the last frame drew (for the test hooks). */
  drawnFlows: Flow[] = [];
  drawnRects = 0;
  drawnBlocks = 0;
  drawnLabels: { id: number; text: string; x: number; y: number; room: number }[] = [];
  drawnCounters: { track: string; text: string }[] = [];
  drawMs = 0;
  private readonly raster = new RowRaster();

  constructor(private readonly s: TraceState, readonly el: Surface) {}

  width(): number { return Math.max(this.el.canvas.parentElement!.clientWidth, 100); }
  xOf(t: number): number { const v = this.s.view; return ((t - v.t0) / (v.t1 - v.t0)) * this.width(); }
  tOf(x: number): number { const v = this.s.view; return v.t0 + (x / this.width()) * (v.t1 - v.t0); }
  /** A row's top on the canvas; null when its track is not shown. */
  yOf(track: number, row: number): number | null {
    const y = this.s.trackY.get(track);
    return y === undefined ? null : y + row * ROW_H - this.el.scroller.scrollTop;
  }

  /** Section headers (click to fold) and track labels, laid out as the canvas rows are. */
  buildGutter(): void {
    const s = this.s;
    const children = layout(s).map((item) => {
      if (item.kind === "section") {
        const header = h("button", { className: "trace-section", type: "button",
                                     "aria-expanded": String(item.open), "data-section": item.name,
                                     onclick: () => {
                                       if (item.open) s.collapsed.add(item.name);
                                       else s.collapsed.delete(item.name);
                                       this.buildGutter(); this.draw();
                                     } },
          `${item.open ? "▾" : "▸"} ${item.name} (pid ${item.pid})`);
        header.style.height = `${SECTION_H}px`;
        return header;
      }
      const t = s.tracks[item.id];
      const label = h("div", { className: "trace-track", "data-track": item.id, title: t.name },
                      t.name);
      label.style.height = `${trackHeight(t)}px`;
      return label;
    });
    this.el.gutter.replaceChildren(...children);
  }

  private drawAxis(): void {
    const { view, timing } = this.s;
    const w = this.width();
    const g = size(this.el.axis, w, AXIS_H);
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
      const x = this.xOf(t);
      g.beginPath(); g.moveTo(x, AXIS_H - 8); g.lineTo(x, AXIS_H); g.stroke();
      g.fillText(tickLabel(t, tick), x + 2, 12);
    }
    if (timing) {
      const [a, b] = timing;
      g.fillStyle = "rgba(26,115,232,.25)";
      g.fillRect(this.xOf(a), 0, this.xOf(b) - this.xOf(a), AXIS_H);
      g.fillStyle = "#1a73e8";
      g.font = "bold 11px system-ui, sans-serif";
      g.fillText(duration(b - a), Math.max(this.xOf(a), 0) + 4, AXIS_H - 4);
    }
  }

  /** Draw the axis and the canvas for the current state. */
  draw(): void {
    const began = performance.now();
    const s = this.s;
    const { canvas, scroller } = this.el;
    // A page switched away from (another run or tool) may still get a resize or a late
    // window answer: it has no size to draw at, and nobody to see it.
    if (!canvas.isConnected) return;
    const view = s.view;
    const w = this.width();
    const hgt = scroller.clientHeight;
    const g = size(canvas, w, hgt);
    g.clearRect(0, 0, w, hgt);
    this.drawAxis();
    this.el.range.textContent = `${duration(view.t0)} – ${duration(view.t1)}`;
    const data = s.data;
    if (!data) return;
    const scale = w / (view.t1 - view.t0);
    // Each shown track's top on the canvas (NaN: collapsed), read once: the loops below may
    // run over 100,000 events a frame.
    const tops = new Float64Array(s.tracks.length).fill(NaN);
    const scrollTop = scroller.scrollTop;
    for (const [id, y] of s.trackY) tops[id] = y - scrollTop;
    const agg = data.aggregates;
    let blocks = 0;
    for (let i = 0; i < agg.count.length; i++) {
      const y = tops[agg.track[i]] + agg.row[i] * ROW_H;
      if (!(y >= -ROW_H && y <= hgt)) continue;  // also false for NaN
      const x0 = (agg.start[i] - view.t0) * scale;
      const x1 = (agg.end[i] - view.t0) * scale;
      if (x1 < 0 || x0 > w) continue;
      this.raster.add(y, x0, Math.max(x1, x0 + 1), BLOCK_PIXEL);
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
      this.raster.add(y, x0, x0 + wd, colourPixel(ev.name[i]));
      if (wd >= BOUNDARY_MIN_PX) this.raster.add(y, x0, x0 + 1, BOUNDARY_PIXEL);
      drawn++;
      if (wd > 40) labelled.push(i, x0, y, wd);
    }
    this.raster.paint(g, window.devicePixelRatio || 1, 1, ROW_H - 1);
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    g.fillStyle = "#202124";
    this.drawnLabels = [];
    for (let k = 0; k < labelled.length; k += 4) {
      const [i, x0, y, wd] = [labelled[k], labelled[k + 1], labelled[k + 2], labelled[k + 3]];
      const left = Math.max(x0, 0);
      const room = Math.min(x0 + wd, w) - left - 4;
      const text = room > 20 ? fitted(g, data.names[ev.name[i]] ?? "", room) : "";
      if (text) {
        g.fillText(text, left + 2, y + ROW_H / 2);
        this.drawnLabels.push({ id: ev.id[i], text, x: left + 2, y, room });
      }
    }
    this.drawnRects = drawn;
    this.drawnBlocks = blocks;
    // Counters: a line normalised to the window's largest value.
    this.drawnCounters = [];
    for (const c of data.counters) {
      const y = s.trackY.get(c.track);
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
      const track = s.tracks[c.track]?.name ?? "";
      const text = `max ${counterText(track, max)}`;
      g.fillText(text, 4, top + 8);
      this.drawnCounters.push({ track, text });
    }
    // Timing interval and drag rectangle.
    const { timing, drag } = s;
    if (timing) {
      g.fillStyle = "rgba(26,115,232,.12)";
      g.fillRect(this.xOf(timing[0]), 0, this.xOf(timing[1]) - this.xOf(timing[0]), hgt);
      g.fillStyle = "#1a73e8"; // its ends, which drag
      for (const t of timing) g.fillRect(Math.round(this.xOf(t)) - 1, 0, 2, hgt);
    }
    if (drag && drag.moved && (s.tool === "select" || s.tool === "zoom")
        && drag.zoom !== "scale") {
      g.strokeStyle = "#1a73e8";
      g.strokeRect(Math.min(drag.x, drag.x1), Math.min(drag.y, drag.y1),
                   Math.abs(drag.x1 - drag.x), Math.abs(drag.y1 - drag.y));
    }
    // Flows: the window's (light), and the selected event's (strong).
    this.drawnFlows = [];
    const arrows = (flows: Flow[], style: string) => {
      g.strokeStyle = style;
      g.fillStyle = style;
      for (const f of flows) {
        const ya = this.yOf(f.from.track, f.from.row);
        const yb = this.yOf(f.to.track, f.to.row);
        if (ya === null || yb === null) continue;
        const xa = this.xOf(f.from.time), xb = this.xOf(f.to.time);
        const y0 = ya + ROW_H / 2, y1 = yb + ROW_H / 2;
        g.beginPath(); g.moveTo(xa, y0); g.lineTo(xb, y1); g.stroke();
        const ang = Math.atan2(y1 - y0, xb - xa);
        g.beginPath(); g.moveTo(xb, y1);
        g.lineTo(xb - 7 * Math.cos(ang - 0.4), y1 - 7 * Math.sin(ang - 0.4));
        g.lineTo(xb - 7 * Math.cos(ang + 0.4), y1 - 7 * Math.sin(ang + 0.4));
        g.fill();
        this.drawnFlows.push(f);
      }
    };
    canvas.dataset.overlay = String(drawBands(g, s.overlay, view.t0, scale, w, hgt));
    const flowsOn = flowsDrawn(s);
    if (flowsOn) arrows(data.flows, "rgba(95,99,104,.35)");
    this.showFlowState(flowsOn, data.flows_in_window, data.flows.length);
    const selected = s.selected;
    if (selected) {
      arrows(selected.flows, "#d93025");
      const y = this.yOf(selected.track, selected.row);
      if (y !== null) {
        g.strokeStyle = "#d93025";
        g.lineWidth = 2;
        g.strokeRect(this.xOf(selected.start_ns), y + 1,
                     Math.max(selected.duration_ns * scale, 2), ROW_H - 2);
        g.lineWidth = 1;
      }
    }
    this.el.drawnLabel.textContent = data.coarse
      ? `overview: ${drawn ? `${int(drawn)} events, ` : ""}${int(blocks)} blocks `
        + (data.events_coming ? "(reading this window's events)" : "(the index is being built)")
      : `${int(drawn)} events, ${int(blocks)} merged blocks`;
    canvas.dataset.drawn = String(drawn);
    canvas.dataset.blocks = String(blocks);
    canvas.dataset.coarse = data.coarse ? "1" : "";
    this.drawMs = performance.now() - began;
  }

  /** The flow toggle's state and its note: how many flows the window has, and why they
   * are (not) drawn. */
  private showFlowState(on: boolean, inWindow: number, sent: number): void {
    const { flowToggle, flowLabel } = this.el;
    flowToggle.checked = on;
    flowToggle.dataset.mode = this.s.flows;
    const n = int(inWindow);
    flowLabel.textContent = !inWindow ? "(none in view)"
      : on && sent < inWindow ? `(${n} in view: too many to draw; zoom in)`
      : on ? `(${n} in view)`
      : this.s.flows === "auto" ? `(${n} in view: hidden past ${FLOWS_AUTO_MAX}; tick to draw)`
      : `(${n} in view, hidden)`;
  }

  /** Where event ``id`` of the last window is drawn, on the canvas (x from its left, y from
   * its top): its first and last pixel column and its row's top. */
  box(id: number): { x0: number; x1: number; y: number } | null {
    const data = this.s.data;
    if (!data) return null;
    const i = data.events.id.indexOf(id);
    const y = i < 0 ? null : this.yOf(data.events.track[i], data.events.row[i]);
    if (y === null) return null;
    return { x0: this.xOf(data.events.start[i]),
             x1: this.xOf(data.events.start[i] + data.events.dur[i]), y };
  }

  /** Where event ``id`` of the last window is drawn, in page coordinates. */
  locate(id: number): { x: number; y: number } | null {
    const data = this.s.data;
    if (!data) return null;
    const i = data.events.id.indexOf(id);
    if (i < 0) return null;
    const y = this.yOf(data.events.track[i], data.events.row[i]);
    const r = this.el.canvas.getBoundingClientRect();
    if (y === null) return null;
    const x0 = Math.max(this.xOf(data.events.start[i]), 0);
    const x1 = Math.min(this.xOf(data.events.start[i] + data.events.dur[i]), this.width());
    return { x: r.left + (x0 + x1) / 2, y: r.top + y + ROW_H / 2 };
  }
}

const BAND_COLOURS: Record<string, string> = {
  compute: "rgba(59,125,216,.16)", communication: "rgba(224,128,58,.2)",
  host: "rgba(212,168,42,.18)", launch: "rgba(46,158,106,.2)",
};

/** Translucent bands across the canvas for ``bands`` (view ns); how many were in view. */
function drawBands(g: CanvasRenderingContext2D, bands: Band[], t0: number, scale: number,
                   w: number, hgt: number): number {
  let shown = 0;
  for (const b of bands) {
    const x0 = Math.max((b.start - t0) * scale, 0);
    const x1 = Math.min((b.end - t0) * scale, w);
    if (x1 < 0 || x0 > w) continue;
    g.fillStyle = BAND_COLOURS[b.kind] ?? "rgba(217,48,37,.14)";
    g.fillRect(x0, 0, Math.max(x1 - x0, 1), hgt);
    g.fillStyle = "rgba(217,48,37,.9)";
    g.fillRect(x0, 0, Math.max(x1 - x0, 1), 3);
    shown++;
  }
  return shown;
}
