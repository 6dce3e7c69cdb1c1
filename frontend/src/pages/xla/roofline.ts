// Roofline: each HLO op's operational intensity (FLOPs per byte) against its achieved
// GFLOP/s on log–log axes, under the device's roofs (bandwidth × intensity, then the peak),
// for the whole run or one step; hovering (or focusing) a point shows its figures.
import { toolData } from "../../api";
import { h, int, ms, svg } from "../../dom";
import type { PageContext } from "../registry";
import { fig, RooflineData, RoofPoint } from "./data";
import { xlaStyle } from "./style";

const W = 760, H = 420, LEFT = 70, RIGHT = 20, TOP = 20, BOTTOM = 50;
const COLORS: Record<string, string> = { compute: "#1a73e8", memory: "#e37400", other: "#80868b" };

function decades(lo: number, hi: number): [number, number] {
  return [Math.floor(Math.log10(lo)), Math.ceil(Math.log10(hi))];
}

function chart(data: RooflineData, points: RoofPoint[]): HTMLElement {
  const xs = points.map((p) => p.operational_intensity).filter((v) => v > 0);
  const ys = points.map((p) => p.gflops_per_s).filter((v) => v > 0);
  // The memory roof in GFLOP/s is intensity × 10^9 bytes/s; the peak is given in GiB/s.
  const peak = data.peak_gflops_per_s, ridge = data.ridge_point;
  const bw = data.peak_gbytes_per_s === null ? null : data.peak_gbytes_per_s * 2 ** 30 / 1e9;
  if (ridge) xs.push(ridge);
  if (peak) ys.push(peak);
  const [x0, x1] = decades(Math.min(...xs, 0.01), Math.max(...xs, 1) * 1.01);
  const [y0, y1] = decades(Math.min(...ys, 0.01), Math.max(...ys, 1) * 1.01);
  const px = (v: number) => LEFT + ((Math.log10(v) - x0) / Math.max(x1 - x0, 1)) * (W - LEFT - RIGHT);
  const py = (v: number) => TOP + (1 - (Math.log10(v) - y0) / Math.max(y1 - y0, 1)) * (H - TOP - BOTTOM);
  const root = svg("svg", { id: "roofline-svg", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                            role: "group", "aria-label": "Roofline chart",
                            "data-points": points.length });
  for (let d = x0; d <= x1; d++) {
    root.append(svg("line", { x1: px(10 ** d), x2: px(10 ** d), y1: TOP, y2: H - BOTTOM, stroke: "#eceff1" }),
                svg("text", { x: px(10 ** d), y: H - BOTTOM + 16, "text-anchor": "middle", "font-size": 11,
                              fill: "#5f6368" }, `1e${d}`));
  }
  for (let d = y0; d <= y1; d++) {
    root.append(svg("line", { x1: LEFT, x2: W - RIGHT, y1: py(10 ** d), y2: py(10 ** d), stroke: "#eceff1" }),
                svg("text", { x: LEFT - 6, y: py(10 ** d) + 4, "text-anchor": "end", "font-size": 11,
                              fill: "#5f6368" }, `1e${d}`));
  }
  root.append(svg("text", { x: (LEFT + W - RIGHT) / 2, y: H - 12, "text-anchor": "middle", "font-size": 12 },
                  "Operational intensity (FLOP/byte)"),
              svg("text", { x: 14, y: (TOP + H - BOTTOM) / 2, "font-size": 12, "text-anchor": "middle",
                            transform: `rotate(-90 14 ${(TOP + H - BOTTOM) / 2})` }, "GFLOP/s"));
  if (peak && bw && ridge) {
    const xa = 10 ** x0, xb = 10 ** x1;
    const memStart = Math.max(xa, (10 ** y0) / bw);
    root.append(svg("polyline", { id: "roof", fill: "none", stroke: "#d93025", "stroke-width": 2,
      points: `${px(memStart)},${py(memStart * bw)} ${px(ridge)},${py(peak)} ${px(xb)},${py(peak)}` }),
      svg("text", { x: px(xb) - 4, y: py(peak) - 6, "text-anchor": "end", "font-size": 11, fill: "#d93025" },
          `peak ${fig(peak)} GFLOP/s`),
      svg("text", { x: px(ridge) - 4, y: py(peak) + 14, "text-anchor": "end", "font-size": 11,
                    fill: "#d93025" },
          `ridge ${fig(ridge)} FLOP/B`));
  }
  const wrap = h("div", { className: "roof-wrap" });
  const card = h("div", { className: "roof-card", id: "roof-card", role: "tooltip", hidden: true });
  points.forEach((p, i) => {
    const g = svg("g", { class: "roof-point", tabindex: 0, "data-name": p.name,
                         "data-bound": p.bound_by, "aria-label": `${p.name}: ${fig(p.gflops_per_s)} GFLOP/s` });
    const cx = px(Math.max(p.operational_intensity, 10 ** x0));
    const cy = py(Math.max(p.gflops_per_s, 10 ** y0));
    const r = Math.max(3, Math.min(12, 3 + Math.sqrt(p.self_ms)));
    g.append(svg("circle", { cx, cy, r, fill: COLORS[p.bound_by] ?? COLORS.other, "fill-opacity": 0.7 }));
    const show = () => {
      card.replaceChildren(h("h3", {}, p.name), h("dl", { className: "kv" },
        h("dt", {}, "Program"), h("dd", {}, p.module), h("dt", {}, "Category"), h("dd", {}, p.category),
        h("dt", {}, "Intensity"), h("dd", {}, `${fig(p.operational_intensity)} FLOP/B`),
        h("dt", {}, "Rate"), h("dd", { "data-key": "gflops" }, `${fig(p.gflops_per_s)} GFLOP/s` +
          (p.flops_estimated ? " (estimated FLOPs)" : "")),
        h("dt", {}, "Bandwidth"), h("dd", {}, `${fig(p.gbytes_per_s)} GiB/s`),
        h("dt", {}, "Self time"), h("dd", {}, `${ms(p.self_ms)} ms × ${int(p.occurrences)}`),
        h("dt", {}, "Bound by"), h("dd", {}, p.bound_by)));
      card.hidden = false;
      card.style.left = `${Math.min(cx + 12, W - 200)}px`;
      card.style.top = `${cy + 12}px`;
      card.dataset.name = p.name;
    };
    g.addEventListener("mouseenter", show);
    g.addEventListener("focus", show);
    g.addEventListener("mouseleave", () => { card.hidden = true; });
    g.addEventListener("blur", () => { card.hidden = true; });
    root.append(g);
    void i;
  });
  wrap.append(root, card);
  return wrap;
}

