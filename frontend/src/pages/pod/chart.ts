// Pod viewer drawing: one stacked SVG column per host (its figures' categories bottom to top),
// the straggler's column marked, and a hover card (also on keyboard focus) with the column's
// figures. Names reach the chart only as text nodes and attribute values.
import { h, ms, svg } from "../../dom";
import { CATEGORIES, Figures } from "./data";

export interface Column {
  name: string;
  figures: Figures | null; // null: this host has no figures here
  straggler: boolean;
  chosen: boolean; // the host picked in the navigation bar
}

/** One line of the hover card: a label and a figure in ms (or ``text`` instead). */
export interface CardRow { key: string; label: string; value: number | null; color?: string;
  text?: string; }

export interface ChartOptions {
  id: string;
  columns: Column[];
  max: number; // the value at the top of the scale (ms)
  label: string; // what the chart shows, for screen readers
  card: (c: Column) => { title: string; rows: CardRow[] };
  attrs?: Record<string, string>; // extra attributes of the <svg> (data-*)
}

const PLOT_H = 240;
const TOP = 30;
const PAD_LEFT = 60; // room for the scale
const RIGHT = 16;
const MARK = "#e37400"; // the straggler's outline and label
const MAX_LABEL = 24;

/** A round tick spacing giving about five ticks up to ``max``. */
function tickStep(max: number): number {
  const raw = max / 5;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const m = raw / p;
  return (m > 5 ? 10 : m > 2 ? 5 : m > 1 ? 2 : 1) * p;
}

function clip(name: string): string {
  return name.length > MAX_LABEL ? name.slice(0, MAX_LABEL - 1) + "…" : name;
}

function cardBody(title: string, rows: CardRow[]): Node[] {
  return [
    h("h3", {}, title),
    h("dl", { className: "kv" }, ...rows.flatMap((r) => [
      h("dt", {}, r.color ? h("span", { className: "swatch", style: `background:${r.color}` })
        : null, r.label),
      h("dd", { "data-key": r.key, "data-value": r.value === null ? undefined : String(r.value) },
        r.text ?? (r.value === null ? "–" : `${ms(r.value)} ms`)),
    ])),
  ];
}