export async function renderRoofline(ctx: PageContext): Promise<HTMLElement> {
  const data = await toolData<RooflineData>({ run: ctx.run, host: ctx.host, tool: "roofline_model" }, ctx.progress);
  const page = h("div", { id: "roofline-page", className: "xla-page" }, xlaStyle(),
                 h("h1", {}, `Roofline model — ${data.run}${ctx.host ? " — " + ctx.host : ""}`));
  const d = data.device;
  page.append(h("p", { id: "roof-device" }, `${d.name || "unknown device"}: ` +
    (data.peak_gflops_per_s === null ? "unknown peak (no roofs drawn)"
      : `peak ${fig(data.peak_gflops_per_s)} GFLOP/s, ${fig(data.peak_gbytes_per_s)} GiB/s`)),
    ...data.notes.map((n) => h("p", { className: "note" }, n)));
  if (data.unplaced) {
    page.append(h("p", { className: "muted", id: "roof-unplaced" },
      `${int(data.unplaced)} ops have no FLOPs or bytes (unknown, or none as for copies) ` +
      "and are not placed."));
  }
  const select = h("select", { id: "roof-step", "aria-label": "Step" },
    h("option", { value: "" }, "Whole run"),
    ...data.steps.map((s) => h("option", { value: String(s) }, `Step ${s}`)));
  const slot = h("section", { className: "card wide" });
  const draw = () => {
    const step = select.value === "" ? null : Number(select.value);
    const points = data.points.filter((p) => p.step === step);
    slot.replaceChildren(points.length ? chart(data, points)
      : h("p", { id: "no-points" }, "No op with known FLOPs and bytes here."));
  };
  select.addEventListener("change", draw);
  draw();
  page.append(h("div", { className: "controls" }, select), slot);
  return page;
}