/** The chart: an SVG of stacked columns and its hover card, in one positioned box. */
export function columnChart(o: ChartOptions): HTMLElement {
  const n = Math.max(o.columns.length, 1);
  const slot = Math.max(56, Math.min(120, 960 / n));
  const colW = Math.min(slot * 0.62, 64);
  const longest = Math.max(...o.columns.map((c) => clip(c.name).length), 1);
  const tilt = longest * 6.5 > slot - 6;
  // A tilted label reaches left and down by its length's cosine and sine (35°).
  const reach = longest * 6.2;
  const bottom = tilt ? Math.min(reach * 0.58 + 28, 150) : 30;
  const plotLeft = Math.max(PAD_LEFT, tilt ? reach * 0.82 - slot / 2 + 6 : 0);
  const width = plotLeft + slot * n + RIGHT;
  const height = TOP + PLOT_H + bottom;
  const max = o.max > 0 ? o.max : 1;
  const step = tickStep(max);
  const top = Math.ceil(max / step - 1e-9) * step;
  const y = (v: number) => TOP + PLOT_H - (v / top) * PLOT_H;

  const chart = svg("svg", { id: o.id, width, height, viewBox: `0 0 ${width} ${height}`,
                             role: "group", "aria-label": o.label, class: "pod-svg",
                             ...(o.attrs ?? {}) });
  for (let v = 0; v <= top + step / 2; v += step) {
    chart.append(svg("line", { x1: plotLeft, x2: width - RIGHT, y1: y(v), y2: y(v),
                               stroke: v ? "#eceff1" : "#9aa0a6" }),
                 svg("text", { x: plotLeft - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11,
                               fill: "#5f6368" }, `${+v.toPrecision(6)}`));
  }
  chart.append(svg("text", { x: 6, y: TOP - 12, "font-size": 11, fill: "#5f6368" }, "ms"));

  const wrap = h("div", { className: "pod-chart-wrap" });
  const card = h("div", { className: "pod-card", id: `${o.id}-card`, role: "tooltip",
                          hidden: true });
  const show = (c: Column, g: SVGElement) => {
    const { title, rows } = o.card(c);
    card.replaceChildren(...cardBody(title, rows));
    card.dataset.host = c.name;
    card.hidden = false;
    const box = wrap.getBoundingClientRect();
    const at = g.getBoundingClientRect();
    const w = card.offsetWidth;
    let left = at.right - box.left + 8;
    if (left + w > box.width) left = Math.max(at.left - box.left - w - 8, 0);
    card.style.left = `${left}px`;
    card.style.top = `${Math.max(at.top - box.top + TOP, 0)}px`;
  };
  const hide = () => { card.hidden = true; delete card.dataset.host; };

  o.columns.forEach((c, i) => {
    const x = plotLeft + slot * i + (slot - colW) / 2;
    const total = c.figures?.total_ms ?? 0;
    const g = svg("g", { class: "pod-col" + (c.straggler ? " straggler" : ""), tabindex: 0,
                         "data-host": c.name, "data-total": c.figures ? String(total) : "",
                         "aria-label": c.figures ? `${c.name}: ${ms(total)} ms` + (c.straggler
                           ? ", the straggler" : "") : `${c.name}: no figures` });
    g.append(svg("rect", { class: "pod-hit", x: plotLeft + slot * i + 2, y: TOP - 22,
                           width: slot - 4, height: PLOT_H + 22, fill: "transparent" }));
    if (c.figures) {
      let base = 0;
      for (const cat of CATEGORIES) {
        const v = Math.max(c.figures[cat.key], 0);
        g.append(svg("rect", { class: "pod-seg", "data-category": cat.key, "data-value": v,
                               x, y: y(base + v), width: colW,
                               height: Math.max(y(base) - y(base + v), 0), fill: cat.color }));
        base += v;
      }
      if (c.straggler) {
        g.append(svg("rect", { x: x - 2, y: y(base) - 2, width: colW + 4,
                               height: y(0) - y(base) + 2, fill: "none", stroke: MARK,
                               "stroke-width": 2.5 }),
                 svg("text", { class: "pod-mark", x: x + colW / 2, y: y(base) - 7,
                               "text-anchor": "middle", "font-size": 11, "font-weight": "bold",
                               fill: MARK }, "▲ straggler"));
      }
    } else {
      g.append(svg("rect", { x, y: y(0) - 24, width: colW, height: 24, fill: "none",
                             stroke: "#bdc1c6", "stroke-dasharray": "3 3" }),
               svg("text", { x: x + colW / 2, y: y(0) - 8, "text-anchor": "middle",
                             "font-size": 10, fill: "#5f6368" }, "no data"));
    }
    const lx = plotLeft + slot * i + slot / 2, ly = TOP + PLOT_H + 16;
    g.append(svg("text", { class: "pod-label", x: lx, y: ly, "font-size": 11,
                           "font-weight": c.chosen || c.straggler ? "bold" : "normal",
                           fill: "#202124", "text-anchor": tilt ? "end" : "middle",
                           ...(tilt ? { transform: `rotate(-35 ${lx} ${ly})` } : {}) },
                     clip(c.name)));
    g.addEventListener("mouseenter", () => show(c, g));
    g.addEventListener("focus", () => show(c, g));
    g.addEventListener("mouseleave", hide);
    g.addEventListener("blur", hide);
    chart.append(g);
  });
  wrap.append(h("div", { className: "pod-chart-scroll" }, chart), card);
  return wrap;
}

/** The colours' legend. */
export function legend(id: string): HTMLElement {
  return h("div", { className: "pod-legend", id },
    ...CATEGORIES.map((c) => h("span", { "data-category": c.key },
      h("span", { className: "swatch", style: `background:${c.color}` }), c.label)),
    h("span", {}, h("span", { className: "swatch pod-mark-swatch" }), "Straggler"));
}
